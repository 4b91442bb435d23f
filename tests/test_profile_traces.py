"""`dtgen figure` on real PyTorch profiler traces that no dtgen code wrote.

Each trace set comes from a plain torchrun-style script in tests/profiled/ (DDP, FSDP2, a
pipeline with torch's 1F1B schedule, tensor parallel), launched here as torchrun would
(two processes on gloo) and profiled with torch.profiler. The checks compare what the
reader found with what the scripts' models must have sent (their parameter and
activation sizes), not with numbers read off the traces.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from opentikz_dt.cli import main
from opentikz_dt.measured.profile_set import load_profile_set
from opentikz_dt.measured.profile_stats import bus_factor, comm_rows, rank_split, select_steps

sys.path.insert(0, str(Path(__file__).resolve().parent / "profiled"))
from launch import launch  # noqa: E402

pytestmark = pytest.mark.dist
FLOAT = 4


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    made = {}

    def get(script: str) -> Path:
        if script not in made:
            out = tmp_path_factory.mktemp(script.removesuffix(".py"))
            launch(script, out)
            made[script] = out
        return made[script]

    return get


def dtgen(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _rows(folder):
    pset = load_profile_set([folder])
    return pset, {(r.kind, r.group): r for r in comm_rows(pset)}


def test_ddp_all_reduce_is_the_gradient_buffer(traces, tmp_path):
    folder = traces("ddp.py")
    pset, rows = _rows(folder)
    assert [p.rank for p in pset.ranks] == [0, 1] and pset.backend == "gloo" and not pset.warnings
    assert [n for n, _, _ in pset.ranks[0].steps] == [1, 2, 3]
    params = 256 * 256 + 256 + 256 * 16 + 16  # one DDP bucket holds every gradient
    row = rows[("all-reduce", (0, 1))]
    assert row.size == params * FLOAT and row.calls_per_step == 1
    assert row.busbw == pytest.approx(row.algbw * 2 * (2 - 1) / 2)
    phases = {p.kind for p in pset.ranks[0].phases}
    assert {"forward", "backward", "optimizer"} <= phases
    result = dtgen("figure", folder, "-o", tmp_path, "--format", "pdf")
    assert result.exit_code == 0, result.output
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [f"measured-{folder.name}-{k}.{e}" for k in ("comm", "timeline", "topology")
                     for e in ("pdf", "tex")]
    timeline = (tmp_path / f"measured-{folder.name}-timeline.tex").read_text()
    assert "measured: torch.profiler traces of 2 ranks (gloo) from" in timeline
    assert "rank 0 (comm)" in timeline and "all-reduce" in timeline


def test_fsdp2_gathers_each_layer_and_reads_gzip(traces):
    folder = traces("fsdp2.py")
    assert all(p.name.endswith(".json.gz") for p in folder.iterdir())
    pset, rows = _rows(folder)
    sizes = sorted({c.size for c in pset.ranks[0].collectives if c.kind == "all-gather"})
    # every all-gather brings one fully_shard unit's whole parameters (both ranks' shards)
    assert sizes == [(256 * 16 + 16) * FLOAT, (256 * 256 + 256) * FLOAT]
    gather = rows[("all-gather", (0, 1))]
    assert gather.calls_per_step == 6  # 3 units, gathered for forward and again for backward
    assert gather.busbw == pytest.approx(gather.algbw * bus_factor("all-gather", 2)) == pytest.approx(gather.algbw / 2)


def test_pipeline_sends_activations_to_the_next_stage(traces, tmp_path):
    folder = traces("pipeline.py")
    pset, rows = _rows(folder)
    microbatch = 32 // 4 * 256 * FLOAT
    send = rows[("send", (0, 1))]
    assert send.size == microbatch and send.calls_per_step == 4  # rank 0 activations, rank 1 gradients
    assert {c.peer for c in pset.ranks[0].collectives if c.kind == "send"} == {1}
    assert {"send", "recv"} <= {p.kind for p in pset.ranks[1].phases}
    result = dtgen("figure", folder, "-o", tmp_path, "--kind", "timeline", "--steps", "2:3")
    assert result.exit_code == 0, result.output
    assert "steps 2\u20133 (as requested)" in (tmp_path / f"measured-{folder.name}-timeline.tex").read_text()


def test_tensor_parallel_all_reduces_the_row_parallel_output(traces):
    folder = traces("tensor.py")
    pset, rows = _rows(folder)
    sizes = {c.size for c in pset.ranks[0].collectives if c.kind == "all-reduce"}
    assert 32 * 256 * FLOAT in sizes  # RowwiseParallel's partial sums, batch x d_model
    window = select_steps(pset, None)
    split = rank_split(pset, pset.ranks[0], window.t0, window.t1)
    assert split.total == pytest.approx(sum(min(e, window.t1) - max(s, window.t0)
                                            for _, s, e in pset.ranks[0].steps if e > window.t0 and s < window.t1))
    assert split.compute > 0 and split.exposed_comm + split.overlapped > 0
