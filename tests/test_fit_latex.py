"""Timelines and plots laid out for one column: measured on the compiled PDF (pdfinfo, pdftotext -bbox)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from opentikz_dt.figures.compile import compile_pdf
from opentikz_dt.figures.fit import COLUMN_CM, MIN_TEXT_PT, with_width
from opentikz_dt.figures.pdfwords import glued_labels, overlapping_words, page_size_cm, pdf_words, smallest_text_pt
from opentikz_dt.figures.render import render_timeline
from opentikz_dt.measured.plots import render_loss_plot, render_throughput_plot
from opentikz_dt.measured.run import load_run
from opentikz_dt.measured.timeline import measured_timeline
from opentikz_dt.predict.synthetic import write_synthetic_run
from opentikz_dt.spec import load_spec, spec_from_data

pytestmark = pytest.mark.latex
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _measure(tex: str) -> tuple:
    pdf = compile_pdf(tex).pdf
    words = pdf_words(pdf)
    return page_size_cm(pdf)[0], smallest_text_pt(words), words


def test_expected_timelines_fit_one_column_with_every_text_legible():
    specs = [load_spec(EXAMPLES / f"{name}.yaml") for name in ("ps-sync", "pipeline-1f1b", "allreduce-hierarchical")]
    specs.append(spec_from_data({"strategy": {"kind": "parameter-server"}, "topology": {"workers": {"count": 1024}},
                                 "training": {"dataset": {"samples": 2000000}}, "figure": {"palette": "dark"}}))
    for spec in specs:
        width, smallest, words = _measure(render_timeline(with_width(spec, "column")))
        assert width <= COLUMN_CM, (spec.source, width)
        assert smallest >= MIN_TEXT_PT, (spec.source, smallest)
        assert overlapping_words(words) == [], spec.source
    text = " ".join(w.text for w in words)
    assert "1,020 more workers" in text and "W1024" in text  # 1024 workers: W1..W3, the ellipsis lane, W1024
    # the natural width, as before: a 12 cm plot area, scaled to a column its box text is unreadable
    width, smallest, _ = _measure(render_timeline(specs[0]))
    assert width > 13 and smallest * COLUMN_CM / width < MIN_TEXT_PT


def test_plots_and_measured_timelines_fit_one_column_and_tick_labels_never_run_together(tmp_path):
    four = load_run(write_synthetic_run(tmp_path / "four", "ps-sync", workers=4, steps=6))
    natural = pdf_words(compile_pdf(render_throughput_plot([four])).pdf)
    assert glued_labels(natural, [f"Worker {i}" for i in range(1, 5)]) == []  # at natural width the full labels fit
    eight = load_run(write_synthetic_run(tmp_path / "eight", "ps-sync", workers=8, steps=6))
    column = dataclasses.replace(eight, spec=with_width(eight.spec, "column"))
    bars = render_throughput_plot([column])
    measured = render_timeline(column.spec, measured_timeline(column.spec, column.trace).timeline)
    assert "{Worker 8}" in measured and "4 more workers" in measured  # workers 1-3, the ellipsis lane, 8
    for tex in (bars, render_loss_plot([column]), measured):
        width, smallest, words = _measure(tex)
        assert width <= COLUMN_CM and smallest >= MIN_TEXT_PT
        assert overlapping_words(words) == []
    words = pdf_words(compile_pdf(bars).pdf)
    assert glued_labels(words, [f"W{i}" for i in range(1, 9)]) == []  # abbreviated: the axis title says "worker"
    assert "Worker" not in [w.text for w in words]


def test_the_word_checks_catch_labels_that_run_together():
    tex = (r"\documentclass{standalone}\usepackage[T1]{fontenc}\usepackage{lmodern}\usepackage{tikz}\begin{document}"
           r"\sffamily\scriptsize\begin{tikzpicture}\foreach \i in {1,...,4} \node[inner sep=0pt] at (\i*0.95,0) {Worker \i};"
           r"\node at (0,0) {overlap}; \node at (0.05,0.05) {overlap};\end{tikzpicture}\end{document}")
    words = pdf_words(compile_pdf(tex).pdf)
    assert glued_labels(words, [f"Worker {i}" for i in range(1, 5)]) != []
    assert overlapping_words(words) != []
