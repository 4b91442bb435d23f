"""Golden .tex files: the generated TeX changes only on purpose.

Regenerate deliberately with DTGEN_REGEN_GOLDEN=1 (then review the diff), never silently.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from opentikz_dt.figures.render import render_timeline, render_topology
from opentikz_dt.spec import load_spec

GOLDEN = Path(__file__).resolve().parent / "golden"
CASES = ["ps-sync", "ps-sharded", "allreduce-ring", "pipeline-1f1b", "gossip", "fsdp-tensor"]


@pytest.mark.parametrize("kind", ["topology", "timeline"])
@pytest.mark.parametrize("name", CASES)
def test_generated_tex_matches_golden(name, kind, repo, monkeypatch):
    monkeypatch.chdir(repo)  # the header names the spec by its relative path
    spec = load_spec(Path("examples") / f"{name}.yaml")
    tex = render_topology(spec) if kind == "topology" else render_timeline(spec)
    golden = GOLDEN / f"{name}-{kind}.tex"
    if os.environ.get("DTGEN_REGEN_GOLDEN") == "1":
        golden.write_text(tex, encoding="utf-8")
    assert golden.exists(), f"no golden file {golden.name}; run with DTGEN_REGEN_GOLDEN=1 and review it"
    assert tex == golden.read_text(encoding="utf-8"), (
        f"{golden.name} differs; if the change is intended, rerun with DTGEN_REGEN_GOLDEN=1 and review the diff")
