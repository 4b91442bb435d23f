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
    run = _column(_run(tmp_path, slowdown={"w3": 2.0}))
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
