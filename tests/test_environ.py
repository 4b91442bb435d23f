"""runner/environ.py: what a launch sets for its ranks is put back as it was, on failure too."""

from __future__ import annotations

import os

import pytest

from opentikz_dt.runner.environ import environment


def test_each_value_set_meanwhile_and_restored_or_removed_after(monkeypatch):
    monkeypatch.setenv("DTGEN_TEST_KEPT", "old")
    monkeypatch.delenv("DTGEN_TEST_NEW", raising=False)
    with pytest.raises(RuntimeError):
        with environment(DTGEN_TEST_KEPT="new", DTGEN_TEST_NEW="1"):
            assert (os.environ["DTGEN_TEST_KEPT"], os.environ["DTGEN_TEST_NEW"]) == ("new", "1")
            monkeypatch.setenv("DTGEN_TEST_OTHER", "set meanwhile")
            raise RuntimeError("the launch failed")
    assert os.environ["DTGEN_TEST_KEPT"] == "old"
    assert "DTGEN_TEST_NEW" not in os.environ
    assert os.environ["DTGEN_TEST_OTHER"] == "set meanwhile"  # not one of its keys: left alone
