"""The multi-stage pipeline schedules on a mesh's pipeline dimension
(docs/pipeline-schedules.md): the simulator (which the expected timeline draws) places each
pipeline rank's operations in the order torch's schedule class issues (one source:
pipeline_schedules.rank_orders), and a real run executes that order on every replica.
The numerics against `single` are in tests/test_runner_numerics.py."""

from __future__ import annotations

import importlib.util
import json

import pytest

from opentikz_dt.predict.calibration import illustrative_calibration

from opentikz_dt.predict.costs import Costs
from opentikz_dt.predict.expected import illustrative_timeline
from opentikz_dt.predict.simulate import simulate
from opentikz_dt.spec import spec_from_data
from opentikz_dt.strategies.pipeline_schedules import rank_orders, rank_stages

needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="the multi-stage orders come from torch's schedule classes")
MODEL = {"layers": [16, 32, 32, 32, 4]}  # 4 layers: 2 pipeline ranks x 2 chunks
GRAD = {"both": "B", "input": "I", "weight": "W"}


def _mesh(schedule: str, micro: int = 4, tensor: int = 1, **strategy):
    return spec_from_data({"strategy": {"kind": "mesh", "parallelism": {"pipeline": 2, "data": 2, "tensor": tensor},
                                        "schedule": schedule, "microbatches": micro, **strategy},
                           "topology": {"workers": {"count": 4 * tensor}},
                           "training": {"model": MODEL, "batch_size": 8, "steps": 3}})


def _wanted(schedule: str, rank: int, micro: int = 4):
    """(op, mb, virtual stage) of pipeline rank `rank`, F/B/I/W as torch's table has them."""
    return list(rank_orders(schedule, 2, micro, 2)[rank])


@needs_torch
@pytest.mark.parametrize("schedule", ["interleaved-1f1b", "zbv-zero-bubble", "dualpipev"])
def test_expected_mesh_timeline_follows_the_schedule_s_order(schedule):
    spec = _mesh(schedule)
    lanes = {lane.id: lane for lane in illustrative_timeline(spec).panels[0].lanes}
    kinds = {"forward": "F", "wgrad": "W"}
    for rank in (0, 1):
        chunk = {st: "ab"[k] for k, st in enumerate(rank_stages(schedule, rank, 2, 2))}
        want = [(op, f"{mb + 1}{chunk[st]}") for op, mb, st in _wanted(schedule, rank)]
        # pipeline rank 0 is workers w1, w2 (its data replicas), rank 1 w3, w4
        boxes = [b for b in lanes[f"w{2 * rank + 1}"].boxes if b.kind in ("forward", "backward", "wgrad")]
        got = [(kinds.get(b.kind, "B"), b.label) for b in boxes[:len(want)]]  # the first step
        # the figure draws I as a backward box: compare B and I alike
        assert got == [("B" if op == "I" else op, label) for op, label in want]


@needs_torch
def test_predicted_mesh_trace_follows_the_schedule_s_order_on_every_replica():
    schedule = "zbv-zero-bubble"
    spec = _mesh(schedule)
    result = simulate(spec, Costs(illustrative_calibration(spec), spec), steps=2)
    for pid in range(4):  # ranks 0, 1: pipeline rank 0 of both replicas; 2, 3: pipeline rank 1
        spans = sorted((e for e in result.events[pid] if e.get("ph") == "X" and e["args"]["step"] == 1
                        and e["name"] in ("forward", "backward")), key=lambda e: e["ts"])
        got = [("F" if e["name"] == "forward" else GRAD[e["args"].get("grad", "both")], e["args"]["mb"],
                e["args"]["stage"] - 1) for e in spans]
        assert got == _wanted(schedule, pid // 2)
    assert {e["args"].get("chunk") for e in result.events[0] if e["name"] == "forward"} == {0, 1}
    # a V's turn (virtual stage 2 -> 3, 1-based, both on pipeline rank 1) sends nothing;
    # stage 2's backward goes to stage 1 on pipeline rank 0
    sends = [e for e in result.events[2] if e["name"] == "send" and e["args"]["step"] == 1 and e["args"]["stage"] == 2]
    assert {e["args"]["direction"] for e in sends} == {"bwd"}


def _compute_order(run_dir, rank: int, step: int) -> list:
    events = json.loads((run_dir / "trace.json").read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    return [("F" if e["name"] == "forward" else GRAD[e["args"]["grad"]], e["args"]["mb"], e["args"]["stage"] - 1)
            for e in sorted(events, key=lambda e: e.get("ts", 0))
            if e.get("pid") == rank and e.get("name") in ("forward", "backward") and e["args"].get("step") == step]


@pytest.mark.dist
@needs_torch
@pytest.mark.parametrize("schedule", ["interleaved-1f1b", "zbv-zero-bubble"])
def test_a_mesh_run_executes_the_schedule_s_order_on_every_replica(schedule, tmp_path):
    """2 pipeline x 2 data ranks: each rank's traced compute (per microbatch and chunk, a
    split backward's I and W apart) in time order is torch's table for its pipeline rank."""
    pytest.importorskip("torch")
    from opentikz_dt.runner.testing import run_small, small_spec_data

    run = run_small(small_spec_data("mesh", topology={"workers": {"count": 4}},
                                    strategy={"parallelism": {"pipeline": 2, "data": 2}, "schedule": schedule,
                                              "microbatches": 4},
                                    training={"model": MODEL, "steps": 2, "batch_size": 8}), root=tmp_path)
    for rank in range(4):
        assert _compute_order(run.run_dir, rank, 1) == _wanted(schedule, rank // 2)
