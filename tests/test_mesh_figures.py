"""A mesh's figures (issue 23): the topology draws one grid per pipeline stage (tensor index
across, data index down) with every dimension's groups outlined in their own colour and
line style, hosts as boxes, bounded at 1,024 workers; the expected timeline adds the
pipeline's microbatches and sends."""

from __future__ import annotations

import pytest

from opentikz_dt.figures.render import render_topology
from opentikz_dt.figures.topology import build_layout
from opentikz_dt.spec import spec_from_data
from opentikz_dt.strategies.mesh.strategy import groups

TRANSFORMER = {"kind": "transformer", "layers": 16, "d_model": 64, "heads": 8, "seq_len": 16, "vocab": 64}
SHAPES = {4: (2, 2, 1), 8: (2, 2, 2), 64: (4, 4, 4), 1024: (8, 8, 16)}  # workers: (data, tensor, pipeline)


def _mesh(data: int, tensor: int, pipeline: int = 1, hosts: int = 1, **figure):
    strategy = {"kind": "mesh", "parallelism": {"data": data, "tensor": tensor, "pipeline": pipeline}}
    if pipeline > 1:  # 1F1B (the default) needs a microbatch per stage at least
        strategy["microbatches"] = max(4, pipeline)
    spec = {"strategy": strategy,
            "topology": {"workers": {"count": data * tensor * pipeline}, "hosts": hosts},
            "training": {"model": TRANSFORMER, "dataset": {"samples": 4096}, "batch_size": 64}}
    if figure:
        spec["figure"] = figure
    return spec_from_data(spec)


def _outlines(layout, suffix: str) -> list:
    """The drawn outlines of one dimension, as sorted 0-based rank lists of their drawn workers."""
    out = []
    for group in layout.groups:
        if group.name.endswith(f"-{suffix}"):
            out.append(sorted(int(m[1:]) - 1 for m in group.members if not m.endswith("-more")))
    return sorted(out)


def test_every_group_of_every_dimension_is_outlined_around_its_workers():
    spec = _mesh(2, 2, 2)
    layout = build_layout(spec)
    assert _outlines(layout, "tp") == groups(spec, "tensor") == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert _outlines(layout, "dp") == groups(spec, "data") == [[0, 2], [1, 3], [4, 6], [5, 7]]
    # worker 1's pipeline group: an outline around each member, an arch from stage to stage
    assert [g.members for g in layout.groups if g.name.endswith("-pp")] == [("w1",), ("w5",)]
    assert [(e.src.node, e.dst.node, e.style) for e in layout.edges] == [("w1", "w5", "ppflow")]
    styles = {g.name.rsplit("-", 1)[1]: g.style for g in layout.groups if "-" in g.name}
    assert styles == {"tp": "tpgroup", "dp": "dpgroup", "pp": "ppgroup"}
    # tensor across, data down, stages side by side
    at = {n.name: (n.x, n.y) for n in layout.nodes}
    assert at["w1"][1] == at["w2"][1] > at["w3"][1] and at["w1"][0] == at["w3"][0] < at["w2"][0] < at["w5"][0]
    assert at["w5"][1] == at["w1"][1]


def test_hosts_are_boxes_around_their_rows_and_a_2d_mesh_has_no_stage_or_pipeline():
    layout = build_layout(_mesh(4, 4, 4, hosts=8))
    hosts = {g.name: sorted(int(m[1:]) for m in g.members) for g in layout.groups if g.style == "hostbox"}
    assert hosts["h1"] == list(range(1, 9)) and hosts["h8"] == list(range(57, 65)) and len(hosts) == 8
    flat = build_layout(_mesh(2, 2))
    assert not [n for n in flat.nodes if n.name.startswith("s1")] and not flat.edges
    assert not [g for g in flat.groups if g.style in ("ppgroup", "hostbox")]
    assert {n.name for n in flat.nodes if n.name.startswith("legend")} == {
        "legend-tp", "legend-tp-label", "legend-dp", "legend-dp-label"}


def _drawn(layout) -> int:
    return len(layout.nodes) + len(layout.edges) + len(layout.groups)


