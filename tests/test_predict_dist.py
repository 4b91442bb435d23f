"""Predictions against real runs: a probe calibration with real processes, and fits from real traces.

Looser bounds than the benchmark's goal (benchmarks/results/predict-*.md have the measured accuracy): the
CI machine is shared and small, so these catch regressions (a unit slip, a lost phase,
a schedule that no longer matches the runner), not noise.
"""

from __future__ import annotations

import statistics

import pytest

from opentikz_dt.measured.run import load_run
from opentikz_dt.predict.calibration import load_calibration
from opentikz_dt.predict.costs import Costs
from opentikz_dt.predict.fit import fit_from_run
from opentikz_dt.predict.rundir import metrics_of
from opentikz_dt.predict.simulate import simulate
from opentikz_dt.spec import spec_from_data

pytestmark = [pytest.mark.dist, pytest.mark.solo, pytest.mark.slow]

# A model whose step is mostly compute (a 6 ms step here): on the tiny default MLP (a 2 ms
# step of which 0.3 ms compute) a ring's self-fit ran 11% to 34% low here and 35% to 41% low
# in a CI run, its step all scheduling noise (the ring's `wait` spans, 0.9 ms a step, are a
# 2-rank ring's waits for a core); on this one it ran -18% to +9% (6 runs, 2026-11-26).
COMPUTE_MODEL = {"model": {"layers": [128, 512, 512, 10]}, "batch_size": 64}
RING = {"strategy": {"kind": "allreduce", "algorithm": "ring"}, "topology": {"workers": {"count": 2}}}

CASES = {
    "allreduce-ring": {**RING, "training": COMPUTE_MODEL},
    "ps-sync": {"strategy": {"kind": "parameter-server", "sync": "sync"},
                "topology": {"workers": {"count": 2}, "servers": {"count": 1}}},
    # fitted collectives: the time from the last rank joining (a mean of whole spans, or the
    # fastest one, was 50% off); gossip: an exchange's spread makes neighbours wait
    "central-storage": {"strategy": {"kind": "central-storage"}, "topology": {"workers": {"count": 3}}},
    "gossip": {"strategy": {"kind": "gossip"}, "topology": {"workers": {"count": 3}}},
    # a mesh of 2 stages x 2 tensor columns (fit_compute of opentikz_dt/strategies/mesh/predict.py: per
    # stage, its chunks less the tensor all-reduces they waited for). At this size the
    # default fit also holds 35%; on the examples it missed by -31% (fsdp-tensor) and -62%
    # (mesh-3d), the mesh's own +6% and -10% (2026-11-26)
    "mesh": {"strategy": {"kind": "mesh", "parallelism": {"pipeline": 2, "tensor": 2}, "microbatches": 2},
             "topology": {"workers": {"count": 4}},
             "training": {"model": {"kind": "transformer", "layers": 2, "d_model": 32, "heads": 4, "seq_len": 16,
                                    "vocab": 64}, "batch_size": 8, "dataset": {"samples": 1024}}},
}


def _data(name):
    from opentikz_dt.runner.testing import small_spec_data

    over = dict(CASES[name])
    return small_spec_data(over.pop("strategy")["kind"], strategy=CASES[name]["strategy"],
                           training={"steps": 24, **over.pop("training", {})}, runtime={"timeout_s": 60}, **over)


def _predicted_step(spec, cal) -> float:
    result = simulate(spec, Costs(cal, spec), spec.training.steps)
    return statistics.fmean(metrics_of(result, spec, spec.training.steps)["step_time_s"].values())


@pytest.mark.parametrize("name", list(CASES))
def test_fit_from_a_real_trace_predicts_the_run(tmp_path, name):
    from opentikz_dt.runner.testing import run_small

    # A 2-core machine under other load can stretch a few steps of a 24-step run by 2x
    # (run-to-run noise up to 64% under load); a second run separates that noise from a
    # model regression, which misses on both.
    misses = []
    for attempt in range(2):
        run = load_run(run_small(_data(name), tmp_path / f"try{attempt}", cache=attempt == 0).run_dir)
        cal = fit_from_run(run.path)
        measured = statistics.fmean(run.metrics["step_time_s"].values())
        predicted = _predicted_step(run.spec, load_calibration(cal.save(run.path / "fit.json"), run.spec))
        if predicted == pytest.approx(measured, rel=0.35):
            return
        misses.append((predicted, measured))
    pytest.fail(f"fitted prediction off by more than 35% in both runs: (predicted, measured) s = {misses}")


