"""Tensor parallelism's figures (issue 21): every split layer cut into one slice per worker,
the all-reduce points between the layers, bounded at any worker count."""

from __future__ import annotations

import re

import pytest

from opentikz_dt.figures.render import render_topology
from opentikz_dt.figures.topology import build_layout
from opentikz_dt.figures.topology_tensor import slice_color
from opentikz_dt.spec import spec_from_data

TRANSFORMER = {"kind": "transformer", "layers": 2, "d_model": 64, "heads": 8, "seq_len": 16, "vocab": 64}


def _spec(workers: int, model=None, **figure):
    data = {"strategy": {"kind": "tensor"}, "topology": {"workers": {"count": workers}},
            "training": {"model": model or TRANSFORMER, "dataset": {"kind": "synthetic", "samples": 256},
                         "batch_size": 8}}
    if figure:
        data["figure"] = figure
    return spec_from_data(data)


def _columns(layout) -> list:
    """The model's columns left to right: a layer (its slices' suffix) or an all-reduce bar (its text)."""
    out = {}
    for node in layout.nodes:
        if node.name.startswith("ar-"):
            out[node.x] = node.text
        elif node.kind == "box" and node.name.startswith("w1-"):
            out[node.x] = node.name.removeprefix("w1-")
    return [out[x] for x in sorted(out)]


@pytest.mark.parametrize("workers", [2, 4, 8])
def test_every_split_layer_is_cut_into_one_slice_per_worker(workers):
    layout = build_layout(_spec(workers))
    for layer in ("attn1", "mlp1", "attn2", "mlp2"):
        slices = [n for n in layout.nodes if n.kind == "box" and n.name.endswith(f"-{layer}")]
        assert [n.name for n in slices] == [f"w{k}-{layer}" for k in range(1, workers + 1)]
        assert [n.color for n in slices] == [slice_color(k) for k in range(1, workers + 1)]
        assert len({n.x for n in slices}) == 1  # one column, each worker's slice in its row
    assert len({slice_color(k) for k in range(1, 5)}) == 4  # neighbours never share a colour


def test_the_all_reduce_points_follow_the_row_and_column_parallel_layers():
    columns = _columns(build_layout(_spec(2)))
    f, b, fb = r"$\Sigma$\,F", r"$\Sigma$\,B", r"$\Sigma$\,F\\$\Sigma$\,B"
    # forward: after attention's and the MLP's row-parallel projection; backward: before each
    # column-parallel layer (its input gradient), the first one too (the embeddings need it)
    assert columns == [b, "attn1", fb, "mlp1", fb, "attn2", fb, "mlp2", f]


def test_an_mlp_pairs_its_layers_and_keeps_an_odd_last_layer_whole():
    layout = build_layout(_spec(4, {"kind": "mlp", "layers": [32, 64, 64, 64, 64, 10]}))
    f, fb = r"$\Sigma$\,F", r"$\Sigma$\,F\\$\Sigma$\,B"
    assert _columns(layout) == ["l1", "l2", fb, "l3", "l4", f, "l5"]  # the data needs no input gradient
    assert {n.color for n in layout.nodes if n.kind == "box" and n.name.endswith("-l5")} == {"otgray"}


def _note(layout) -> str:
    return next(n.text for n in layout.nodes if n.name == "note")