def test_1024_workers_draw_a_bounded_figure_with_a_note_of_what_is_drawn():
    big = build_layout(_mesh(8, 8, 16))
    assert _drawn(big) == _drawn(build_layout(_mesh(32, 8, 16))) <= 110
    assert sum(n.style == "meshworker" for n in big.nodes) == 27  # 3 rows x 3 columns x 3 stages
    text = render_topology(_mesh(8, 8, 16))
    assert "(w1024)" in text and "(w500)" not in text and "(w961)" in text
    note = next(n.text for n in big.nodes if n.name == "note")
    assert r"drawn: 3 of 8 rows, 3 of 8 columns,\\3 of 16 stages (1,024 workers)" in note
    narrow = build_layout(_mesh(8, 8, 16, width="column"))
    assert sum(n.style == "meshworker" for n in narrow.nodes) == 12  # 3 rows x 2 columns x 2 stages


def test_the_mesh_styles_are_defined_only_in_a_mesh_figure():
    mesh = render_topology(_mesh(2, 2, 2))
    other = render_topology(spec_from_data({"strategy": {"kind": "allreduce"}}))
    for style in ("meshworker", "tpgroup", "dpgroup", "ppgroup", "ppflow", "legendkey"):
        assert f"{style}/.style" in mesh and style not in other
    assert render_topology(_mesh(8, 8, 16)) == render_topology(_mesh(8, 8, 16))  # deterministic


def test_outlines_cross_each_other_but_a_worker_may_not_overlap_one():
    from opentikz_dt.figures.bbox import BBox
    from opentikz_dt.figures.checks import check_no_overlaps

    row, column = BBox("w1-tp", 0, 10, 100, 30), BBox("w1-dp", 5, 0, 40, 60)
    host = BBox("h1", -5, 5, 105, 35)
    assert check_no_overlaps([row, column, host]) == []
    assert check_no_overlaps([row, BBox("w9", 90, 20, 120, 40)]) == ["'w1-tp' and 'w9' overlap (100.0 pt^2)"]
    assert check_no_overlaps([host, BBox("h2", 100, 0, 200, 40)]) != []  # two hosts still may not


@pytest.mark.latex
@pytest.mark.parametrize("workers", sorted(SHAPES))
@pytest.mark.parametrize("hosts", [1, 2])
def test_the_mesh_compiles_clean_and_fits_one_column_with_legible_text(workers, hosts):
    from opentikz_dt.figures.checks import check_figure_geometry
    from opentikz_dt.figures.compile import compile_pdf, pdf_page_size, pdf_words
    from opentikz_dt.figures.fit import with_width

    spec = _mesh(*SHAPES[workers], hosts=hosts)
    assert check_figure_geometry(compile_pdf(render_topology(spec)).log) == []
    result = compile_pdf(render_topology(with_width(spec, "column")))
    width, _ = pdf_page_size(result.pdf)
    assert width / 72.27 * 2.54 <= 8.5 + 0.02
    assert min(size for _, size in pdf_words(result.pdf)) >= 6.0 - 0.05
    assert check_figure_geometry(result.log) == []


@pytest.mark.latex
def test_the_overlap_check_sees_a_grid_drawn_too_tight(monkeypatch):
    from opentikz_dt.figures import topology_mesh
    from opentikz_dt.figures.checks import check_figure_geometry
    from opentikz_dt.figures.compile import compile_pdf

    monkeypatch.setattr(topology_mesh, "COL_GAP", 0.0)
    problems = check_figure_geometry(compile_pdf(render_topology(_mesh(2, 2, 2))).log)
    assert "'w1' and 'w2-dp' overlap" in " ".join(problems)


def test_a_group_outline_points_at_the_degrees_in_the_edit_contract():
    from opentikz_dt.edit.nodepaths import spec_path_of
    from opentikz_dt.figures.names import is_node_name

    spec = _mesh(2, 2, 2, hosts=2)
    layout = build_layout(spec)
    for name in [g.name for g in layout.groups] + [n.name for n in layout.nodes]:
        assert is_node_name(name), name
    for name in ("w1-tp", "w2-dp", "w5-pp", "legend-tp", "legend-pp-label"):
        assert spec_path_of(name, spec) == ("strategy", "parallelism"), name
    assert spec_path_of("h2", spec) == ("topology", "hosts")


