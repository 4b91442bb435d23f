"""Measured figures of real runs: the drawn boxes are the trace's spans, and every figure compiles."""

from __future__ import annotations

import os

import pytest
from measured_helpers import expected_lane_boxes

from opentikz_dt.measured.figures import write_run_figures
from opentikz_dt.measured.run import load_run
from opentikz_dt.measured.timeline import measured_timeline

pytestmark = [pytest.mark.dist, pytest.mark.latex]
CASES = {
    "ps-async": {"topology": {"workers": {"count": 2, "slowdown": {"w2": 2.0}}, "servers": {"count": 1}},
                 "strategy": {"sync": "async"}},
    "pipeline": {"topology": {"workers": {"count": 2}}, "strategy": {"microbatches": 2, "schedule": "1f1b"}},
}


def real_run(kind: str):
    pytest.importorskip("torch")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from opentikz_dt.runner.testing import run_small, small_spec_data

    strategy = "parameter-server" if kind.startswith("ps") else kind
    return run_small(small_spec_data(strategy, **CASES[kind])).run_dir


@pytest.mark.parametrize("kind", sorted(CASES))
def test_real_run_timeline_draws_every_span_of_every_rank(kind):
    run_dir = real_run(kind)
    run = load_run(run_dir)
    m = measured_timeline(run.spec, run.trace, (1, 4))
    lanes = [lane for lane in m.timeline.panels[0].lanes if lane.role != "gap"]
    ids = {ident: rank for rank, ident in run.trace.ids.items()}
    assert {ids[lane.id.removesuffix("-comm")] for lane in lanes} == set(ids.values())
    pipeline = kind == "pipeline"
    if kind.startswith("ps"):  # nothing a PS rank draws overlaps: one lane per rank
        assert not any(lane.id.endswith("-comm") for lane in lanes)
    for lane in lanes:
        expected = expected_lane_boxes(run_dir, ids[lane.id.removesuffix("-comm")], m.window.t0, m.window.t1, pipeline)
        if lane.id.endswith("-comm"):
            expected = [e for e in expected if e[0] in ("fetch", "push", "allreduce", "gossip", "send", "recv", "wait")]
        drawn = sorted((b.kind, b.start_ms, b.end_ms) for b in lane.boxes if b.label not in ("bubble", "idle"))
        if not m.aggregated:
            assert len(drawn) == len(expected), (lane.id, sorted(drawn, key=lambda b: (b[1], b[2])), expected)
            for got, want in zip(sorted(drawn, key=lambda b: (b[1], b[2])), expected):
                assert got[0] == want[0] and got[1] == pytest.approx(want[1], abs=1e-6) \
                    and got[2] == pytest.approx(want[2], abs=1e-6), (lane.id, got, want)


@pytest.mark.parametrize("kind", sorted(CASES))
def test_real_run_figures_compile(kind, tmp_path):
    written = write_run_figures(real_run(kind), tmp_path, ("tex", "pdf"))
    assert sum(p.suffix == ".pdf" for p in written) >= 5