def test_the_note_says_which_layers_are_cut_and_which_stay_whole():
    """The starter's mlp [32, 128, 128, 10] has three layers: the note once said 'every layer cut
    into 2 slices' over a grey, unsplit layer 3 it did not explain (the runner keeps an odd last
    layer whole on every worker), and named a ΣB the picture does not have."""
    f, b = r"$\Sigma$\,F: ", r"$\Sigma$\,B: "
    odd = _note(build_layout(_spec(2, {"kind": "mlp", "layers": [32, 128, 128, 10]})))
    assert odd.split(r"\\") == ["layers 1--2 cut into 2 slices, one per worker;",
                                "layer 3 (grey) whole on every worker, not split",
                                f + "all-reduce of a layer's output (forward)"]
    even = _note(build_layout(_spec(4, {"kind": "mlp", "layers": [32, 64, 64, 64, 64]})))
    assert even.split(r"\\") == ["every layer cut into 4 slices, one per worker",
                                 f + "all-reduce of a layer's output (forward),", b + "of its input gradient (backward)"]
    transformer = _note(build_layout(_spec(2)))
    assert transformer.split(r"\\")[0] == "every layer cut into 2 slices, one per worker"
    assert transformer.split(r"\\")[-1] == "embeddings, norms and head whole on every worker"
    # a column-wide figure draws the first block only: the whole last layer is named, not coloured
    fitted = _note(build_layout(_spec(2, {"kind": "mlp", "layers": [32, 64, 64, 64, 64, 10]}, width="column")))
    assert "layer 5 whole on every worker, not split" in fitted and "grey" not in fitted
    # the words of the layers' names are the spec's
    named = _note(build_layout(_spec(2, {"kind": "mlp", "layers": [32, 64, 64, 10]},
                                     labels={"stage_layer": "L{i}", "stage_layers": "L{first}-L{last}"})))
    assert named.startswith(r"L1-L2 cut into 2 slices, one per worker;\\L3 (grey) whole")


def test_drawn_objects_are_bounded_at_1024_workers_and_many_blocks():
    wide = {"kind": "mlp", "layers": [4096] * 9 + [10]}
    count = lambda n, m=wide: (lambda lay: len(lay.nodes) + len(lay.edges))(build_layout(_spec(n, m)))
    assert count(1024) == count(4096) <= 110
    deep = dict(TRANSFORMER, layers=48, heads=16)
    assert count(16, deep) == count(16, dict(deep, layers=96))
    text = render_topology(_spec(1024, wide))
    assert "w1024-l1" in text and "w500-l1" not in text and "1,024 slices" in text


def test_a_fitted_figure_draws_one_block_and_an_ellipsis_for_the_others():
    layout = build_layout(_spec(2, width="column"))
    assert [c for c in _columns(layout) if not c.startswith("$")] == ["attn1", "mlp1"]
    assert any(n.kind == "ellipsis" and n.name == "note-more2" for n in layout.nodes)


# ---------------------------------------------------------------- the partitioning figure


def test_partitioning_splits_the_model_vertically_and_horizontally():
    from opentikz_dt.figures.partitioning import partitioning_layout

    layout = partitioning_layout(_spec(4, dict(TRANSFORMER, layers=4)))
    names = {n.name: n for n in layout.nodes}
    # (a) one whole column per block, the blocks spread evenly over the workers
    assert [names[f"panel-a-l{b}"].color for b in range(1, 5)] == [slice_color(k) for k in (1, 2, 3, 4)]
    # (b) every block cut into one slice per worker
    for b in range(1, 5):
        assert [names[f"panel-b-l{b}-w{k}"].color for k in range(1, 5)] == [slice_color(k) for k in range(1, 5)]
    assert "illustrative" in names["note"].text


def test_partitioning_is_bounded_and_refuses_a_python_model():
    from opentikz_dt.errors import DtgenError
    from opentikz_dt.figures.partitioning import partitioning_layout

    wide = {"kind": "mlp", "layers": [4096] * 30 + [10]}
    assert len(partitioning_layout(_spec(1024, wide)).nodes) == len(partitioning_layout(_spec(4096, wide)).nodes) <= 60
    with pytest.raises(DtgenError, match="python model"):
        partitioning_layout(_python_spec())


def _python_spec():
    from pathlib import Path

    from opentikz_dt.spec import load_spec

    return load_spec(Path(__file__).parent.parent / "examples" / "custom-model" / "tensor.yaml")