@pytest.mark.latex
def test_the_mcp_render_tool_draws_a_mesh_topology(tmp_path):
    import yaml

    from opentikz_dt.figures.compile import compile_cached
    from opentikz_dt.invariants import pdf_page_size_cm
    from opentikz_dt.mcp_server import render_png
    from opentikz_dt.spec import load_spec

    path = tmp_path / "mesh.yaml"
    path.write_text(yaml.safe_dump({"name": "mesh-3d", **{k: v for k, v in _mesh(2, 2, 2).data.items()
                                                          if k in ("strategy", "topology", "training")}}))
    png, size = render_png(str(path), "topology", 30)
    width, _ = pdf_page_size_cm(compile_cached(render_topology(load_spec(path))).pdf)
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and size["width_cm"] == round(width, 3)


# ---------------------------------------------------------------- the expected timeline


def _lanes(spec):
    from opentikz_dt.predict.expected import illustrative_timeline as expected_timeline

    return expected_timeline(spec).panels[0].lanes


def test_the_pipelined_timeline_runs_the_microbatches_through_the_stages_with_their_sends():
    spec = _mesh(2, 2, 2)
    lanes = {lane.id: lane for lane in _lanes(spec)}
    assert list(lanes) == [f"w{k}{part}" for k in range(1, 9) for part in ("", "-comm")]
    first, last = lanes["w1"].boxes, lanes["w5"].boxes
    assert first == lanes["w4"].boxes and last == lanes["w8"].boxes  # a stage's workers run alike
    # 1F1B (the default): stage 1 warms up with one forward, then alternates; stage 2 alternates at once
    order = lambda boxes: [(b.kind[0].upper(), b.label) for b in boxes if b.kind in ("forward", "backward")][:5]
    assert order(first) == [("F", "1"), ("F", "2"), ("B", "1"), ("F", "3"), ("B", "2")]
    assert order(last) == [("F", "1"), ("B", "1"), ("F", "2"), ("B", "2"), ("F", "3")]
    assert lanes["w5-comm"].boxes[0].kind == "recv"  # the bubble: stage 2 waits for microbatch 1
    assert last[0].start_ms >= lanes["w5-comm"].boxes[0].end_ms - 1e-9
    for comm in ("w1-comm", "w5-comm"):  # activations sent forward, gradients back
        assert {"send", "recv"} <= {b.kind for b in lanes[comm].boxes}
        phases = {b.phase for b in lanes[comm].boxes if b.kind == "allreduce"}
        assert {"tensor all-reduce", "data all-reduce"} <= phases


def test_gpipe_runs_all_forwards_first_and_fsdp_gathers_before_them():
    spec = spec_from_data({"strategy": {"kind": "mesh", "parallelism": {"data": 2, "tensor": 2, "pipeline": 2},
                                        "data_parallel": "fsdp"},
                           "topology": {"workers": {"count": 8}},
                           "training": {"model": TRANSFORMER, "dataset": {"samples": 4096}, "batch_size": 64}})
    import dataclasses

    spec = dataclasses.replace(spec, strategy=dataclasses.replace(spec.strategy, schedule="gpipe"))
    lanes = {lane.id: lane for lane in _lanes(spec)}
    order = [b.kind for b in lanes["w1"].boxes if b.kind in ("forward", "backward")][:8]
    assert order == ["forward"] * 4 + ["backward"] * 4
    comm = [b for b in lanes["w1-comm"].boxes if b.kind == "allreduce"]
    assert comm[0].phase == "data all-gather" and comm[0].end_ms <= lanes["w1"].boxes[0].start_ms + 1e-9
    assert "data reduce-scatter" in {b.phase for b in comm}


def test_at_scale_one_worker_per_stage_stands_for_its_stage():
    lanes = _lanes(_mesh(8, 8, 16))
    assert [lane.id for lane in lanes] == ["w1", "w1-comm", "w65", "w65-comm", "w129", "w129-comm", "w193-more",
                                           "w961", "w961-comm"]
    assert lanes[6].role == "gap" and lanes[6].hidden == 12 and lanes[2].label == "Worker 65 (stage 2)"
    assert all(lane.boxes for lane in lanes if lane.role != "gap")
    assert [lane.id for lane in _lanes(_mesh(2, 2))] == ["w1", "w1-comm", "w2", "w2-comm", "w3", "w3-comm", "w4",
                                                         "w4-comm"]  # 2-D: every worker


@pytest.mark.latex
@pytest.mark.parametrize("workers", [8, 64, 1024])
def test_the_pipelined_timeline_compiles_clean_at_one_column(workers):
    from opentikz_dt.figures.checks import check_figure_geometry
    from opentikz_dt.figures.compile import compile_pdf, pdf_words
    from opentikz_dt.figures.fit import with_width
    from opentikz_dt.figures.render import render_timeline

    spec = _mesh(*SHAPES[workers])
    for tex in (render_timeline(spec), render_timeline(with_width(spec, "column"))):
        result = compile_pdf(tex)
        assert check_figure_geometry(result.log) == []
        assert min(size for _, size in pdf_words(result.pdf)) >= 6.0 - 0.05


