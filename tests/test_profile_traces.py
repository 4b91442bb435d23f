"""`dtgen figure` on real PyTorch profiler traces that no dtgen code wrote.

Each trace set comes from a plain torchrun-style script in tests/profiled/ (DDP, FSDP2, a
pipeline with torch's 1F1B schedule, tensor parallel), launched here as torchrun would
(two processes on gloo; the four scripts one after another in the same two processes)
and profiled with torch.profiler. The checks compare what the
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


SCRIPTS = ("ddp.py", "fsdp2.py", "pipeline.py", "tensor.py")


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    """The four scripts' traces, made once for the module: run one after another in one
    pair of processes (tests/profiled/together.py), torch imported once per rank."""
    out = tmp_path_factory.mktemp("profiled")
    launch("together.py", out, timeout=300.0, args=SCRIPTS)

    def get(script: str) -> Path:
        return out / script.removesuffix(".py")

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


DDP_SPEC = """name: profiled-ddp
topology:
  workers: {count: 2}
strategy: {kind: allreduce, algorithm: native}
runtime: {backend: gloo, device: cpu}
training:
  steps: 6
  batch_size: 32
  model: {kind: mlp, layers: [256, 256, 16]}
"""


def _compute_per_step(folder) -> list:
    """Each profiled step's forward + backward + optimizer time (s), mean over the ranks, read here."""
    per_step: dict = {}
    for p in load_profile_set([folder]).ranks:
        for number, s, e in p.steps:
            busy = sum(min(ph.end, e) - max(ph.start, s) for ph in p.phases
                       if ph.kind in ("forward", "backward", "optimizer") and ph.end > s and ph.start < e)
            per_step.setdefault(number, []).append(busy / 1e6)
    return [sum(v) / len(v) for v in per_step.values()]


def test_calibrate_from_profile_predicts_the_profiled_compute(traces, tmp_path):
    import json

    from opentikz_dt.predict.calibration import load_calibration
    from opentikz_dt.spec import load_spec

    folder = traces("ddp.py")
    spec = tmp_path / "ddp.yaml"
    spec.write_text(DDP_SPEC)
    cal_path = tmp_path / "cal.json"
    result = dtgen("calibrate", "--from-profile", folder, spec, "-o", cal_path)
    assert result.exit_code == 0, result.output
    # one DDP bucket: one all-reduce size, so its latency cannot be fitted and is said to be unknown
    assert "comm.allreduce: alpha unknown (one message size traced" in result.output
    cal = load_calibration(cal_path, load_spec(spec))
    assert cal.data["comm"]["allreduce"]["alpha_unknown"] is True
    assert "split over the spec's blocks by FLOPs" in cal.data["provenance"]["caption"]
    result = dtgen("predict", spec, "--calibration", cal_path, "-o", tmp_path / "pred")
    assert result.exit_code == 0, result.output
    run = json.loads((tmp_path / "pred" / "run.json").read_text())
    assert "by FLOPs" in run["predicted"]["calibration_note"]
    events = json.loads((tmp_path / "pred" / "trace.json").read_text())["traceEvents"]
    # the predicted compute per rank and step: dtgen's DDP backward span also holds its wait
    # for the bucket's all-reduce (opentikz_dt/strategies/allreduce/predict.py), which is not compute
    per_rank_step: dict = {}
    spans = [e for e in events if e.get("ph") == "X"]
    for e in spans:
        if e["name"] in ("forward", "backward", "optimizer"):
            key = (e["pid"], e["args"]["step"])
            waited = sum(max(0.0, min(e["ts"] + e["dur"], c["ts"] + c["dur"]) - max(e["ts"], c["ts"]))
                         for c in spans if c["name"] == "allreduce" and c["pid"] == e["pid"])
            per_rank_step[key] = per_rank_step.get(key, 0.0) + (e["dur"] - waited) / 1e6
    predicted = sum(per_rank_step.values()) / len(per_rank_step)
    measured = _compute_per_step(folder)
    assert min(measured) <= predicted <= max(measured), (predicted, measured)
    # and, the prediction being deterministic with a device per rank, the profile's mean itself
    assert predicted == pytest.approx(sum(measured) / len(measured), rel=1e-3)


def test_collectives_fit_latency_and_bandwidth_where_sizes_differ(traces):
    from opentikz_dt.predict.profile_fit import comm_samples, fit_alpha_beta

    # FSDP2's all-gathers and reduce-scatters (ring halves of an all-reduce) of two unit sizes
    samples = comm_samples(load_profile_set([traces("fsdp2.py")]))["allreduce"]
    assert len({s[3] for s in samples}) == 2
    # the least squares recover a known latency and bandwidth from exact times at those sizes
    alpha, beta = 5e-5, 1 / 3e9
    exact = [(a, b, a * alpha + b * beta, n, g) for a, b, _, n, g in samples]
    assert fit_alpha_beta(exact) == (pytest.approx(alpha), pytest.approx(beta))
    assert fit_alpha_beta([s for s in exact if s[3] == exact[0][3]]) is None or len({s[1] for s in exact}) > 1
