"""Predictions of pipeline x data x tensor meshes (issue 23): the simulator composes the
three dimensions (a pipeline bubble, tensor and data collectives waiting for their own
group only, each span with its `dim`), memory per worker per shape from the model's
sizes, `dtgen predict --sweep shapes` (the exact shapes a model can take, the figure, a
sweep that cannot be done), and the size bound at 1,024 workers."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest
from click.testing import CliRunner

from opentikz_dt.cli import main
from opentikz_dt.errors import DtgenError
from opentikz_dt.memory import expected_memory
from opentikz_dt.predict.contention import Contention
from opentikz_dt.predict.calibration import illustrative_calibration
from opentikz_dt.predict.costs import Costs
from opentikz_dt.predict.predict import check_size
from opentikz_dt.predict.shapes import render_shapes, run_shapes
from opentikz_dt.predict.simulate import simulate
from opentikz_dt.predict.plugin import REGISTRY
from opentikz_dt.spec import spec_from_data
from opentikz_dt.strategies.mesh.strategy import groups

# 2 blocks of d_model 32 (each 12,704 values: ln 64, qkv 3,168, attn.proj 1,056, ln 64, fc
# 4,224, mlp.proj 4,128), embedding 64 x 32 + 16 x 32 = 2,560, head norm 64; tied tok.weight 2,048
TRANSFORMER = {"kind": "transformer", "layers": 2, "d_model": 32, "heads": 4, "seq_len": 16, "vocab": 64}


def _mesh(pipeline: int, data: int, tensor: int, model=None, slowdown=None, batch=4, **strategy) -> object:
    workers = {"count": pipeline * data * tensor, **({"slowdown": slowdown} if slowdown else {})}
    return spec_from_data({"strategy": {"kind": "mesh", "parallelism": {"pipeline": pipeline, "data": data,
                                                                        "tensor": tensor}, **strategy},
                           "topology": {"workers": workers},
                           "training": {"model": model or TRANSFORMER, "batch_size": batch, "steps": 3,
                                        "optimizer": {"kind": "adamw", "lr": 0.001}}})


def _simulate(spec, steps=3):
    return simulate(spec, Costs(illustrative_calibration(spec), spec), steps=steps)


def _spans(result, step=1, **match):
    return [e for events in result.events.values() for e in events if e.get("ph") == "X"
            and e["args"]["step"] == step and all(e["args"].get(k) == v or e.get(k) == v for k, v in match.items())]


def test_a_3d_mesh_composes_pipeline_tensor_and_data():
    spec = _mesh(2, 2, 2, schedule="gpipe", microbatches=2, data_parallel="allreduce", slowdown={"w1": 3.0})
    result = _simulate(spec)
    for rank, events in result.events.items():
        mine = [e for e in events if e["args"]["step"] == 1]
        tensor = [e for e in mine if e["name"] == "allreduce" and e["args"]["dim"] == "tensor"]
        # one block per stage: its attention and MLP pair, forward and backward, per microbatch
        assert len(tensor) == 2 * 2 * 2
        assert {e["args"]["dim"] for e in mine if e["name"] in ("send", "recv")} == {"pipeline"}
        assert [e["args"]["phase"] for e in mine if e["name"] == "allreduce" and e["args"]["dim"] == "data"] == \
            ["all-reduce"]
        assert [e["args"]["phase"] for e in mine if e["name"] == "allreduce" and e["args"]["dim"] == "pipeline"] == \
            ["tied"]  # the embedding the first and last stage share
        assert sum(e["name"] == "forward" for e in mine) == 2 and sum(e["name"] == "send" for e in mine) == 2

    # the bubble: stage 2 starts its first forward only after stage 1 finished it, and stage 1
    # waits (recv, backward) for the gradient of its first microbatch
    first = {rank: min(e["ts"] for e in events if e["name"] == "forward" and e["args"]["step"] == 1)
             for rank, events in result.events.items()}
    first_end = min(e["ts"] + e["dur"] for e in _spans(result, name="forward", pid=2) if e["args"]["mb"] == 0)
    assert all(first[rank] >= first_end for rank in range(4, 8))
    assert _spans(result, name="recv", pid=0, direction="bwd")

    # each collective ends at once on exactly its group's ranks (w1 is slow: had a
    # collective waited for every rank, all groups would share one end)
    for dim, key in (("tensor", ("mb", "layer", "pass")), ("data", ("phase",))):
        ends = defaultdict(lambda: defaultdict(set))
        for e in _spans(result, name="allreduce", dim=dim):
            ends[tuple(e["args"][k] for k in key)][e["ts"] + e["dur"]].add(e["pid"])
        for collective in ends.values():  # (a tensor layer lives in one stage: its stage's groups)
            present = set().union(*collective.values())
            assert sorted(sorted(ranks) for ranks in collective.values()) == \
                [g for g in groups(spec, dim) if set(g) <= present], (dim, collective)
            assert len(collective) > 1


def test_one_f_one_b_interleaves_and_a_2d_mesh_keeps_one_pass_per_step():
    order = [(e["name"], e["args"]["mb"]) for e in sorted(_spans(_simulate(_mesh(2, 1, 1, microbatches=2)), pid=0),
                                                          key=lambda e: e["ts"]) if e["name"] in ("forward", "backward")]
    assert order == [("forward", 0), ("forward", 1), ("backward", 0), ("backward", 1)]  # stage 1 warms up by 1
    order = [(e["name"], e["args"]["mb"]) for e in sorted(_spans(_simulate(_mesh(2, 1, 1, microbatches=2)), pid=1),
                                                          key=lambda e: e["ts"]) if e["name"] in ("forward", "backward")]
    assert order == [("forward", 0), ("backward", 0), ("forward", 1), ("backward", 1)]
    flat = _simulate(_mesh(1, 2, 2, microbatches=4))  # no pipeline: the whole batch at once, no messages
    assert sum(e["name"] == "forward" for e in _spans(flat, pid=0)) == 1
    assert not [e for e in _spans(flat) if e["name"] in ("send", "recv")]


def test_memory_per_worker_holds_the_stage_the_tensor_slice_and_the_data_shard():
    # stage 1: embedding 2,560 + block 1 (12,512 split over 2 -> 6,256, 192 whole) = 9,008;
    # stage 2: block 2 (6,256 + 192) + head 64 + the tied copy 2,048 = 8,560; fsdp halves them
    for method, held in (("allreduce", [9008] * 4 + [8560] * 4), ("fsdp", [4504] * 4 + [4280] * 4)):
        ranks = expected_memory(_mesh(2, 2, 2, data_parallel=method))
        assert [r.params for r in ranks] == [4 * v for v in held]
        assert [r.optimizer for r in ranks] == [8 * v for v in held]  # adamw: two moments
    # an mlp pair cut by the stage boundary stays whole: layers 0-2 | 3-4 of 16-32-32-32-32-4;
    # stage 1 splits the pair (0, 1): (544 + 1,024) / 2 + 32 + the cut layer 2 (1,056) = 1,872
    ranks = expected_memory(_mesh(2, 1, 2, model={"kind": "mlp", "layers": [16, 32, 32, 32, 32, 4]}))
    assert [r.params // 4 for r in ranks] == [1872, 1872, 1056 + 132, 1056 + 132]


def test_the_shapes_of_8_workers_for_a_2_block_4_head_transformer():
    spec = _mesh(1, 4, 2, schedule="gpipe", microbatches=2)  # global batch 4 x 4 = 16
    labels = [label for label, _, _ in REGISTRY.get("mesh").shapes(spec, 8)]
    assert labels == ["1 x 8 x 1", "1 x 4 x 2", "2 x 4 x 1", "1 x 2 x 4", "2 x 2 x 2", "4 x 2 x 1", "1 x 1 x 8",
                      "2 x 1 x 4", "4 x 1 x 2", "8 x 1 x 1"]


@pytest.fixture
def spec_file(tmp_path):
    def write(text: str) -> Path:
        path = tmp_path / "mesh.yaml"
        path.write_text(text, encoding="utf-8")
        return path
    return write


MESH_YAML = """\
strategy: {kind: mesh, parallelism: {data: 4, tensor: 2}, schedule: gpipe, microbatches: 2}
topology: {workers: {count: 8}}
training:
  model: {kind: transformer, layers: 2, d_model: 32, heads: 4, seq_len: 16, vocab: 64}
  batch_size: 4
  steps: 3
  optimizer: {kind: adamw, lr: 0.001}