# ---------------------------------------------------------------- the measured topology


def test_bytes_per_dimension_are_each_workers_mean_payload_per_step():
    from opentikz_dt.figures.topology_mesh import bytes_per_dimension
    from opentikz_dt.measured.trace import Span

    def span(name, rank, step, **args):
        return Span(rank, 1, name, 0.0, 1.0, step, f"w{rank + 1}", args)

    spans = [span("allreduce", r, s, dim="tensor", bytes=100) for r in range(4) for s in (1, 2)]
    spans += [span("allreduce", r, s, dim="data", bytes=1000) for r in range(4) for s in (1, 2) for _ in range(3)]
    spans += [span("send", 0, s, bytes=50) for s in (1, 2)] + [span("recv", 1, s, bytes=50) for s in (1, 2)]
    spans += [span("allreduce", 0, 1, phase="all-reduce", bytes=7)]  # a one-dimensional run's: no dim, not counted
    assert bytes_per_dimension(spans, 4) == {"tensor": 100.0, "data": 3000.0, "pipeline": 12.5}


def test_the_measured_legend_says_each_dimensions_bytes_and_the_workers_ranges():
    from opentikz_dt.figures.topology_mesh import measured_legend

    layout = measured_legend(_mesh(2, 2, 2), build_layout(_mesh(2, 2, 2)), {"tensor": 131072, "data": 176000},
                             {"step_time_s": {"w1": 0.1237, "w2": 0.1584}})
    text = {n.name: n.text for n in layout.nodes}
    assert text["legend-tp-label"].endswith("(2 workers): 131 kB per step")
    assert text["legend-dp-label"].endswith(": 176 kB per step")
    assert text["legend-pp-label"].endswith(": 0 B per step")
    assert text["note"].endswith("step time per worker 123.7-158.4 ms")


@pytest.mark.dist
@pytest.mark.latex
def test_a_2x2_runs_topology_carries_its_bytes_per_dimension():
    pytest.importorskip("torch")
    from opentikz_dt.figures.checks import check_figure_geometry
    from opentikz_dt.figures.compile import compile_pdf
    from opentikz_dt.figures.topology_mesh import bytes_per_dimension
    from opentikz_dt.measured.annotate import render_annotated_topology
    from opentikz_dt.measured.run import load_run
    from opentikz_dt.runner.testing import run_small, small_spec_data
    from opentikz_dt.workload import human_bytes

    data = small_spec_data("mesh", topology={"workers": {"count": 4}},  # the launch test_mesh_strategy shares
                           strategy={"parallelism": {"data": 2, "tensor": 2}, "data_parallel": "allreduce"},
                           training={"model": {"layers": [16, 32, 32, 32, 32, 4]}, "steps": 2})
    run = load_run(run_small(data).run_dir)
    per_dim = bytes_per_dimension(run.trace.spans, 4)
    # per step: 3 tensor all-reduces of 32 x 32 fp32 values; one data all-reduce of the slice's gradients
    assert per_dim["tensor"] == 3 * 32 * 32 * 4 and per_dim["data"] > 0
    tex = render_annotated_topology(run)
    assert f"(2 workers): {human_bytes(per_dim['tensor'])} per step" in tex
    assert check_figure_geometry(compile_pdf(tex).log) == []


@pytest.mark.latex
def test_at_page_width_a_mesh_too_wide_draws_fewer_stages():
    from opentikz_dt.figures.compile import compile_pdf, pdf_page_size
    from opentikz_dt.figures.fit import with_width

    spec = with_width(_mesh(4, 4, 4, hosts=8), "page")
    assert [n.name for n in build_layout(spec).nodes if n.name in ("s1", "s2", "s3", "s4", "s2-more")] == [
        "s1", "s2-more", "s4"]
    assert len([n for n in build_layout(with_width(_mesh(4, 4, 4), "page")).nodes if n.name[:1] == "s"]) == 4
    width, _ = pdf_page_size(compile_pdf(render_topology(spec)).pdf)
    assert width / 72.27 * 2.54 <= 17.8 + 0.02
