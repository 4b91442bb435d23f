"""What a reviewer rejects at a glance, checked on the generated TeX and the compiled PDF:
figures at the width asked, tables without dangling marks or blank bands, notes that are
true of the figure they sit under."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from opentikz_dt.figures.compile import compile_pdf
from opentikz_dt.figures.fit import COLUMN_CM, with_width
from opentikz_dt.figures.pdfwords import page_size_cm, pdf_words
from opentikz_dt.measured.compare import render_summary_table, summarize
from opentikz_dt.measured.figures import render_run_figures
from opentikz_dt.measured.run import load_run
from opentikz_dt.predict.synthetic import write_synthetic_run


def _run(tmp_path: Path, kind: str = "ps-sync", name: str | None = None, **kw):
    return load_run(write_synthetic_run(tmp_path / (name or kind), kind, steps=kw.pop("steps", 12), **kw))


def _column(run):
    import dataclasses

    return dataclasses.replace(run, spec=with_width(run.spec, "column"))


@pytest.mark.latex
@pytest.mark.parametrize("stem", ["plot-loss", "plot-throughput", "table-summary"])
def test_every_run_figure_kind_is_drawn_at_column_width(tmp_path, stem):
    run = _column(_run(tmp_path, "ps-async", slowdown={"w3": 2.0}))  # workers differ: a bar chart is drawn
    # a long hardware line is what a real run's note says: it must wrap, not widen the figure
    run.info["hardware"] = {"cpu": "Intel(R) Xeon(R) Platinum 8480+ with a rather long model name", "cores": 224}
    tex = render_run_figures(run, only=(stem,))[stem]
    width, _ = page_size_cm(compile_pdf(tex).pdf)
    assert width <= COLUMN_CM + 0.05, f"{stem} is {width:.2f} cm wide at column width ({COLUMN_CM} cm)"


def test_a_table_without_a_diverged_run_has_no_diverged_mark(tmp_path):
    run = _run(tmp_path)
    table = render_summary_table([summarize(run, None)], None, run.spec)
    assert "ddagger" not in table and "Diverged" not in table


def test_a_single_run_table_does_not_mention_the_compare_figures(tmp_path):
    run = _run(tmp_path)
    metrics = json.loads((run.path / "metrics.json").read_text())
    entry = {"parameters": 1000, "gradients": 1000, "optimizer": 0, "activations": 500}
    run.metrics["memory"] = {w: entry for w in metrics["per_worker_samples_per_s"]}
    table = render_run_figures(run, only=("table-summary",))["table-summary"]
    assert "Memory/rank" in table and "compare-memory" not in table


@pytest.mark.latex
def test_no_blank_band_under_the_table_notes(tmp_path):
    run = _run(tmp_path)
    pdf = compile_pdf(render_summary_table([summarize(run, None)], None, run.spec)).pdf
    _, height_cm = page_size_cm(pdf)
    lowest_pt = max(word.y1 for word in pdf_words(pdf))
    gap_pt = height_cm / 2.54 * 72 - lowest_pt
    assert gap_pt < 10, f"{gap_pt:.1f} pt of empty page under the last note"


def test_an_illustrative_expected_timeline_is_drawn_in_relative_units(repo, tmp_path):
    from opentikz_dt.figures.render import render_timeline
    from opentikz_dt.predict.calibration import illustrative_calibration
    from opentikz_dt.predict.expected import illustrative_timeline, predicted_timeline
    from opentikz_dt.spec import load_spec

    spec = load_spec(repo / "examples" / "ps-sync.yaml")
    tex = render_timeline(spec)
    assert "time (ms)" not in tex and "time (relative units)" in tex and "illustrative cost model" in tex
    ticks = illustrative_timeline(spec)
    assert ticks.axis_unit_ms == pytest.approx(ticks.span()[1] - ticks.span()[0])  # the span is 1 unit
    # costs from a calibration (measured numbers) keep their milliseconds, though the same simulator draws both
    known, _ = predicted_timeline(spec, illustrative_calibration(spec).save(tmp_path / "cal.json"))
    assert known.axis_unit_ms is None and "ms" in str(known.axis_label)


def _ylimits(tex: str) -> tuple[float, float]:
    import re

    match = re.search(r"ymin=([-\d.e]+), ymax=([-\d.e]+)", tex)
    return float(match.group(1)), float(match.group(2))


def test_compare_loss_axis_fits_the_data(tmp_path):
    from opentikz_dt.measured.plots import render_loss_plot

    runs = [_run(tmp_path, "ps-sync"), _run(tmp_path, "allreduce-ring")]
    for index, run in enumerate(runs):  # a transformer's losses: 5.6 down to 5.46, nowhere near 0 or 6
        run.metrics["loss"] = [5.6 - 0.14 * k / 11 + 0.003 * index for k in range(12)]
    low, high = _ylimits(render_loss_plot(runs))
    data_low, data_high = 5.46, 5.603
    assert low <= data_low and high >= data_high
    assert (data_high - data_low) / (high - low) > 0.6, (low, high)  # the lines fill most of the axis


def test_coinciding_loss_lines_are_said(tmp_path):
    from opentikz_dt.measured.plots import render_loss_plot

    same = [_run(tmp_path, "ps-sync"), _run(tmp_path, "allreduce-ring")]  # the synthetic loss of both: identical
    assert same[0].metrics["loss"] == same[1].metrics["loss"]
    tex = render_loss_plot(same)
    assert "synth-ps-sync and synth-allreduce-ring: the same loss at every step" in tex
    same[1].metrics["loss"] = [v * 1.01 for v in same[1].metrics["loss"]]
    assert "the same loss at every step" not in render_loss_plot(same)


def test_two_runs_of_one_spec_name_are_named_by_their_run_folders(tmp_path):
    from opentikz_dt.measured.compare import compare_runs

    long = write_synthetic_run(tmp_path / "long-run", "ps-sync", steps=12)
    short = write_synthetic_run(tmp_path / "short-run", "ps-sync", steps=8)  # same spec name, other spec
    compare_runs([long, short], tmp_path / "out", formats=("tex",))
    legend = (tmp_path / "out" / "compare-loss.tex").read_text()
    assert "\\addlegendentry{long-run}" in legend and "\\addlegendentry{short-run}" in legend
    rows = [line for line in (tmp_path / "out" / "compare-table.tex").read_text().splitlines() if " & " in line]
    assert any(row.startswith("long-run &") for row in rows) and any(row.startswith("short-run &") for row in rows)


def test_identical_worker_rates_get_a_note_not_a_bar_chart(tmp_path):
    sync = _run(tmp_path, "ps-sync")
    rates = sync.metrics["per_worker_samples_per_s"]
    assert len(set(rates.values())) == 1  # synchronous steps: one rate for every worker
    figures = render_run_figures(sync)
    assert "plot-throughput" not in figures
    assert f"Per worker: {next(iter(rates.values())):,.0f} samples/s, every worker alike" in figures["table-summary"]
    straggler = _run(tmp_path, "ps-async", slowdown={"w3": 2.0})
    assert "plot-throughput" in render_run_figures(straggler)  # workers differ: the bars show how


@pytest.mark.latex
@pytest.mark.parametrize("width", [None, "column"])
def test_fsdp_links_name_both_flows_they_carry(repo, width):
    from opentikz_dt.figures.checks import check_figure_geometry
    from opentikz_dt.figures.pdfwords import overlapping_words
    from opentikz_dt.figures.render import render_topology
    from opentikz_dt.spec import load_spec

    spec = with_width(load_spec(repo / "examples" / "fsdp-transformer.yaml"), width)
    tex = render_topology(spec)
    links = [line for line in tex.splitlines() if line.lstrip().startswith("\\draw[grad, <->]")]
    assert links and "\\weightlabel}, \\gradlabel}" in links[0]  # parameters gathered in, gradients scattered out
    # (at one column each collective's name stands over what it moves: the bar as narrow as its last lines)
    joint = "\\\\" if width else " "
    assert f"all-gather{joint}params (\\weightlabel)" in tex and f"reduce-scatter{joint}grads (\\gradlabel)" in tex
    result = compile_pdf(tex)
    assert check_figure_geometry(result.log) == [] and overlapping_words(pdf_words(result.pdf)) == []


def _sweep_points(memory_of=lambda series, w: 10 * 10**6):
    from opentikz_dt.predict.sweep import Point

    return [Point(series, w, rate * w, 2700 + w, memory_bytes=memory_of(series, w))
            for w in (2, 4, 8) for series, rate in (("algorithm: ring", 100.0), ("algorithm: native", 100.02))]


def test_sweep_legend_reads_as_paper_text_and_its_coincidence_note_is_true(repo):
    from opentikz_dt.predict.sweep import _series, render_scaling
    from opentikz_dt.spec import load_spec

    labels = [label for label, _ in _series(("strategy.algorithm=ring,native",))[0]]
    assert labels == ["algorithm: ring", "algorithm: native"]  # not the CLI's algorithm=ring
    assert [label for label, _ in _series(("training.batch_size=32,64",))[0]] == ["batch size: 32", "batch size: 64"]
    tex = render_scaling(_sweep_points(), [], load_spec(repo / "examples" / "transformer-ring.yaml"),
                         {"calibration": "illustrative"})
    assert "\\addlegendentry{algorithm: ring}" in tex and "algorithm=" not in tex
    # pgfplots draws in order: native, the later line, lies on top of ring
    assert tex.index("\\addlegendentry{algorithm: ring}") < tex.index("\\addlegendentry{algorithm: native}")
    assert "its line is drawn over that of algorithm: ring" in tex and "lies under" not in tex


@pytest.mark.latex
def test_a_flat_memory_panel_becomes_a_note_and_urls_in_sweep_notes_never_hyphenate(repo):
    from opentikz_dt.predict.sweep import render_scaling
    from opentikz_dt.spec import load_spec

    spec = load_spec(repo / "examples" / "transformer-ring.yaml")
    # longer than a line, with hyphens and underscores: it must break only after a slash
    url = "https://raw.githubusercontent.com/mlcommons/inference_results_v4.1/main/closed/NVIDIA/systems/H200-SXM-141GBx8.json"
    assumed = {"calibration": "illustrative", "link_bytes_per_s": 12.5e9,
               "link_preset": {"name": "100gbe", "source": url, "compute": "x"}}
    flat = render_scaling(_sweep_points(), [], spec, assumed)
    assert "memory per worker (expected)" not in flat  # no panel for one number
    assert "memory per worker: 10 MB at every worker count on every line" in flat
    assert "coincides with algorithm: ring in memory" not in flat  # the dropped panel is not compared
    pdf = compile_pdf(flat).pdf  # the nearly flat step time (2,702-2,708 ms) on a log axis compiles
    words = [w.text for w in pdf_words(pdf)]
    assert url in "".join(words)  # printed as itself (no doubled escapes), pieces joined across lines
    assert not [w for w in words if w.endswith("-") and w.rstrip("-")], words  # no line ends in a hyphen
    growing = render_scaling(_sweep_points(lambda series, w: w * 10**6), [], spec, assumed)
    assert "memory per worker (expected)" in growing


@pytest.mark.latex
@pytest.mark.parametrize("longest_ms, unit", [(8.0, "ms"), (45_000.0, "s"), (1.2e6, "min"), (1e9, "h")])
def test_shapes_step_time_axis_switches_unit_and_names_pipeline_first(repo, longest_ms, unit):
    import re

    from opentikz_dt.predict.shapes import ShapePoint, render_shapes
    from opentikz_dt.spec import load_spec

    spec = load_spec(repo / "examples" / "fsdp-tensor.yaml")
    points = [ShapePoint("1 x 2 x 2", longest_ms / 2, 10.0, memory_bytes=10**6),
              ShapePoint("2 x 2 x 1", longest_ms, 5.0, memory_bytes=2 * 10**6)]
    tex = render_shapes(points, [], spec, {"calibration": "illustrative", "global_batch": 16}, 4)
    assert f"xlabel={{step time ({unit})}}" in tex
    ticks = [float(t) for t in re.search(r"xtick=\{([^}]*)\}, xlabel=\{step time", tex).group(1).split(",")]
    assert max(ticks) < 10_000  # never 1,000,000,000 ms
    assert "ylabel={pipeline $\\times$\\\\data $\\times$ tensor}" in tex and "as pipeline x data x tensor" in tex
    words = " ".join(w.text for w in pdf_words(compile_pdf(tex).pdf))
    assert f"step time ({unit})" in words


def test_measured_links_each_say_the_flow_they_carry(tmp_path):
    from opentikz_dt.measured.annotate import render_annotated_topology

    for kind in ("ps-sync", "ps-async"):
        tex = render_annotated_topology(_run(tmp_path, kind), False)
        grads = [line for line in tex.splitlines() if line.lstrip().startswith("\\draw[grad")]
        weights = [line for line in tex.splitlines() if line.lstrip().startswith("\\draw[wts")]
        assert len(grads) == len(weights) == 3, kind
        assert all("\\gradlabel~" in line for line in grads), grads  # the symbol and the bytes, on every link
        assert all("\\weightlabel~" in line for line in weights), weights


def test_the_sync_barrier_is_said_and_no_bar_crosses_the_arrows(repo):
    from opentikz_dt.figures.render import render_topology
    from opentikz_dt.spec import load_spec

    tex = render_topology(load_spec(repo / "examples" / "ps-sync.yaml"))
    assert "\\draw[barrier]" not in tex and "sync: a barrier waits for all 3" in tex