"""


def test_the_sweep_takes_exactly_the_shapes_the_model_can(spec_file):
    points, refused, _, assumed, count = run_shapes(spec_file(MESH_YAML))
    assert count == 8 and assumed["global_batch"] == 16
    assert sorted(p.label for p in points) == sorted(["1 x 8 x 1", "1 x 4 x 2", "2 x 4 x 1", "1 x 2 x 4", "2 x 2 x 2",
                                                      "2 x 1 x 4"])
    assert [p.step_ms for p in points] == sorted(p.step_ms for p in points)  # fastest first
    assert refused == [
        ("4 x 2 x 1", "strategy.parallelism.pipeline: 4 pipeline stages need at least 4 blocks; the model has 2"),
        ("1 x 1 x 8", "training.model.heads: 4 attention heads (each worker takes whole heads) do not split over "
                      "parallelism.tensor 8 (tensor degrees that work: 2, 4)"),
        ("4 x 1 x 2", "strategy.parallelism.pipeline: 4 pipeline stages need at least 4 blocks; the model has 2"),
        ("8 x 1 x 1", "strategy.parallelism.pipeline: 8 pipeline stages need at least 8 blocks; the model has 2")]
    # memory per worker per shape: the fullest rank's states and activations (opentikz_dt.memory
    # for the shape's spec); the states of the rank holding the most (x 16: params, grads, two
    # adamw moments)
    from opentikz_dt.predict.predict import apply_overrides
    from opentikz_dt.spec import load_spec
    from opentikz_dt.predict.plugin import REGISTRY

    base = load_spec(spec_file(MESH_YAML))
    layouts = {label: extra for label, extra, refusal in REGISTRY.get("mesh").shapes(base, 8) if not refusal}
    memory = {p.label: p.memory_bytes for p in points}
    for label, values in (("1 x 8 x 1", 28032), ("1 x 4 x 2", 15520), ("2 x 2 x 2", 9008)):
        ranks = expected_memory(apply_overrides(base, layouts[label], workers=8))
        assert max(r.params + r.grads + r.optimizer for r in ranks) == 16 * values
        assert all(r.activations > 0 for r in ranks)
        assert memory[label] == max(r.total for r in ranks)
    # every shape runs the spec's global batch: a data degree that does not divide it is refused
    _, refused, *_ = run_shapes(spec_file(MESH_YAML), sets=("training.batch_size=3",))  # 3 x 4 = 12
    assert refused[0] == ("1 x 8 x 1", "the global batch of 12 samples does not split over data 8 "
                                       "(set training.batch_size)")


def test_a_sweep_with_no_valid_shape_says_why_in_one_line(spec_file):
    result = CliRunner().invoke(main, ["predict", str(spec_file(MESH_YAML)), "--sweep", "shapes", "--workers", "1"])
    assert result.exit_code == 1
    lines = [line for line in result.output.splitlines() if not line.startswith("dtgen: warning")]
    assert lines == ["dtgen: error: --sweep shapes: no shape of 1 worker (pipeline x data x tensor) is valid for "
                     f"{spec_file(MESH_YAML)}: topology.workers.count: mesh needs at least 2 workers, got 1"]
    result = CliRunner().invoke(main, ["predict", str(spec_file(MESH_YAML.replace("kind: mesh, parallelism: {data: 4, "
                                                                                  "tensor: 2}, ", "kind: allreduce, "))),
                                       "--sweep", "shapes"])
    assert result.exit_code == 2 and "has one layout per worker count" in result.output


def test_1024_workers_are_predicted_within_the_bound_and_more_steps_are_refused():
    model = dict(TRANSFORMER, layers=16, heads=8, d_model=64)
    spec = _mesh(8, 16, 8, model=model, microbatches=8, batch=16)
    weight = REGISTRY.get("mesh").simulation_weight(spec)
    # 8 microbatches x (2 ops x 0.3 µs + 8 tensor all-reduces of its stage x (0.04 + 0.2 / 8) µs), over 5 µs
    assert weight == pytest.approx(8 * (2 * 0.3 + 8 * (0.04 + 0.2 / 8)) / 5)
    check_size(spec, 1000)  # about 9 s of simulation at most (results/predict-scale_cpu2core_2026-11.md)
    with pytest.raises(DtgenError) as refused:
        check_size(spec, 1200)
    assert str(refused.value) == ("1,024 ranks x 1,200 steps x 1.79 (the cost of one of its rank-steps) = 2,202,010 "
                                  "rank-steps: at most 2,000,000 per prediction (about a minute of simulation); "
                                  "use --steps")
    cal = illustrative_calibration(spec)
    result = simulate(spec, Costs(cal, spec, contention=Contention.none(cal)), steps=2, record=False)
    assert len(result.step_time) == 1024


@pytest.mark.latex
def test_the_shapes_figure_compiles_in_one_column_says_predicted_and_is_deterministic(spec_file, tmp_path):
    from opentikz_dt.figures.checks import check_palette_only
    from opentikz_dt.figures.compile import pdf_page_size

    path = spec_file(MESH_YAML)
    result = CliRunner().invoke(main, ["predict", str(path), "--sweep", "shapes", "--width", "column",
                                       "-o", str(tmp_path / "out"), "--format", "pdf"])
    assert result.exit_code == 0, result.output
    assert "wider than" not in result.output
    tex = (tmp_path / "out" / "predicted-shapes.tex").read_text(encoding="utf-8")
    assert "predicted step time" in tex and "predicted from the illustrative cost model" in tex
    assert check_palette_only(tex) == []
    width_cm = pdf_page_size((tmp_path / "out" / "predicted-shapes.pdf").read_bytes())[0] / 72.27 * 2.54
    assert width_cm <= 8.5
    points, refused, spec, assumed, count = run_shapes(path)
    assert render_shapes(points, refused, spec, assumed, count) == render_shapes(points, refused, spec, assumed, count)
    assert render_shapes(points, refused, spec, assumed, count) == tex


def test_a_trace_too_large_is_refused_from_two_simulated_steps(spec_file, tmp_path, monkeypatch):
    import opentikz_dt.predict.predict as predict_module

    path = spec_file(MESH_YAML)
    monkeypatch.setattr(predict_module, "MAX_EVENTS", 1000)
    with pytest.raises(DtgenError) as refused:
        predict_module.predict(path, tmp_path / "out", steps=40)
    # the events of 2 simulated steps, scaled to the 40 asked for
    assert str(refused.value).startswith("the prediction would write about ")
    assert "(at most 1,000; 2 simulated steps wrote " in str(refused.value)
    assert not (tmp_path / "out").exists()
    monkeypatch.setattr(predict_module, "MAX_EVENTS", 10_000)
    predict_module.predict(path, tmp_path / "out", steps=3)  # and a small one is written
    assert (tmp_path / "out" / "trace.json").exists()


def test_more_workers_grow_the_data_degree_and_a_spec_of_over_64_takes_overrides(spec_file):
    from opentikz_dt.predict.predict import apply_overrides
    from opentikz_dt.spec import load_spec
    from opentikz_dt.strategies.mesh.strategy import degrees

    base = load_spec(spec_file(MESH_YAML))
    assert degrees(apply_overrides(base, workers=32)) == {"pipeline": 1, "data": 16, "tensor": 2}
    # strategy.stages resolves to the worker count, above the schema's 64 for a kind that
    # does not read it: an override of such a spec is resolved again, not refused
    big = load_spec(spec_file(MESH_YAML.replace("data: 4", "data: 64").replace("count: 8", "count: 128")))
    assert apply_overrides(big, ("training.steps=4",)).training.steps == 4


@pytest.mark.parametrize("method", ["allreduce", "ring", "tree"])
def test_a_data_group_all_reduces_by_its_method_cost_form(method):
    """data 4 x tensor 1, messages only: gloo's all-reduce as the collective's cost form,
    dtgen's ring as 2(n-1) hops of a 1/n segment, its tree as a reduce up and a broadcast
    down of ceil(log2 n) levels, each parent's link shared by its 2 children."""
    import math

    spec = _mesh(1, 4, 1, data_parallel=method)
    cal = illustrative_calibration(spec)
    for block in cal.data["compute"]["blocks"]:
        block["forward"], block["backward"] = [0.0, 0.0], [0.0, 0.0]
    cal.data["compute"].update(optimizer=[0.0, 0.0], add_per_param_s=0.0)
    alpha, beta, p2p_alpha = 1e-4, 1e-8, 3e-4  # dtgen's ring and tree send point-to-point messages
    for kind, v in cal.data["comm"].items():
        v.update(alpha_s=p2p_alpha if kind == "p2p" else alpha, beta_s_per_byte=beta)
    result = simulate(spec, Costs(cal, spec), steps=2)
    spans = _spans(result, step=1, name="allreduce")
    assert {e["args"]["algorithm"] for e in spans} == {"native" if method == "allreduce" else method}
    nbytes, n = spans[0]["args"]["bytes"], 4
    closed = {"allreduce": 2 * (n - 1) * alpha + 2 * (n - 1) / n * nbytes * beta,
              "ring": 2 * (n - 1) * (p2p_alpha + nbytes / n * beta),
              "tree": 2 * math.ceil(math.log2(n)) * (p2p_alpha + 2 * nbytes * beta)}[method]
    assert {round(e["dur"] / 1e6, 12) for e in spans} == {round(closed, 12)}
