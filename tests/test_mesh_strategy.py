"""Hybrid pipeline x data x tensor parallelism (kind: mesh): the grid's rank layout, real
2 x 2 and 2 x 2 x 2 runs whose every collective and pipeline send is traced with its
dimension, a restart resuming from the mesh's checkpoints, the prediction composing the
dimensions the same way, and the timelines naming each collective's dimension.
Numerics (`single` on the global batch): tests/test_runner_numerics.py (-k mesh); bad
input: tests/cases/bad/mesh-*."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from opentikz_dt.predict.expected import illustrative_timeline as expected_timeline
from opentikz_dt.measured.timeline import box_label, phase_name
from opentikz_dt.measured.trace import Span
from opentikz_dt.predict.calibration import illustrative_calibration
from opentikz_dt.predict.costs import Costs
from opentikz_dt.predict.simulate import simulate
from opentikz_dt.runner.testing import TINY_TRANSFORMER
from opentikz_dt.spec import load_spec, spec_from_data
from opentikz_dt.strategies.mesh.strategy import coordinates, degrees, groups, rank_groups, rank_of

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "fsdp-tensor.yaml"
# 2 column/row pairs: per step 2 tensor all-reduces forward, 1 backward (the first pair's
# input is the data, which needs no gradient)
LAYERS = [16, 32, 32, 32, 32, 4]


def _mesh(data: int, tensor: int, **strategy):
    return spec_from_data({"strategy": {"kind": "mesh", "parallelism": {"data": data, "tensor": tensor}, **strategy},
                           "topology": {"workers": {"count": data * tensor}},
                           "training": {"model": {"layers": LAYERS}}})


def test_ranks_fill_the_grid_tensor_innermost():
    spec = _mesh(3, 2)
    assert [(c["data"], c["tensor"]) for c in map(lambda r: coordinates(spec, r), range(6))] == [
        (0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)]
    rows, columns = rank_groups(spec)
    assert rows == [[0, 1], [2, 3], [4, 5]] and columns == [[0, 2, 4], [1, 3, 5]]
    assert groups(spec, "pipeline") == [[r] for r in range(6)]




def _mesh3(pipeline: int = 2, data: int = 2, tensor: int = 2, **strategy):
    return spec_from_data({"strategy": {"kind": "mesh", "parallelism": {"pipeline": pipeline, "data": data,
                                                                        "tensor": tensor}, **strategy},
                           "topology": {"workers": {"count": pipeline * data * tensor}},
                           "training": {"model": dict(TINY_TRANSFORMER)}})


def test_pipeline_is_the_outermost_dimension():
    spec = _mesh3()
    assert coordinates(spec, 5) == {"pipeline": 1, "data": 0, "tensor": 1}
    assert all(rank_of(spec, coordinates(spec, r)) == r for r in range(8))
    assert groups(spec, "tensor") == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert groups(spec, "data") == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert groups(spec, "pipeline") == [[0, 4], [1, 5], [2, 6], [3, 7]]


def test_the_pipeline_dimension_is_named_where_it_is_used_and_only_there():
    from opentikz_dt.strategies import plugin

    spec = _mesh3(data_parallel="fsdp")
    assert spec.title == "Hybrid parallel training (2 pipeline x 2 data x 2 tensor; FSDP across data)"
    assert plugin("mesh").data_parallel_width(spec) == 2  # the replicas; stages and columns share a slice
    # a one- or two-dimensional mesh reads as it did (no pipeline, microbatches ignored)
    flat = _mesh(2, 2, microbatches=3)
    assert flat.title == "Hybrid parallel training (2 data x 2 tensor; all-reduce across data)"
    assert degrees(flat)["pipeline"] == 1


def test_a_mesh_without_degrees_pairs_tensor_ranks_in_data_rows():
    spec = spec_from_data({"strategy": {"kind": "mesh"}, "topology": {"workers": {"count": 6}}})
    assert degrees(spec) == {"pipeline": 1, "data": 3, "tensor": 2}
    assert spec.strategy.options["data_parallel"] == "allreduce"


def test_add_worker_moves_the_replicas_only_by_whole_replicas(tmp_path):
    """A replica is tensor x pipeline workers: a worker count they do not divide leaves
    the degrees as they were, and validation names the product that is off (following
    the count by tensor alone said pipeline 2 x data 3 = 6 for 3 workers)."""
    from opentikz_dt.edit import EditRefusal, edit_file

    path = tmp_path / "spec.yaml"
    path.write_text("strategy: {kind: mesh, parallelism: {pipeline: 2, data: 1, tensor: 1}}\n"
                    "topology: {workers: {count: 2}}\ntraining: {model: {layers: [16, 32, 32, 4]}}\n")
    with pytest.raises(EditRefusal) as caught:
        edit_file(path, "add-worker", {}, compile=False)
    assert [f"{i.path}: {i.message}" for i in caught.value.result.issues] == [
        "strategy.parallelism: pipeline 2 x data 1 x tensor 1 = 2 workers, but topology.workers.count is 3 "
        "(make them equal)"]


def _collectives(events_by_rank, step: int) -> dict:
    """{rank: Counter((dim, phase, pass))} of the allreduce spans of `step`."""
    out = {}
    for rank, events in events_by_rank.items():
        out[rank] = Counter((e["args"].get("dim"), e["args"]["phase"], e["args"]["pass"]) for e in events
                            if e["name"] == "allreduce" and e["args"]["step"] == step)
    return out


@pytest.mark.dist
@pytest.mark.parametrize("method", ["allreduce", "fsdp"])
def test_a_2x2_run_traces_every_collective_with_its_dimension(method):
    pytest.importorskip("torch")
    from opentikz_dt.measured.run import load_run
    from opentikz_dt.runner.testing import run_small, small_spec_data

    data = small_spec_data("mesh", topology={"workers": {"count": 4}},
                           strategy={"parallelism": {"data": 2, "tensor": 2}, "data_parallel": method},
                           training={"model": {"layers": LAYERS}, "steps": 2})
    result = run_small(data)
    run = load_run(result.run_dir)
    spans = [s for s in run.trace.spans if s.name == "allreduce"]
    assert {s.args.get("dim") for s in spans} == {"data", "tensor"}  # every collective has its dimension
    for rank in range(4):
        found = Counter((s.args["dim"], s.args["phase"], s.args["pass"]) for s in spans
                        if s.rank == rank and s.step == 1)
        assert found[("tensor", "all-reduce", "forward")] == 2 and found[("tensor", "all-reduce", "backward")] == 1
        if method == "allreduce":
            assert found[("data", "all-reduce", "backward")] == 1
        else:  # FSDP2 per unit (each of the 5 Linear layers): gathered for the forward, reduce-scattered
            assert found[("data", "reduce-scatter", "backward")] == 5
            assert found[("data", "all-gather", "forward")] == 5
        # a tensor all-reduce sums a layer pair's output: batch x width fp32 values
        assert {s.args["bytes"] for s in spans if s.rank == rank and s.args["dim"] == "tensor"
                and s.args["pass"] == "forward"} == {32 * 32 * 4}
    # what each rank holds: 1/tensor of the split layers (1/data of that again with fsdp), as
    # the strategy plugin expects (opentikz_dt/memory.py)
    from opentikz_dt.memory import expected_memory

    measured = result.metrics["memory"]
    for want in expected_memory(spec_from_data(data)):
        got = measured[str(want.rank)]
        assert (got["params"], got["grads"], got["optimizer"]) == (want.params, want.grads, want.optimizer)


@pytest.mark.dist
@pytest.mark.parametrize("method", ["allreduce", "fsdp"])
def test_a_2x2x2_run_traces_every_collective_and_pipeline_send_with_its_dimension(method):
    """8 ranks: 2 stages (one transformer block each) x 2 replicas x 2 tensor columns, 2
    microbatches. Per rank and step: the stage's block splits attention and MLP (one tensor
    all-reduce each per microbatch, forward and backward); each microbatch's activation
    crosses the stage boundary once forward and its gradient once back; the tied embedding's
    two copies are summed over the pipeline; the replicas synchronise once (allreduce) or
    each FSDP unit reduce-scatters once (the schedule tells FSDP which backward is the last:
    without that it would reduce-scatter every microbatch)."""
    pytest.importorskip("torch")
    from opentikz_dt.measured.run import load_run
    from opentikz_dt.runner.testing import clipped_mesh_data, run_small

    microbatches = 2
    # the numerics clip test's 2 x 2 x 2 run (one launch for both)
    result = run_small(clipped_mesh_data(method, pipeline=2))
    run = load_run(result.run_dir)
    spans = [s for s in run.trace.spans if s.step == 1]
    assert {s.args.get("dim") for s in spans if s.name in ("allreduce", "send", "recv")} == {
        "data", "tensor", "pipeline"}
    for rank in range(8):
        mine = [s for s in spans if s.rank == rank]
        found = Counter((s.name, s.args.get("dim"), s.args.get("phase"), s.args.get("pass"), s.args.get("direction"))
                        for s in mine if s.name in ("allreduce", "send", "recv"))
        stage = rank // 4
        assert found[("allreduce", "tensor", "all-reduce", "forward", None)] == 2 * microbatches
        assert found[("allreduce", "tensor", "all-reduce", "backward", None)] == 2 * microbatches
        assert found[("allreduce", "pipeline", "tied", None, None)] == 1
        sends, recvs = ("fwd", "bwd") if stage == 0 else ("bwd", "fwd")
        assert found[("send", "pipeline", None, None, sends)] == microbatches
        assert found[("recv", "pipeline", None, None, recvs)] == microbatches
        assert not found[("send", "pipeline", None, None, recvs)] and not found[("recv", "pipeline", None, None, sends)]
        # payloads, for the measured topology's bytes per dimension: a microbatch's activations
        # (or their gradients: the same shape) and the tied embedding's gradient
        d, batch = TINY_TRANSFORMER["d_model"], 8 // microbatches  # a microbatch of a replica's batch_size
        assert {s.args["bytes"] for s in mine if s.name == "send"} == {4 * batch * TINY_TRANSFORMER["seq_len"] * d}
        shards = 2 if method == "fsdp" else 1  # FSDP sums the two stages' matching shards
        assert [s.args["bytes"] for s in mine if s.args.get("phase") == "tied"] == [
            4 * TINY_TRANSFORMER["vocab"] * d // shards]
        if method == "allreduce":
            assert found[("allreduce", "data", "all-reduce", "backward", None)] == 1
        else:
            units = Counter(s.args["unit"] for s in mine if s.name == "allreduce" and s.args.get("phase") ==
                            "reduce-scatter")
            assert units == {"root": 1, f"blocks.{stage}": 1}
            # a gather names the pass of the microbatch chunk it runs in (counting a unit's gathers,
            # kind fsdp's way, would call the first stage's second forward gather a backward one)
            chunks = [s for s in mine if s.name in ("forward", "backward")]
            gathers = [s for s in mine if s.name == "allreduce" and s.args.get("phase") == "all-gather"]
            assert len(gathers) > 2
            for gather in gathers:
                inside = [c.name for c in chunks if c.start <= gather.start and gather.end <= c.end]
                assert inside == [gather.args["pass"]], (rank, gather.args)
        assert {s.name for s in mine if s.name in ("forward", "backward")} == {"forward", "backward"}
    # only the last stage knows the loss; every rank counts its share of its replica's samples
    assert all(v is not None for v in result.metrics["loss"])
    model = result.run_dir / "model.pt"
    assert model.is_file()


@pytest.mark.dist
def test_a_mesh_restart_resumes_from_its_checkpoints_to_the_uninterrupted_parameters(tmp_path):
    """2 stages x 2 replicas, FSDP, adamw: each rank checkpoints its stage's shards of the
    model and of adamw's state; after a crash the restarted ranks load them back
    (runner/strategies/mesh.py `_resume`) and end where the uninterrupted run ends."""
    torch = pytest.importorskip("torch")
    from opentikz_dt.runner.testing import run_small, small_spec_data

    data = small_spec_data("mesh", topology={"workers": {"count": 4}},
                           strategy={"parallelism": {"pipeline": 2, "data": 2}, "data_parallel": "fsdp",
                                     "microbatches": 2},
                           training={"dataset": {"samples": 512}, "batch_size": 8, "steps": 6,
                                     "optimizer": {"kind": "adamw", "lr": 0.01}})
    data["training"]["model"] = dict(TINY_TRANSFORMER)
    clean = run_small(data)
    data["runtime"].update({"restarts": 1, "checkpoint_every": 2, "fault": {"rank": 3, "at_step": 4, "kind": "crash"}})
    result = run_small(data, tmp_path, cache=False)
    assert result.run["status"] == "ok" and result.run["attempts"] == 2
    assert "resuming from the checkpoint after step 3" in (result.run_dir / "logs" / "rank3.log").read_text()
    got, want = torch.load(result.run_dir / "model.pt"), torch.load(clean.run_dir / "model.pt")
    assert list(got) == list(want)
    for name in want:
        assert torch.allclose(got[name], want[name], atol=1e-6), (
            f"{name}: max diff {(got[name] - want[name]).abs().max().item():.3g}")


def test_prediction_composes_the_dimensions_as_the_runner_traces_them():
    spec = load_spec(EXAMPLE)  # 2 x 2, fsdp, a 2-block transformer
    result = simulate(spec, Costs(illustrative_calibration(spec), spec), steps=3)
    for rank, found in _collectives(result.events, 1).items():
        assert found[("tensor", "all-reduce", "forward")] == 4  # attention and MLP per block
        assert found[("tensor", "all-reduce", "backward")] == 4
        assert found[("data", "all-gather", "forward")] == 1 and found[("data", "reduce-scatter", "backward")] == 1
    # a collective ends at once on the ranks of its group, not on the others
    ends = {rank: sorted(e["ts"] + e["dur"] for e in events if e["name"] == "allreduce"
                         and e["args"]["dim"] == "tensor" and e["args"]["step"] == 1)
            for rank, events in result.events.items()}
    assert ends[0] == ends[1] and ends[2] == ends[3]


def test_expected_timeline_names_each_collective_by_its_dimension():
    for method, phases in (("allreduce", {"tensor all-reduce", "data all-reduce"}),
                           ("fsdp", {"tensor all-reduce", "data all-gather", "data reduce-scatter"})):
        timeline = expected_timeline(_mesh(2, 2, data_parallel=method))
        found = {b.phase for p in timeline.panels for lane in p.lanes for b in lane.boxes if b.kind == "allreduce"}
        assert found == phases


def test_measured_boxes_name_the_dimension_and_others_stay_as_they_were():
    def span(**args):
        return Span(0, 1, "allreduce", 0.0, 1.0, 0, "w1", args)

    assert box_label(span(phase="all-reduce", dim="tensor"), False, False) == "tp AR"
    assert box_label(span(phase="reduce-scatter", dim="data"), False, False) == "dp RS"
    assert phase_name("tp AR") == "tensor all-reduce" and phase_name("dp AG") == "data all-gather"
    assert box_label(span(phase="reduce-scatter"), False, False) == "RS" and phase_name("RS") == "reduce-scatter"
    assert box_label(span(phase="all-reduce"), False, False) == "" and phase_name("") == ""


@pytest.mark.dist
@pytest.mark.parametrize("case, algorithm", [("mesh-tree-tensor", "tree"), ("mesh-data-pipeline", "ring")])
def test_dtgens_ring_and_tree_over_a_data_group_trace_their_dimension(case, algorithm):
    """The mesh's data dimension summed by dtgen's own ring or tree: every hop, wait and
    phase of it carries `dim: data` (the measured figures colour and count by it), on
    every rank and step. The numerics test's run of the same case (one launch for both)."""
    pytest.importorskip("torch")
    from opentikz_dt.measured.run import load_run
    from opentikz_dt.runner.testing import SYNC_CASES, run_small, small_spec_data

    kind, overrides, _ = SYNC_CASES[case]
    data = small_spec_data(kind, **{**overrides, "training": {**overrides.get("training", {})}})
    run = load_run(run_small(data).run_dir)
    ours = [s for s in run.trace.spans if s.args.get("algorithm") == algorithm]
    assert {s.name for s in ours} >= {"allreduce"}
    assert {s.args.get("dim") for s in ours} == {"data"}
    assert {(s.rank, s.step) for s in ours if s.name == "allreduce"} == {
        (r, s) for r in range(4) for s in range(run.metrics["steps"])}
