"""Every measured figure compiles with real pdflatex: timelines, annotated topologies, plots, tables."""

from __future__ import annotations

import re

import pytest

from opentikz_dt.figures.bbox import parse_bboxes
from opentikz_dt.figures.compile import compile_pdf, pdf_text
from opentikz_dt.measured.compare import compare_runs
from opentikz_dt.measured.figures import render_run_figures, write_run_figures
from opentikz_dt.measured.plots import workers_alike
from opentikz_dt.measured.run import load_run
from opentikz_dt.predict.synthetic import write_synthetic_run

pytestmark = pytest.mark.latex
KINDS = ["ps-sync", "ps-async", "allreduce-ring", "pipeline-1f1b"]


@pytest.mark.parametrize("kind", KINDS)
def test_every_figure_of_a_run_compiles(tmp_path, kind):
    run_dir = write_synthetic_run(tmp_path / kind, kind, steps=12, slowdown={"w3": 2.0} if kind.startswith("ps") else None)
    written = write_run_figures(run_dir, tmp_path / "out", ("tex", "pdf"))
    pdfs = sorted(p.name for p in written if p.suffix == ".pdf")
    # named by the run (its directory), so two runs' figures can share a folder
    alike = workers_alike(load_run(run_dir).metrics["per_worker_samples_per_s"])  # then a note, no bar chart
    expected = [f"measured-{kind}-{name}.pdf" for name in ("timeline", "topology", "loss", "table")
                + (("staleness",) if kind == "ps-async" else ()) + (() if alike else ("throughput",))]
    assert pdfs == sorted(expected)
    assert all((tmp_path / "out" / name).read_bytes().startswith(b"%PDF") for name in pdfs)


def test_measured_timeline_lane_labels_do_not_overlap(tmp_path):
    run = load_run(write_synthetic_run(tmp_path / "r", "ps-sync", steps=12))
    tex = render_run_figures(run, only=("measured-timeline",))["measured-timeline"]
    boxes = {b.name: b for b in parse_bboxes(compile_pdf(tex).log)}
    labels = [b for name, b in boxes.items() if name.endswith("-label") and name.startswith(("w", "ps"))]
    assert len(labels) == 4
    for a in labels:
        for b in labels:
            assert a is b or a.overlap(b) == 0, (a.name, b.name)


def test_crashed_run_figures_compile_and_say_so(tmp_path):
    run_dir = write_synthetic_run(tmp_path / "crash", "ps-sync", steps=12, crash_at_ms=60, crash_rank=2)
    run = load_run(run_dir)
    tex = render_run_figures(run, only=("measured-timeline",))["measured-timeline"]
    text = pdf_text(compile_pdf(tex).pdf)
    assert "run failed: rank 2 (w3) exited with 1" in " ".join(text.split())
    written = write_run_figures(run_dir, tmp_path / "out", ("pdf",))
    # timeline, topology, loss, table (sync: every worker one rate, said in the table, no bar chart)
    assert len([p for p in written if p.suffix == ".pdf"]) == 4


def test_compare_writes_overlays_and_a_booktabs_table(tmp_path):
    runs = [write_synthetic_run(tmp_path / k, k, steps=12) for k in ("ps-sync", "ps-async", "allreduce-ring")]
    written = compare_runs(runs, tmp_path / "cmp", ("tex", "pdf"))
    names = sorted(p.name for p in written)
    # every synthetic run's workers share one rate: no bar chart, the table's note says the rates
    assert names == sorted(f"compare-{n}.{ext}" for n in ("loss", "staleness", "table")
                           for ext in ("tex", "pdf"))
    table = " ".join(pdf_text((tmp_path / "cmp" / "compare-table.pdf").read_bytes()).split())
    for name in ("synth-ps-sync", "synth-ps-async", "synth-allreduce-ring", "Samples/s", "Bytes/step",
                 "workers alike"):
        assert name in table