def test_calibration_with_real_processes_predicts_a_fresh_run(tmp_path):
    """`dtgen calibrate SPEC`: the probe, then a short run of the spec fitted on top of it;
    its prediction of another run of the spec is close (the probe alone misses the
    runner's untraced work: benchmarks/results/predict-accuracy_cpu2core_2026-11.md)."""
    from opentikz_dt.runner.calibrate import calibrate
    from opentikz_dt.runner.testing import run_small, write_spec

    data = _data("allreduce-ring")
    # compute large enough to measure (tiny layers are all per-call overhead)
    data["training"].update(model={"layers": [64, 512, 512, 10]}, batch_size=256, steps=12,
                            dataset={"samples": 4096})
    spec_path = write_spec(data, tmp_path / "spec")
    spec = spec_from_data(data)
    probe = load_calibration(calibrate(spec, tmp_path / "probe.json"), spec)  # every value present and a number
    assert probe.data["ranks"] == 2 and 1 <= probe.cores <= 2 and probe.data["source"] == "probe"
    from opentikz_dt.predict.calibration import cpu_device

    assert probe.data["device"] == cpu_device() and probe.data["training"] == {"precision": "fp32", "optimizer": "sgd"}
    assert all(b["forward"][1] > 0 or b["forward"][0] > 0 for b in probe.blocks)
    assert probe.comm("p2p")[0] > 0 and probe.comm("allreduce")[0] > 0
    from opentikz_dt.runner.calibrate import COLLECTIVE_ROUNDS

    for kind in ("allreduce", "broadcast", "reduce"):  # timed in rounds; the fit lies within them
        block = probe.data["comm"][kind]
        assert block["measured"] == "probe" and len(block["rounds"]) == COLLECTIVE_ROUNDS
        assert len(probe.data["measured"]["collective_rounds"]) == COLLECTIVE_ROUNDS
    cal = load_calibration(calibrate(spec, tmp_path / "cal.json", run_steps=8, spec_path=spec_path), spec)
    assert cal.data["source"] == "probe and a 8-step run (the median of 3)"
    assert cal.data["device"] == cpu_device()  # the run's, from its run.json
    import os

    from opentikz_dt.runner.crowding import crowded_workers

    crowded = crowded_workers(os.cpu_count() or 1, 2)
    crowding = cal.data["comm"]["p2p"].get("crowding")
    if crowded is None:  # one core, or so many that 2 x cores is past the bound: not made
        assert crowding is None
    else:  # the crowded run's wait per message, fitted from its ring hops (runner/crowding.py)
        assert crowding["processes"] == crowded and crowding["wait_s"] >= 0 and crowding["alone_s"] > 0
        assert crowding["hop_s"] >= crowding["alone_s"]  # solved from its step time, no lower than a message alone
        assert crowding["repeat_ratio"] > 0  # the crowded run repeated (runner/crowding.py)
        # its untraced time, and the strategy it ran with its defaults as made_for holds them: this
        # ring calibration's predictions at more processes grow their untraced time with it
        from opentikz_dt.predict.transfer import crowd_untraced, same_strategy

        assert crowding["untraced_s"] > 0 and same_strategy({"strategy": crowding["strategy"]}, spec)

        assert crowd_untraced(cal, spec_from_data(dict(data, topology={"workers": {"count": 8}})), False) >= 1.0
        if "waits_s" in crowding:  # both runs' hops split: the wait is their mean, by steps (60 and 40)
            first, second = crowding["waits_s"]
            assert crowding["wait_s"] == pytest.approx((60 * first + 40 * second) / 100, abs=2e-9)
    # the spec run three times, fitted from the median run: the other two each a ratio to it, one
    # at or under 1 and one at or over (the median's), and the crowded run's repeat beside them
    repeats = cal.data["noise"]["repeats"]
    assert [r["processes"] for r in repeats] == [2, 2] + ([crowded] if crowding else [])
    assert all(r["ratio"] > 0 for r in repeats)
    assert repeats[0]["ratio"] <= 1 <= repeats[1]["ratio"]
    assert not any(p.name.startswith("dtgen-") for p in tmp_path.iterdir())  # the run went to a temporary folder
    misses = []
    for attempt in range(2):  # a second run separates machine noise from a regression
        run = load_run(run_small(data, tmp_path / f"try{attempt}", cache=attempt == 0).run_dir)
        measured = statistics.fmean(run.metrics["step_time_s"].values())
        predicted = _predicted_step(run.spec, cal)
        if predicted == pytest.approx(measured, rel=0.35):
            return
        misses.append((predicted, measured))
    pytest.fail(f"calibrated prediction off by more than 35% against both runs: (predicted, measured) s = {misses}")