def test_partitioning_compiles_at_one_column(tmp_path):
    from opentikz_dt.figures.write import render_figures

    heard = []
    spec = _spec(8, dict(TRANSFORMER, layers=6))
    from opentikz_dt.figures.fit import with_width

    paths = render_figures(with_width(spec, "column"), tmp_path, kinds=("partitioning",), formats=("pdf",),
                           notify=heard.append)
    assert [p.suffix for p in paths] == [".tex", ".pdf"] and heard == []  # fits, text >= 6 pt


# ---------------------------------------------------------------- the expected timeline


def _boxes(spec, lane="w1"):
    from opentikz_dt.predict.expected import illustrative_timeline as expected_timeline

    panel = expected_timeline(spec).panels[0]
    return next(l for l in panel.lanes if l.id == lane).boxes


def test_the_expected_timeline_all_reduces_after_every_layer_pair_forward_and_backward():
    """The simulator's step, as the runner traces it: one forward and one backward span on the
    compute lane, each layer pair's all-reduce on the comm lane inside them."""
    steps = 2  # the expected timeline's
    compute, comm = _boxes(_spec(4, dict(TRANSFORMER, layers=3))), _boxes(_spec(4, dict(TRANSFORMER, layers=3)), "w1-comm")
    assert sum(b.kind == "allreduce" for b in comm) == steps * 2 * 2 * 3  # attention and MLP, both passes
    forward = next(b for b in compute if b.kind == "forward")
    inside = [b for b in comm if forward.start_ms <= b.start_ms and b.end_ms <= forward.end_ms]
    assert len(inside) == 2 * 3 and inside[0].start_ms > forward.start_ms  # after the first pair's slice
    # an mlp's first pair has no backward all-reduce (its input is the data)
    mlp = _boxes(_spec(2, {"kind": "mlp", "layers": [32, 64, 64, 64, 64, 10]}), "w1-comm")
    assert sum(b.kind == "allreduce" for b in mlp) == steps * (2 + 1)


def test_the_others_wait_for_a_slow_worker_at_every_all_reduce():
    spec = spec_from_data({"strategy": {"kind": "tensor"},
                           "topology": {"workers": {"count": 2, "slowdown": {"w2": 2.0}}},
                           "training": {"model": TRANSFORMER, "dataset": {"kind": "synthetic", "samples": 256},
                                        "batch_size": 8}})
    starts = lambda lane: [round(b.start_ms, 6) for b in _boxes(spec, lane) if b.kind == "allreduce"]
    assert starts("w1-comm") == starts("w2-comm")  # an all-reduce starts when both arrived
    # the slow worker's compute before each all-reduce sets its start: the fast one's waits are in its passes
    alone = spec_from_data({**spec.data, "topology": {"workers": {"count": 2}}})
    assert starts("w1-comm")[0] > [round(b.start_ms, 6) for b in _boxes(alone, "w1-comm") if b.kind == "allreduce"][0]


# ---------------------------------------------------------------- predictions


def test_predicted_all_reduces_are_the_runners_one_per_layer_pair_and_pass():
    from opentikz_dt.predict.calibration import illustrative_calibration
    from opentikz_dt.predict.costs import Costs
    from opentikz_dt.predict.simulate import simulate

    spec = _spec(2, dict(TRANSFORMER, layers=2))
    result = simulate(spec, Costs(illustrative_calibration(spec), spec), steps=2)
    spans = [e for e in result.events[0] if e["name"] == "allreduce" and e["args"]["step"] == 1]
    assert [(e["args"]["pass"], e["args"]["layer"]) for e in spans] == [
        ("forward", "blocks.0.attn.proj"), ("forward", "blocks.0.mlp.proj"),
        ("forward", "blocks.1.attn.proj"), ("forward", "blocks.1.mlp.proj"),
        ("backward", "blocks.1.mlp.fc"), ("backward", "blocks.1.attn.qkv"),
        ("backward", "blocks.0.mlp.fc"), ("backward", "blocks.0.attn.qkv")]  # as the runner traces them
    assert {e["args"]["bytes"] for e in spans} == {4 * 8 * 16 * 64}  # batch x seq_len x d_model, fp32