def test_body_only_tex_is_bare_and_the_pdf_still_compiles(tmp_path):
    run_dir = write_synthetic_run(tmp_path / "r", "ps-async", steps=12)
    written = write_run_figures(run_dir, tmp_path / "out", ("tex", "pdf"), body_only=True, only=("plot-loss",))
    tex = (tmp_path / "out" / "measured-r-loss.tex").read_text()
    assert "\\documentclass" not in tex and "\\begin{groupplot}" in tex
    assert (tmp_path / "out" / "measured-r-loss.pdf").read_bytes().startswith(b"%PDF")
    assert len(written) == 2


def test_dark_palette_figures_compile(tmp_path):
    import yaml

    run_dir = write_synthetic_run(tmp_path / "dark", "ps-async", steps=12, slowdown={"w3": 2.0})  # with its bars
    spec = yaml.safe_load((run_dir / "spec.yaml").read_text())
    spec["figure"]["palette"] = "dark"
    (run_dir / "spec.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    written = write_run_figures(run_dir, tmp_path / "out", ("tex", "pdf"))
    assert sum(p.suffix == ".pdf" for p in written) == 6
    assert "\\pagecolor{otpaper}" in (tmp_path / "out" / "measured-dark-table.tex").read_text()


def test_measured_ring_and_pipeline_topologies_keep_edges_off_their_labels(tmp_path):
    """The ring's return edge clears the per-link traffic labels; the pipeline's activation bytes
    clear Stage 1's icon; the footer names stages, not ranks."""
    from opentikz_dt.figures.checks import check_figure_geometry
    from opentikz_dt.measured.annotate import render_annotated_topology

    for kind in ("allreduce-ring", "pipeline-1f1b"):
        tex = render_annotated_topology(load_run(write_synthetic_run(tmp_path / kind, kind, steps=12)))
        assert check_figure_geometry(compile_pdf(tex).log) == [], kind
        assert "traffic per link per step" in tex
        if kind == "allreduce-ring":
            assert "kB/step" in tex
        else:
            footer = tex.split("measured, mean of")[1].split("};")[0]
            assert "Stage 2 per step: " in footer and "w2" not in footer
    # at one column's width the annotated PS still keeps its labels apart and its text legible
    import dataclasses

    from opentikz_dt.figures.compile import pdf_words
    from opentikz_dt.figures.fit import with_width

    run = load_run(write_synthetic_run(tmp_path / "ps", "ps-sync", steps=12))
    result = compile_pdf(render_annotated_topology(dataclasses.replace(run, spec=with_width(run.spec, "column"))))
    assert check_figure_geometry(result.log) == []
    assert min(size for _, size in pdf_words(result.pdf)) >= 5.95


def _multihost_run(path, strategy=None, workers=8, hosts=4, servers=0):
    """A synthetic run across hosts (all-reduce unless `strategy` says otherwise) with run.json's
    ranks on distinct hosts, as a multi-host launch writes them (addr and node_rank per rank):
    the workers spread evenly as the spec puts them, the servers on the last host."""
    import json
    import random

    from opentikz_dt.predict.costs import Costs
    from opentikz_dt.predict.rundir import write_run_dir
    from opentikz_dt.predict.simulate import simulate
    from opentikz_dt.predict.synthetic import synthetic_calibration, synthetic_loss
    from opentikz_dt.spec import spec_from_data

    data = {"name": "mh", "topology": {"workers": {"count": workers}, "hosts": hosts},
            "strategy": strategy or {"kind": "allreduce", "algorithm": "hierarchical"}, "training": {"steps": 8}}
    if servers:
        data["topology"]["servers"] = {"count": servers}
    spec = spec_from_data(data, name="mh")
    result = simulate(spec, Costs(synthetic_calibration(spec), spec, jitter=random.Random(0)), 8)
    write_run_dir(path, spec, result, 8, loss=synthetic_loss(8), dtgen="synthetic")
    info = json.loads((path / "run.json").read_text())
    for rank in info["ranks"]:
        host = spec.topology.host_of(f"w{rank['rank'] + 1}") if rank["role"] == "worker" else hosts
        rank["addr"], rank["node_rank"] = f"198.18.0.{host}", host - 1
    (path / "run.json").write_text(json.dumps(info))
    return path


@pytest.mark.parametrize("algorithm, hosts", [("hierarchical", 4), ("native", 2)])
def test_measured_multihost_topology_has_no_overlaps(tmp_path, algorithm, hosts):
    # 4 hosts x 2 workers: the step-time labels of side-by-side workers, the leaders' bus and
    # the footer under the last host box must all stay clear of each other; a link leaving a
    # host box keeps its bytes label off the box's border.
    from opentikz_dt.figures.checks import check_figure_geometry
    from opentikz_dt.measured.annotate import render_annotated_topology

    run = load_run(_multihost_run(tmp_path / "run", {"kind": "allreduce", "algorithm": algorithm}, 2 * hosts, hosts))
    tex = render_annotated_topology(run)
    for host in range(1, hosts + 1):
        assert f"(198.18.0.{host})" in tex
    assert "ms/step" in tex
    assert check_figure_geometry(compile_pdf(tex).log) == []


MULTIHOST_AT_COLUMN = {  # strategy, workers, hosts, servers
    "hierarchical-4x2": ({"kind": "allreduce", "algorithm": "hierarchical"}, 8, 4, 0),
    "allreduce-2x1": ({"kind": "allreduce", "algorithm": "native"}, 2, 2, 0),
    "ring-2x2": ({"kind": "allreduce", "algorithm": "ring"}, 4, 2, 0),
    "ps-2x2": ({"kind": "parameter-server", "sync": "sync"}, 4, 2, 1),
    "ps-sharded-2x1": ({"kind": "parameter-server", "sync": "sync"}, 2, 2, 2),
}


@pytest.mark.parametrize("case", MULTIHOST_AT_COLUMN)
def test_measured_multihost_topologies_fit_one_column(tmp_path, case):
    """At one column's width a measured topology across hosts is at most 8.5 cm wide at final size,
    no word of it (step times, bytes, host addresses) is under 6 pt, and no edge runs through a
    text or a node it does not join (the data fan and the links to the server stay clear of the
    workers' labels)."""
    from dataclasses import replace

    from opentikz_dt.figures.checks import check_figure_geometry
    from opentikz_dt.figures.compile import pdf_page_size, pdf_words
    from opentikz_dt.figures.fit import with_width
    from opentikz_dt.measured.annotate import render_annotated_topology

    run = load_run(_multihost_run(tmp_path / "run", *MULTIHOST_AT_COLUMN[case]))
    result = compile_pdf(render_annotated_topology(replace(run, spec=with_width(run.spec, "column"))))
    width, _ = pdf_page_size(result.pdf)
    assert width / 72.27 * 2.54 <= 8.5 + 0.02, width
    words = pdf_words(result.pdf)
    assert min(size for _, size in words) >= 6.0 - 0.05, min(words, key=lambda w: w[1])
    assert check_figure_geometry(result.log) == []
    hosts = MULTIHOST_AT_COLUMN[case][2]
    # the step times and the hosts' addresses (4 hosts stack too tall for a column: the first,
    # an ellipsis and the last stand for them, as for a column of workers)
    drawn = (1, 4) if hosts == 4 else (1, 2)
    assert {"ms/step"} | {f"(198.18.0.{h})" for h in drawn} <= {w for w, _ in words}


def test_a_measured_figure_wider_than_its_target_width_is_reported(tmp_path):
    # The summary table, turned at a narrow width, still has its fixed column of metric names:
    # at 4 cm it stays wider than asked, and the user hears it (the CLI prints these lines on
    # stderr); at one column it fits, as the timeline does.
    run_dir = write_synthetic_run(tmp_path / "r", "ps-sync", steps=12)
    heard = []
    write_run_figures(run_dir, tmp_path / "out", ("pdf",), only=("table-summary", "measured-timeline"),
                      width="column", notify=heard.append)
    assert heard == []
    write_run_figures(run_dir, tmp_path / "out", ("pdf",), only=("table-summary",), width="4cm", notify=heard.append)
    assert len(heard) == 1 and "measured-r-table.tex: drawn" in heard[0] and "4.0 cm asked" in heard[0], heard


@pytest.mark.parametrize("kind", ["allreduce-ring"])
def test_a_64_worker_measured_topology_keeps_its_brace_and_links_off_the_worker_labels(tmp_path, kind):
    """Elided workers whose labels grew by their step times: the brace standing for all 64
    runs left of the labels (not through their first letters), and a ring link keeps clear
    of them (a line within a point of the glyphs reads as touching)."""
    from opentikz_dt.figures.checks import check_figure_geometry
    from opentikz_dt.measured.annotate import render_annotated_topology

    tex = render_annotated_topology(load_run(write_synthetic_run(tmp_path / kind, kind, workers=64, steps=4)))
    assert "ms/step" in tex and "64 workers" in tex
    assert check_figure_geometry(compile_pdf(tex).log) == []


@pytest.mark.parametrize("kind, span", [("allreduce-ring", "optimizer"), ("ps-sync", "update")])
def test_an_fp16_skipped_step_is_drawn_crossed_out_and_the_legend_says_so(tmp_path, kind, span):
    """The runner marks the optimizer step (server update) the fp16 scaler skipped with arg
    `skipped`: that box is drawn as its own kind, crossed out, and the legend names it;
    the steps around it stay plain optimizer steps (updates)."""
    import json

    from measured_helpers import parse_timeline_tex

    run_dir = write_synthetic_run(tmp_path / kind, kind, steps=8)
    path = run_dir / "trace.json"
    trace = json.loads(path.read_text())
    marked = [e for e in trace["traceEvents"] if e.get("name") == span and e["args"].get("step") == 3]
    assert marked
    for e in marked:
        e["args"]["skipped"] = True
    path.write_text(json.dumps(trace))
    tex = render_run_figures(load_run(run_dir), steps="2:4", only=("measured-timeline",))["measured-timeline"]
    drawn = parse_timeline_tex(tex)
    skipped = {lane: [b for b in boxes if b[0] == "skipped"] for lane, boxes in drawn.items()}
    ranks = {e["pid"] for e in marked}
    assert sum(len(boxes) for boxes in skipped.values()) == len(ranks)  # one crossed box per rank that skipped
    assert all(len(boxes) <= 1 for boxes in skipped.values())
    plain = [b for boxes in drawn.values() for b in boxes if b[0] == span]
    assert len(plain) >= 2 * len(ranks)  # steps 2 and 4 were applied: drawn as they are
    style = tex.split("tl-skipped/.style={", 1)[1].split("},\n", 1)[0]
    assert "path picture" in style and "north east" in style  # the cross: its two diagonals
    compiled = compile_pdf(tex)
    assert "legend-skipped" in {b.name for b in parse_bboxes(compiled.log)}
    assert "skipped (fp16 overflow)" in " ".join(pdf_text(compiled.pdf).split())


@pytest.mark.parametrize("workers", [4, 64])
def test_a_tall_parameter_server_column_keeps_its_links_and_brace_off_the_worker_labels(tmp_path, workers):
    """The server's links leave the top and bottom workers of a tall column steeply: a label
    holding its step time on one line ("Worker 1: 75.8 ms/step", wider than the icon) would be
    cut by them, so every time goes on a line of its own; an elided column's brace stands left
    of the widest label and its count ("64 workers") clear of the data icon's label."""
    from opentikz_dt.figures.checks import check_figure_geometry
    from opentikz_dt.measured.annotate import render_annotated_topology
    from opentikz_dt.predict.predict import predict

    run_dir, _ = predict("examples/ps-sync.yaml", tmp_path / "p", workers=workers, steps=4)
    tex = render_annotated_topology(load_run(run_dir))
    assert check_figure_geometry(compile_pdf(tex).log) == []
    assert "(w1-label) {\\workeronelabel\\\\" in tex  # the time under the name, not beside it


def _example_run(path, repo, example):
    """A run of examples/<example>.yaml as the simulator predicts it, written as a run directory
    (like the runs of an older dtgen: no memory data)."""
    import random

    from opentikz_dt.predict.costs import Costs
    from opentikz_dt.predict.rundir import write_run_dir
    from opentikz_dt.predict.simulate import simulate
    from opentikz_dt.predict.synthetic import synthetic_calibration, synthetic_loss
    from opentikz_dt.spec import load_spec

    spec = load_spec(repo / "examples" / f"{example}.yaml")
    result = simulate(spec, Costs(synthetic_calibration(spec), spec, jitter=random.Random(0)), 4)
    return write_run_dir(path, spec, result, 4, loss=synthetic_loss(4), dtgen="synthetic")


# ps-sync is the demo's figure: its step times used to stay beside the worker names to keep it
# compact, until the overlap check learnt to see sloped labels and found the top one ran into them.
@pytest.mark.parametrize("example", ["allreduce-native", "fsdp-transformer", "ps-sharded", "ps-sync",
                                     "transformer-pipeline"])
def test_measured_topology_at_natural_width_keeps_link_labels_clear(tmp_path, repo, example):
    """Each worker's link to the all-reduce bar (or to the next pipeline stage) holds its flow
    label and bytes without running into the icons at its ends (the bar, the next stages move
    right), and a sharded server's links, leaving the top worker steeply down, keep their sloped
    byte labels off that worker's step-time label."""
    from opentikz_dt.figures.checks import check_figure_geometry
    from opentikz_dt.measured.annotate import render_annotated_topology

    tex = render_annotated_topology(load_run(_example_run(tmp_path / "run", repo, example)))
    assert "ms/step" in tex and re.search(r"[0-9] [kMG]?B\}", tex)  # step times, bytes on the links
    assert check_figure_geometry(compile_pdf(tex).log) == []


@pytest.mark.parametrize("example", ["pipeline-1f1b", "transformer-pipeline"])
def test_measured_pipeline_topology_fits_one_column(tmp_path, repo, example):
    """At one column a measured pipeline's stages sit as close as each line of their labels
    (name, step time) allows, not the whole label read as one line: at most 8.5 cm wide, and
    a link between two stages still holds its label with its bytes."""
    from dataclasses import replace

    from opentikz_dt.figures.checks import check_figure_geometry
    from opentikz_dt.figures.compile import pdf_page_size, pdf_words
    from opentikz_dt.figures.fit import with_width
    from opentikz_dt.measured.annotate import render_annotated_topology

    run = load_run(_example_run(tmp_path / "run", repo, example))
    result = compile_pdf(render_annotated_topology(replace(run, spec=with_width(run.spec, "column"))))
    width, _ = pdf_page_size(result.pdf)
    assert width / 72.27 * 2.54 <= 8.5 + 0.02, width
    words = pdf_words(result.pdf)
    assert min(size for _, size in words) >= 6.0 - 0.05, min(words, key=lambda w: w[1])
    assert "ms/step" in {w for w, _ in words}
    assert check_figure_geometry(result.log) == []


def test_a_sloped_label_running_down_is_checked_for_overlaps():
    # A label sloped along a link running down to the right: its probed south west corner lies
    # above its north east one. The geometry check still finds what it overlaps (here a
    # worker's label), and finds nothing where the two are apart.
    from opentikz_dt.figures.checks import check_figure_geometry

    sloped = "BBOX ps-w1-wts-label 0.0pt 20.0pt 34.0pt 6.0pt\nQUAD ps-w1-wts-label 30.0pt 0.0pt 4.0pt 26.0pt\n"
    near = check_figure_geometry(sloped + "BBOX w1-label -20.0pt 10.0pt 8.0pt 24.0pt\n")
    assert len(near) == 1 and "'ps-w1-wts-label' and 'w1-label' overlap" in near[0], near
    assert check_figure_geometry(sloped + "BBOX w1-label -40.0pt 10.0pt -10.0pt 24.0pt\n") == []


@pytest.mark.parametrize("example", ["ps-async", "ps-sync"])
def test_measured_parameter_server_sloped_link_labels_sit_beside_their_links(tmp_path, repo, example):
    """The sloped byte labels of a measured parameter server's steep links sit a point off their
    own link: anchored on it, the 1pt (dashed) arrow ran along the glyphs and read, at 300 dpi,
    as crossing them (check_paths_clear lets an edge into its own label's outer half)."""
    from opentikz_dt.figures.checks import check_figure_geometry
    from opentikz_dt.measured.annotate import render_annotated_topology

    tex = render_annotated_topology(load_run(_example_run(tmp_path / "run", repo, example)))
    assert check_figure_geometry(compile_pdf(tex).log) == []
    assert re.search(r"node\[slbl, below=1pt, sloped, pos=[0-9.]+, text=otteal", tex)  # (TeX's offset, in the label's frame)


def test_a_link_along_its_own_sloped_label_is_a_problem():
    # A sloped label (corners (0,20) (30,0) (34,6) (4,26)) whose link runs along its lower edge,
    # as a label anchored on its link (`above, sloped`) has it, is reported; a point off that
    # edge it is not. A level label (no QUAD: not rotated) hung off its link is left to
    # check_paths_clear, which lets a link into its own label's outer half.
    from opentikz_dt.figures.bbox import parse_paths, parse_quads
    from opentikz_dt.figures.checks import _Rect, check_sloped_labels_off_links

    sloped = "BBOX w1-ps-grad-label 0.0pt 20.0pt 34.0pt 6.0pt\nQUAD w1-ps-grad-label 30.0pt 0.0pt 4.0pt 26.0pt\n"

    def problems(log, off=0.0):  # the link from (0,20) to (30,0), `off` pt below it (away from the label)
        nx, ny = -4 / 52 ** 0.5, -6 / 52 ** 0.5
        path = "".join(f"PATH w1-ps-grad {3 * t + nx * off:.3f}pt {20 - 2 * t + ny * off:.3f}pt\n" for t in range(11))
        boxes = parse_bboxes(log)
        rects = {b.name: _Rect.of(b, quads) for quads in [parse_quads(log, boxes)] for b in boxes}
        return check_sloped_labels_off_links(parse_paths(path), rects)

    found = problems(sloped)
    assert len(found) == 1 and "edge 'w1-ps-grad' runs along its sloped label 'w1-ps-grad-label'" in found[0], found
    assert problems(sloped, off=0.4) != []
    assert problems(sloped, off=1.0) == []
    assert problems("BBOX w1-ps-grad-label 0.0pt 20.0pt 30.0pt 34.0pt\n") == []


# The flow each link of a measured topology carries, as the spec's diagram names it (once, on one
# link of each flow): the pipeline's activations and their gradients, the server's gradients and
# weights. Every link says it, with or without its bytes.
FLOWS = {"pipeline-1f1b": {"act": "act.", "grad": "$\\nabla$act."},
         "ps-sharded": {"grad": "\\gradlabel", "wts": "\\weightlabel"}}


@pytest.mark.parametrize("width", [None, "column"])
@pytest.mark.parametrize("example", sorted(FLOWS))
def test_every_measured_link_carries_its_flow_symbol_clear_of_the_others(tmp_path, repo, example, width):
    """A pipeline's middle links (no exact bytes: a stage sends both ways) and a sharded server's
    links (close together) name their flow like the rest, at natural and at column width, and
    no label runs into another, an icon or a link."""
    import dataclasses

    from opentikz_dt.figures.checks import check_figure_geometry
    from opentikz_dt.figures.fit import with_width
    from opentikz_dt.measured.annotate import render_annotated_topology

    run = load_run(_example_run(tmp_path / "run", repo, example))
    if width:
        run = dataclasses.replace(run, spec=with_width(run.spec, width))
    tex = render_annotated_topology(run)
    lines = [line for line in tex.splitlines() if re.match(r"^  \\draw\[(act|grad|wts)\b", line)]
    assert len(lines) == (4 if example == "pipeline-1f1b" else 6)  # two stage pairs; three workers x two
    for line in lines:
        style = re.match(r"^  \\draw\[(\w+)", line).group(1)
        label = re.search(r"-label\) \{(.*)\} [(\[]", line)
        assert label and FLOWS[example][style] in label.group(1), line
    assert check_figure_geometry(compile_pdf(tex).log) == []


def _spec_run(path, data):
    """A simulated run of the spec `data` (a dict), written as a run directory."""
    import random

    from opentikz_dt.predict.costs import Costs
    from opentikz_dt.predict.rundir import write_run_dir
    from opentikz_dt.predict.simulate import simulate
    from opentikz_dt.predict.synthetic import synthetic_calibration, synthetic_loss
    from opentikz_dt.spec import spec_from_data

    spec = spec_from_data(data, name=data["name"])
    result = simulate(spec, Costs(synthetic_calibration(spec), spec, jitter=random.Random(0)), 4)
    return write_run_dir(path, spec, result, 4, loss=synthetic_loss(4), dtgen="synthetic")


@pytest.mark.parametrize("width", [None, "column"])
def test_measured_tree_topology_keeps_its_link_labels_apart(tmp_path, width):
    """A tree's pair of links (reduce up, broadcast down) side by side each hold their label on
    their outer side, levels far enough apart for labels with step times; a worker with several
    links (w1, w2) gets no per-link bytes, its totals in the footer; at one column it fits."""
    import dataclasses

    from opentikz_dt.figures.checks import check_figure_geometry
    from opentikz_dt.figures.compile import pdf_page_size, pdf_words
    from opentikz_dt.figures.fit import with_width
    from opentikz_dt.measured.annotate import render_annotated_topology

    run = load_run(_spec_run(tmp_path / "run", {"name": "tree", "topology": {"workers": {"count": 4}},
                                                "strategy": {"kind": "allreduce", "algorithm": "tree"}}))
    if width:
        run = dataclasses.replace(run, spec=with_width(run.spec, width))
    tex = render_annotated_topology(run)
    result = compile_pdf(tex)
    assert check_figure_geometry(result.log) == []
    up = re.search(r"\(w2-w1-label-grad-label\) \{([^}]*)\}", tex).group(1)
    assert "kB" not in up and "Worker 2 per step: " in " ".join(pdf_text(result.pdf).split())
    if width:
        assert pdf_page_size(result.pdf)[0] / 72.27 * 2.54 <= 8.5 + 0.02
        assert min(size for word, size in pdf_words(result.pdf) if word == "ms/step") >= 6.0 - 0.05


@pytest.mark.parametrize("workers, width", [(3, None), (8, "column")])
def test_measured_gossip_footer_hangs_below_the_workers_box(tmp_path, workers, width):
    """The footer hangs below the box around the ring, not below the lowest label (a side
    label ends above the icon beside it, and the box's padding below that)."""
    import dataclasses

    from opentikz_dt.figures.fit import with_width
    from opentikz_dt.measured.annotate import render_annotated_topology

    run = load_run(_spec_run(tmp_path / "run", {"name": "g", "topology": {"workers": {"count": workers}},
                                                "strategy": {"kind": "gossip", "peers": 2}}))
    if width:
        run = dataclasses.replace(run, spec=with_width(run.spec, width))
    boxes = {b.name: b for b in parse_bboxes(compile_pdf(render_annotated_topology(run)).log)}
    assert boxes["measured-note"].y1 <= boxes["workers"].y0 - 4.0, (boxes["measured-note"], boxes["workers"])


def test_measured_gossip_links_carry_no_rank_total(tmp_path):
    """A gossip worker sends to all its peers; the runner counts its bytes per rank: no link
    prints that total as its own, every worker's totals are said once in the footer."""
    from opentikz_dt.figures.checks import check_figure_geometry
    from opentikz_dt.measured.annotate import render_annotated_topology

    run = load_run(_spec_run(tmp_path / "run", {"name": "g", "topology": {"workers": {"count": 6}},
                                                "strategy": {"kind": "gossip", "peers": 4}}))
    tex = render_annotated_topology(run)
    peer = [line for line in tex.splitlines() if line.startswith("  \\draw[peer")]
    assert len(peer) >= 6 and not [line for line in peer if re.search(r"[0-9] [kMG]?B", line)], peer
    result = compile_pdf(tex)
    text = " ".join(pdf_text(result.pdf).split())
    assert re.search(r"Worker 1\u2013Worker 6 per step: [0-9.]+ kB out, [0-9.]+ kB in", text), text
    assert check_figure_geometry(result.log) == []


WIDE_AT_COLUMN = {  # strategy, workers, model
    # four stages side by side are too wide for a column: the first two, an ellipsis and the last
    "pipeline-4": ({"kind": "pipeline", "microbatches": 4, "schedule": "1f1b"}, 4,
                   {"kind": "mlp", "layers": [128, 128, 128, 128, 128]}),
    # the bar's links carry both flows ("θ, ∇θ 163 kB"): sized by what they print, not by the
    # colour switch in their label, and the bar's collectives on two lines each
    "fsdp-2": ({"kind": "fsdp", "reshard_after_forward": True}, 2,
               {"kind": "transformer", "layers": 2, "d_model": 32, "heads": 2, "seq_len": 16, "vocab": 64}),
}


@pytest.mark.parametrize("case", WIDE_AT_COLUMN)
def test_measured_pipeline_and_fsdp_topologies_fit_one_column(tmp_path, case):
    """A 4-stage pipeline's and an FSDP run's measured topology at one column: at most 8.5 cm
    wide at final size, no word under 6 pt, no edge through a text or node it does not join."""
    import dataclasses
    import random

    from opentikz_dt.figures.checks import check_figure_geometry
    from opentikz_dt.figures.compile import pdf_page_size, pdf_words
    from opentikz_dt.figures.fit import with_width
    from opentikz_dt.measured.annotate import render_annotated_topology
    from opentikz_dt.predict.costs import Costs
    from opentikz_dt.predict.rundir import write_run_dir
    from opentikz_dt.predict.simulate import simulate
    from opentikz_dt.predict.synthetic import synthetic_calibration, synthetic_loss
    from opentikz_dt.spec import spec_from_data

    strategy, workers, model = WIDE_AT_COLUMN[case]
    data = {"name": case, "topology": {"workers": {"count": workers}}, "strategy": strategy,
            "training": {"steps": 6, "model": model}}
    spec = spec_from_data(data, name=case)
    result = simulate(spec, Costs(synthetic_calibration(spec), spec, jitter=random.Random(0)), 6)
    run = load_run(write_run_dir(tmp_path / "run", spec, result, 6, loss=synthetic_loss(6), dtgen="synthetic"))
    compiled = compile_pdf(render_annotated_topology(dataclasses.replace(run, spec=with_width(run.spec, "column"))))
    width, _ = pdf_page_size(compiled.pdf)
    assert width / 72.27 * 2.54 <= 8.5 + 0.02, width
    words = pdf_words(compiled.pdf)
    assert min(size for _, size in words) >= 6.0 - 0.05, min(words, key=lambda w: w[1])
    assert check_figure_geometry(compiled.log) == []
    assert "ms/step" in {w for w, _ in words}
