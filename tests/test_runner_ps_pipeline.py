"""Parameter server (sync, async), central storage and pipeline on gloo: protocol, trace, metrics.

Numerics against `single` live in test_runner_numerics.py; the launches here use the
same small specs, so `run_small`'s cache shares them within one pytest process.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict

import pytest

from opentikz_dt.errors import SpecError
from opentikz_dt.shards import assign_tensors, shard_assignment, tensor_sizes
from opentikz_dt.spec import spec_from_data

# lr 0.5 with momentum: the loss visibly falls within the 6 steps of a small run
OPT = {"training": {"optimizer": {"lr": 0.5, "momentum": 0.9}}}
PS_SYNC = {**OPT, "topology": {"workers": {"count": 2}, "servers": {"count": 2}}}
PS_ASYNC = {**OPT, "strategy": {"sync": "async"},
            "topology": {"workers": {"count": 2, "slowdown": {"w2": 2.0}}, "servers": {"count": 2}}}
CENTRAL = {**OPT, "topology": {"workers": {"count": 2}}}
PIPE_1F1B = {"training": {"optimizer": {"lr": 0.5, "momentum": 0.9}, "batch_size": 64},
             "topology": {"workers": {"count": 3}}, "strategy": {"schedule": "1f1b", "microbatches": 4}}


def _small(kind, overrides):
    from opentikz_dt.runner.testing import small_spec_data

    return small_spec_data(kind, **overrides)


def _run(kind, overrides, tmp_path_factory):
    from opentikz_dt.runner.testing import run_small

    return run_small(_small(kind, overrides), tmp_path_factory.mktemp(kind))


def _trace(result):
    return json.loads((result.run_dir / "trace.json").read_text())["traceEvents"]


def _spans(events, name=None):
    return [e for e in events if e["ph"] == "X" and (name is None or e["name"] == name)]


def _names_by_rank(events):
    names = defaultdict(set)
    for e in _spans(events):
        names[e["pid"]].add(e["name"])
    return names


def _assert_lanes_nest(events):
    """Chrome drops overlapping slices on one thread: spans on a (pid, tid) must nest."""
    lanes = defaultdict(list)
    for e in _spans(events):
        lanes[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"], e["name"]))
    for lane, spans in lanes.items():
        spans.sort()
        for a, b in zip(spans, spans[1:]):
            assert b[0] >= a[1] - 0.002 or b[1] <= a[1] + 0.002, (lane, a, b)


def _assert_flows_pair(events, pushes):
    starts = Counter(e["id"] for e in events if e["ph"] == "s")
    ends = Counter(e["id"] for e in events if e["ph"] == "f")
    assert starts == ends
    assert sum(starts.values()) == pushes


# --- pure parts (no torch) ---------------------------------------------------------------

def test_shard_assignment_balances_whole_tensors():
    spec = spec_from_data({"strategy": {"kind": "parameter-server"}, "topology": {"servers": {"count": 2}},
                           "training": {"model": {"layers": [32, 128, 128, 10]}}})
    assert shard_assignment(spec) == {
        "ps1": ["layers.1.weight"],
        "ps2": ["layers.0.weight", "layers.0.bias", "layers.1.bias", "layers.2.weight", "layers.2.bias"],
    }


def test_shard_assignment_gives_every_shard_a_tensor_and_keeps_model_order():
    sizes = tensor_sizes([4, 4, 4])  # 16, 4, 16, 4
    owned = assign_tensors(sizes, ["ps1", "ps2", "ps3", "ps4"])
    assert owned == {"ps1": ["layers.0.weight"], "ps2": ["layers.1.weight"],
                     "ps3": ["layers.0.bias"], "ps4": ["layers.1.bias"]}


def test_single_server_owns_everything():
    spec = spec_from_data({"strategy": {"kind": "parameter-server"}})
    assert shard_assignment(spec) == {"ps": spec.training.param_tensors}


def test_pipeline_stage_bounds_and_1f1b_microbatch_rule():
    pytest.importorskip("torch")
    from opentikz_dt.runner.strategies import pipeline

    assert pipeline.stage_bounds(3, 2) == [0, 2, 3]
    assert pipeline.stage_bounds(5, 3) == [0, 2, 4, 5]
    # 1F1B with fewer microbatches than stages is refused when the spec loads, before any launch.
    with pytest.raises(SpecError) as err:
        spec_from_data({"strategy": {"kind": "pipeline", "schedule": "1f1b", "microbatches": 2},
                        "topology": {"workers": {"count": 3}}, "training": {"batch_size": 32}})
    assert [i.message for i in err.value.issues] == ["1f1b needs at least as many microbatches as stages (3), got 2"]


# --- launches ----------------------------------------------------------------------------

@pytest.mark.dist
def test_sync_parameter_server_two_shards(tmp_path_factory):
    result = _run("parameter-server", PS_SYNC, tmp_path_factory)
    loss = result.metrics["loss"]
    assert len(loss) == 6 and loss[-1] < loss[0]
    events = _trace(result)
    names = _names_by_rank(events)
    for rank in (0, 1):
        assert {"fetch", "forward", "backward", "push"} <= names[rank]
    for rank in (2, 3):
        assert {"update", "wait"} <= names[rank]
    updates = _spans(events, "update")
    assert len(updates) == 2 * 6 and {u["args"]["staleness"] for u in updates} == {0}
    assert sorted(u["args"]["version"] for u in updates if u["pid"] == 2) == [1, 2, 3, 4, 5, 6]
    _assert_flows_pair(events, pushes=2 * 2 * 6)
    _assert_lanes_nest(events)
    run = json.loads((result.run_dir / "run.json").read_text())
    assert [(r["role"], r["id"]) for r in run["ranks"]] == [
        ("worker", "w1"), ("worker", "w2"), ("server", "ps1"), ("server", "ps2")]


@pytest.mark.dist
def test_async_parameter_server_records_staleness(tmp_path_factory):
    result = _run("parameter-server", PS_ASYNC, tmp_path_factory)
    staleness = result.metrics["staleness"]
    assert len(staleness) == 2 * 2 * 6  # every update of every shard
    assert min(staleness) >= 0 and max(staleness) >= 1  # two workers in flight: some push is stale
    events = _trace(result)
    assert "slowdown" in _names_by_rank(events)[1]
    for server in (2, 3):
        updates = sorted(_spans(events, "update"), key=lambda e: e["ts"])
        updates = [u for u in updates if u["pid"] == server]
        assert [u["args"]["version"] for u in updates] == list(range(1, 13))
        # a budget of 6 steps x 2 workers, shared by whoever is free; metrics say who did how many
        assert Counter(u["args"]["worker"] for u in updates) == result.metrics["steps_per_worker"]
        # staleness = updates applied since that worker's last one (its weights were sent then)
        last = {}
        for u in updates:
            worker, version = u["args"]["worker"], u["args"]["version"]
            assert u["args"]["staleness"] == version - 1 - last.get(worker, 0)
            last[worker] = version
    assert sorted(staleness) == sorted(float(u["args"]["staleness"]) for u in _spans(events, "update"))
    _assert_flows_pair(events, pushes=2 * 2 * 6)
    _assert_lanes_nest(events)


@pytest.mark.dist
def test_async_workers_never_wait_for_a_straggler(tmp_path):
    """The seeds' async PS: a budget of steps x workers updates goes to whichever worker is
    free, so the fast worker does more of them and all end together (on main each did
    exactly `steps` and the fast one idled at the end)."""
    from opentikz_dt.runner.testing import run_small

    data = _small("parameter-server", {**PS_ASYNC, "topology": {"workers": {"count": 2, "slowdown": {"w2": 30.0}},
                                                                "servers": {"count": 1}}})
    result = run_small(data, tmp_path, cache=False)
    pushes = _spans(_trace(result), "push")
    done = Counter(e["args"]["id"] for e in pushes)
    assert sum(done.values()) == 2 * 6 and done["w1"] > done["w2"] >= 1
    assert result.metrics["steps_per_worker"] == done
    assert len(result.metrics["loss"]) == 6 and None not in result.metrics["loss"]
    assert sorted(e["args"]["ticket"] for e in pushes) == list(range(12))  # each update of the budget once
    for e in pushes:  # ticket t is slice t % 2 of global step t // 2, the samples sync would use
        assert e["args"]["step"] == e["args"]["ticket"] // 2
    rates = result.metrics["per_worker_samples_per_s"]
    assert sum(rates.values()) == pytest.approx(result.metrics["samples_per_s"], rel=1e-3)


@pytest.mark.dist
def test_async_parameter_server_resumes_from_the_servers_checkpoint(tmp_path):
    from opentikz_dt.runner.testing import run_small

    data = _small("parameter-server", {**PS_ASYNC, "training": {**OPT["training"], "steps": 10},
                                       "runtime": {"restarts": 1, "checkpoint_every": 4,
                                                   "fault": {"rank": 1, "at_step": 6, "kind": "crash"}}})
    result = run_small(data, tmp_path, cache=False)
    assert result.run["status"] == "ok" and result.run["attempts"] == 2
    assert result.metrics["steps_done"] == 10 and None not in result.metrics["loss"]
    for rank in (1, 2):  # a worker and a server shard
        log = (result.run_dir / "logs" / f"rank{rank}.log").read_text()
        assert "resuming from the checkpoint after step 3" in log
    # Exactly one update per push per shard: the 4 steps before the checkpoint are not redone,
    # the ones after it (lost with the crash) are applied once more from the saved state.
    assert len(result.metrics["staleness"]) == 2 * 2 * 10
    for server in (2, 3):
        versions = [json.loads(line) for line in (result.run_dir / "trace" / f"rank{server}.jsonl").open()]
        versions = [e["args"]["version"] for e in versions if e.get("name") == "update"]
        assert versions[-12:] == list(range(9, 21))  # the restored global update count goes on


@pytest.mark.dist
def test_central_storage_trace(tmp_path_factory):
    result = _run("central-storage", CENTRAL, tmp_path_factory)
    loss = result.metrics["loss"]
    assert loss[-1] < loss[0]
    events = _trace(result)
    names = _names_by_rank(events)
    assert {"fetch", "forward", "backward", "push"} <= names[0] and names[0] == names[1]
    assert {"fetch", "wait", "update"} <= names[2]
    assert len(_spans(events, "update")) == 6
    _assert_flows_pair(events, pushes=2 * 6)
    _assert_lanes_nest(events)
    run = json.loads((result.run_dir / "run.json").read_text())
    assert [(r["role"], r["id"]) for r in run["ranks"]] == [("worker", "w1"), ("worker", "w2"), ("storage", "ps")]


@pytest.mark.dist
def test_pipeline_1f1b_microbatch_spans(tmp_path_factory):
    result = _run("pipeline", PIPE_1F1B, tmp_path_factory)
    loss = result.metrics["loss"]
    assert len(loss) == 6 and loss[-1] < loss[0]
    events = _trace(result)
    for kind in ("forward", "backward"):
        seen = Counter((e["pid"], e["args"]["stage"], e["args"]["mb"]) for e in _spans(events, kind))
        assert seen == {(rank, rank + 1, mb): 6 for rank in range(3) for mb in range(4)}
    recvs = Counter((e["pid"], e["args"]["direction"]) for e in _spans(events, "recv"))
    assert recvs == {(1, "fwd"): 24, (2, "fwd"): 24, (0, "bwd"): 24, (1, "bwd"): 24}
    # 1F1B: each stage runs its ops in the order the expected timeline and the simulator
    # schedule by (strategies/pipeline.stage_ops); the first stage starts backward of mb 0
    # before it runs forward of mb 3
    from opentikz_dt.strategies.pipeline.strategy import stage_ops

    for rank in range(3):
        spans = sorted((e["ts"], e["name"][0].upper(), e["args"]["mb"]) for e in _spans(events)
                       if e["pid"] == rank and e["args"]["step"] == 1 and e["name"] in ("forward", "backward"))
        assert [(op, mb) for _, op, mb in spans] == stage_ops("1f1b", rank, 3, 4), rank
    assert stage_ops("1f1b", 0, 3, 4).index(("B", 0)) < stage_ops("1f1b", 0, 3, 4).index(("F", 3))
    _assert_lanes_nest(events)