def test_a_python_model_is_predicted_from_its_run_and_from_the_probe(tmp_path):
    """A user's nn.Module: the launcher describes it in run.json (a unit per Sequential child,
    FLOPs counted by torch), so a fit of its run predicts it; the probe describes it too."""
    from pathlib import Path

    from opentikz_dt.predict.blocks import model_blocks
    from opentikz_dt.runner.calibrate import calibrate
    from opentikz_dt.runner.launch import launch_run
    from opentikz_dt.spec import load_spec

    spec_path = Path(__file__).resolve().parents[1] / "examples" / "custom-model" / "spec.yaml"
    misses = []
    for attempt in range(2):  # a second run separates machine noise from a regression
        run = launch_run(spec_path, out=tmp_path / f"run{attempt}", steps=16, progress=False, echo=lambda line: None)
        measured_run = load_run(run.run_dir)
        cal = load_calibration(fit_from_run(run.run_dir).save(tmp_path / "fit.json"), measured_run.spec)
        measured = statistics.fmean(run.metrics["step_time_s"].values())
        predicted = _predicted_step(measured_run.spec, cal)
        if predicted == pytest.approx(measured, rel=0.35):  # against its own run
            break
        misses.append((predicted, measured))
    else:
        pytest.fail(f"fitted prediction of a python model off by more than 35% twice: {misses}")
    assert sum(b.params for b in model_blocks(measured_run.spec)) == run.run["model"]["params"]
    described = run.run["model"]["workload"]
    assert [b["name"] for b in described["blocks"]] == ["0 (Linear)", "1 (LayerNorm)", "2 (GELU)", "3 (Linear)",
                                                        "4 (GELU)", "5 (Linear)"]
    assert described["blocks"][0]["flops"] == 2 * 16 * 64  # one sample through Linear(16, 64)
    spec = load_spec(spec_path)
    probe = load_calibration(calibrate(spec, tmp_path / "probe.json", ranks=2, spec_path=spec_path), spec)
    assert len(probe.blocks) == 6 and probe.data["model"]["workload"] == described
    assert sum(probe.blocks[3]["forward"]) > 0  # the second Linear was timed


# The leave-one-out pairs run a model whose step is mostly compute (128-512-512-10, batch
# 64: about 8 ms a step here), as a real workload's is. With the tiny model of CASES (a
# 2 ms step, all latency and scheduling) the ring fit missed central-storage by -51% to
# -65% and ps-sync by +40% to +236%: per-message waits for a core that a 2-process run
# cannot measure (issue 24, open; the prediction's transfer note says so). Measured with
# this model under load 5 (2026-11-26): central-storage -8%, -11%; ps-sync +2%, +10%.
LEAVE_ONE_OUT_MODEL = {**COMPUTE_MODEL, "steps": 24}
LEAVE_ONE_OUT = {
    "allreduce-ring": RING,
    "central-storage": {"strategy": {"kind": "central-storage"}, "topology": {"workers": {"count": 2}}},
    "ps-sync": CASES["ps-sync"],
}


def _leave_one_out_data(name):
    from opentikz_dt.runner.testing import small_spec_data

    over = dict(LEAVE_ONE_OUT[name])
    return small_spec_data(over.pop("strategy")["kind"], strategy=LEAVE_ONE_OUT[name]["strategy"],
                           training=LEAVE_ONE_OUT_MODEL, runtime={"timeout_s": 60}, **over)


@pytest.mark.parametrize("target", ["central-storage", "ps-sync"])
def test_a_fit_of_one_strategy_predicts_another_of_the_same_model(tmp_path, target):
    """Leave-one-out (issue 24): a calibration fitted from a real ring all-reduce run
    predicts a real run of another strategy of the same model, within a loose bound (the
    benchmark's goal is 25%: benchmarks/results/predict-transfer_cpu2core_2026-11.md). Catches a cost that only means
    something for the strategy it was fitted on (a latency holding a server's queue)."""
    from opentikz_dt.runner.testing import run_small

    reference = load_run(run_small(_leave_one_out_data("allreduce-ring"), tmp_path / "ref").run_dir)
    fit_from_run(reference.path).save(tmp_path / "ring.json")
    misses = []
    for attempt in range(2):  # a second run separates machine noise from a regression
        run = load_run(run_small(_leave_one_out_data(target), tmp_path / f"try{attempt}", cache=attempt == 0).run_dir)
        measured = statistics.fmean(run.metrics["step_time_s"].values())
        predicted = _predicted_step(run.spec, load_calibration(tmp_path / "ring.json", run.spec))
        if predicted == pytest.approx(measured, rel=0.6):
            return
        misses.append((predicted, measured))
    pytest.fail(f"{target} predicted from a ring calibration off by more than 60% in both runs: "
                f"(predicted, measured) s = {misses}")
