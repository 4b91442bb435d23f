"""The docs are generated where they can drift: the spec reference (docs/spec.md), the
README's CI command and the tests the oldest torch's job names."""

from __future__ import annotations

import re
from pathlib import Path

from opentikz_dt.reference import BEGIN, END, render_reference

REPO = Path(__file__).resolve().parent.parent


def test_spec_reference_matches_schema():
    spec_doc = (REPO / "docs" / "spec.md").read_text(encoding="utf-8")
    start, end = spec_doc.index(BEGIN), spec_doc.index(END) + len(END)
    assert spec_doc[start:end] == render_reference(), "regenerate: python -m opentikz_dt.reference"


def test_ci_runs_the_readme_test_command():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert "make test " in readme and "make demo " in readme
    # the README's test command, then the runner's core tests on the oldest supported torch,
    # whose download alone runs in the background from the start
    lines = [line.strip() for line in ci.splitlines() if line.startswith("make ")]
    assert [line for line in lines if not line.endswith("&")] == ["make test", "make test-oldest-torch"]
    assert [line.split(">")[0].strip() for line in lines if line.endswith("&")] == ["make oldest-torch"]
    assert "`make test-oldest-torch`" in readme


def test_the_oldest_torchs_job_names_tests_that_exist():
    """The Makefile's CORE_TESTS name tests by node id: a renamed test would leave the
    oldest torch's job with nothing to run (pytest: "not found")."""
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    block = makefile.split("CORE_TESTS :=", 1)[1].split("\n\n", 1)[0]
    named = re.findall(r"(tests/\S+?\.py)(?:::(\w+))?", block)
    assert len(named) >= 5
    for path, test in named:
        source = (REPO / path).read_text(encoding="utf-8")
        assert not test or re.search(rf"^def {test}\(", source, re.M), f"{path}::{test} is not a test there"