def test_a_sweep_shows_tensor_parallelism_stop_scaling_on_its_all_reduces(tmp_path):
    import yaml

    from opentikz_dt.predict.sweep import caption, run_sweep

    path = tmp_path / "tensor.yaml"
    path.write_text(yaml.safe_dump({"name": "wide", "strategy": {"kind": "tensor"},
                                    "topology": {"workers": {"count": 2}},
                                    "training": {"model": {"kind": "mlp", "layers": [4096] * 5 + [10]},
                                                 "dataset": {"kind": "synthetic", "samples": 1024},
                                                 "batch_size": 64, "steps": 4}}))
    counts = [2, 8, 64, 1024]
    points, skipped, spec, assumed = run_sweep(path, "workers=" + ",".join(map(str, counts)))
    rate = {p.workers: p.samples_per_s for p in points}
    assert skipped == [] and rate[8] > rate[2] and rate[1024] < rate[64]  # it scales, then the all-reduces win
    note = assumed["strategy_note"]
    assert "3 all-reduces per step" in note and note.endswith("at 1,024")
    low, high = (int(x) for x in re.findall(r"(\d+) (?:percent )?at", note))
    assert low < 10 < 90 < high
    assert note in " ".join(caption(assumed, skipped, 4))


# ---------------------------------------------------------------- the edit contract


def test_a_slice_and_an_all_reduce_bar_point_at_the_model_a_worker_at_its_label():
    from opentikz_dt.edit.nodepaths import spec_path_of
    from opentikz_dt.figures.names import is_node_name

    spec = _spec(2)
    for name in ("w2-attn1", "w1-mlp2", "ar-3", "note-attn1"):
        assert is_node_name(name), name
        assert spec_path_of(name, spec) == ("training", "model"), name
    assert spec_path_of("w2-label", spec) == ("topology", "workers", "label")
    assert spec_path_of("w2", spec) == ("topology", "workers", "label")
    every = {n.name for n in build_layout(spec).nodes if n.kind == "box"}
    assert every and all(spec_path_of(name, spec) == ("training", "model") for name in every)


# ---------------------------------------------------------------- compiled: no overlaps, one column, >= 6 pt

WIDE = {"kind": "mlp", "layers": [4096, 4096, 4096, 10]}


@pytest.mark.parametrize("workers, model", [(2, None), (8, None), (1024, WIDE)])
def test_the_topology_compiles_clean_and_fits_one_column_with_legible_text(workers, model):
    from opentikz_dt.figures.checks import check_figure_geometry
    from opentikz_dt.figures.compile import compile_pdf, pdf_page_size, pdf_words
    from opentikz_dt.figures.fit import with_width
    from opentikz_dt.figures.render import render_timeline

    spec = _spec(workers, model)
    for tex in (render_topology(spec), render_timeline(spec)):
        assert check_figure_geometry(compile_pdf(tex).log) == []
    for tex in (render_topology(with_width(spec, "column")), _partitioning(with_width(spec, "column"))):
        result = compile_pdf(tex)
        width, _ = pdf_page_size(result.pdf)
        assert width / 72.27 * 2.54 <= 8.5 + 0.02
        assert min(size for _, size in pdf_words(result.pdf)) >= 6.0 - 0.05
        assert check_figure_geometry(result.log) == []


def _partitioning(spec) -> str:
    from opentikz_dt.figures.write import render_texts

    return render_texts(spec, ("partitioning",))["partitioning"]


def test_the_mcp_render_tool_draws_the_partitioning_figure():
    from pathlib import Path

    from opentikz_dt.mcp_server import render_png

    from opentikz_dt.figures.compile import compile_cached
    from opentikz_dt.invariants import pdf_page_size_cm
    from opentikz_dt.spec import load_spec

    path = Path(__file__).parent.parent / "examples" / "tensor-transformer.yaml"
    png, size = render_png(str(path), "partitioning", 30)
    width, _ = pdf_page_size_cm(compile_cached(_partitioning(load_spec(path))).pdf)
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and size["width_cm"] == round(width, 3)  # that figure, not another
