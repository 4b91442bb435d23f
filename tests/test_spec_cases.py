"""Good and bad specs as files: every good one loads, every bad one gives exactly the
messages in its .expected file (one line each, file:line:col: key: message)."""

from __future__ import annotations

import re

from pathlib import Path

import pytest
from click.testing import CliRunner

from opentikz_dt.cli import main
from opentikz_dt.errors import SpecError
from opentikz_dt.spec import load_spec

CASES = Path(__file__).parent / "cases"
GOOD = sorted((CASES / "good").glob("*.yaml"))
BAD = sorted((CASES / "bad").glob("*.yaml"))
EXAMPLES = sorted((Path(__file__).parent.parent / "examples").rglob("*.yaml"))  # custom-model/, hf-gpt2/ too


@pytest.mark.parametrize("path", GOOD + EXAMPLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_good_spec_loads(path):
    spec = load_spec(path)
    assert spec.topology.workers.ids[0] == "w1"
    assert len(spec.topology.workers.ids) == spec.topology.workers.count


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.name)
def test_bad_spec_reports_expected_messages(path):
    expected = path.with_suffix(".expected").read_text(encoding="utf-8").replace("{f}", str(path)).splitlines()
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    assert [str(issue) for issue in caught.value.issues] == expected


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.name)
def test_validate_cli_exit_code_and_no_traceback(path):
    result = CliRunner().invoke(main, ["validate", str(path)])
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    assert re.fullmatch(r"dtgen: error: \d+ problem\(s\) in 1 file\(s\)(; the cross-field rules and invariants run "
                        r"once these are fixed)?", result.output.splitlines()[-1])


def test_every_bad_case_has_an_expected_file():
    assert BAD, "no bad cases found"
    for path in BAD:
        assert path.with_suffix(".expected").is_file(), path
