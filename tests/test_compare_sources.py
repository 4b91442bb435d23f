"""dtgen compare of a run and a prediction of it, and every result plot, say where each run's
numbers come from and name the prediction as one: the memory note, the loss plot (a
prediction has no loss: no line, no axis, no legend entry), the table's time to loss; a
measured topology's sloped byte labels keep off their links; a sweep says which series
coincide."""

from __future__ import annotations

import json
import re

import pytest

from opentikz_dt.measured.compare import compare_runs
from opentikz_dt.measured.figures import render_run_figures
from opentikz_dt.measured.run import load_run
from opentikz_dt.predict.predict import predict
from opentikz_dt.predict.synthetic import write_synthetic_run

ILLUSTRATIVE = "illustrative cost model (no calibration): not a measurement"
CPU = "ran on CPU: AMD EPYC 7B13, cores: 2, ranks: 4; gloo"


def _measured(path, kind="ps-sync", slowdown=None):
    run_dir = write_synthetic_run(path, kind, steps=8, slowdown=slowdown)
    info = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    for rank in info["ranks"]:
        rank["device"], rank["backend"] = "cpu", "gloo"
    info["hardware"] = {"cpu": "AMD EPYC 7B13", "cores": 2, "cores_total": 2}
    (run_dir / "run.json").write_text(json.dumps(info), encoding="utf-8")
    return run_dir


def _memory(run_dir):
    """A measured memory entry per rank (write_synthetic_run writes none)."""
    metrics = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
    metrics["memory"] = {str(r): {"params": 1000, "grads": 1000, "optimizer": 0, "activations": 500,
                                  "source": "tensors"} for r in range(4)}
    (run_dir / "metrics.json").write_text(json.dumps(metrics), encoding="utf-8")
    return run_dir


@pytest.fixture
def run_vs_prediction(tmp_path):
    measured = _memory(_measured(tmp_path / "ps-sync"))
    predicted, _ = predict("examples/ps-sync.yaml", tmp_path / "pred", steps=6)
    compare_runs([measured, predicted], tmp_path / "out", ("tex",))
    return {p.stem: p.read_text(encoding="utf-8") for p in (tmp_path / "out").glob("*.tex")}


def test_the_memory_note_names_the_prediction_not_the_run(run_vs_prediction):
    tex = run_vs_prediction["compare-memory"]
    assert "not measured, from the memory model (docs/memory.md): ps-sync (predicted)}" in tex
    assert "no memory measured" not in tex


def test_every_compare_plot_says_which_run_is_measured_and_which_illustrative(run_vs_prediction, tmp_path):
    assert "compare-throughput" not in run_vs_prediction  # sync: one rate per run, said in the table
    tex = run_vs_prediction["compare-loss"]
    assert f"ps-sync: measured: {CPU}" in tex
    assert f"ps-sync (predicted): {ILLUSTRATIVE}" in tex
    # a straggler's async run: its workers' rates differ, so the bar chart is drawn, and says it too
    predicted, _ = predict("examples/ps-async.yaml", tmp_path / "pred-async", steps=6)
    measured = _measured(tmp_path / "ps-async", "ps-async", slowdown={"w3": 2.0})
    compare_runs([measured, predicted], tmp_path / "out-async", ("tex",))
    tex = (tmp_path / "out-async" / "compare-throughput.tex").read_text(encoding="utf-8")
    assert f"ps-async: measured: {CPU}" in tex and f"ps-async (predicted): {ILLUSTRATIVE}" in tex


def test_a_prediction_has_no_time_to_loss_and_no_loss_line(run_vs_prediction):
    table = run_vs_prediction["compare-table"]
    row = next(line for line in table.splitlines() if line.startswith("ps-sync (predicted)"))
    assert "not reached" not in row
    loss = run_vs_prediction["compare-loss"]
    assert "\\addlegendentry{ps-sync (predicted)}" not in loss and "no loss: ps-sync (predicted)" in loss
    assert loss.count("\\addlegendentry") == 1
    wall = float(re.search(r"title=\{loss vs wall time\}, xmin=0, xmax=([0-9.e+-]+)", loss).group(1))
    assert wall <= 1.0, wall  # the measured run's 7 synthetic steps, not the prediction's duration


def test_the_loss_legend_keeps_its_entries_apart(tmp_path):
    runs = [_measured(tmp_path / name, kind) for name, kind in (("a", "ps-sync"), ("b", "ps-async"),
                                                                  ("c", "allreduce-ring"))]
    compare_runs(runs, tmp_path / "out", ("tex",))
    tex = (tmp_path / "out" / "compare-loss.tex").read_text(encoding="utf-8")
    assert "every even column/.append style={column sep=8pt}" in tex
    assert f"measured: {CPU}" in tex


def test_a_measured_runs_plots_say_measured(tmp_path):
    # a straggler: the workers' rates differ, so the run has its per-worker bar chart
    texts = render_run_figures(load_run(_measured(tmp_path / "r", "ps-async", slowdown={"w3": 2.0})))
    for key in ("plot-loss", "plot-throughput", "plot-staleness"):
        assert f"measured: {CPU}" in texts[key], key


def test_sweep_caption_says_which_series_coincide():
    from opentikz_dt.predict.sweep import Point, coincident

    points = [Point(series, w, rate, 1000 * w / rate, memory_bytes=100) for w in (2, 4, 8)
              for series, rate in (("ring", 100.0 * w), ("tree", 90.0 * w), ("native", 100.05 * w))]
    assert coincident(points, ["ring", "tree", "native"]) == [
        "tree coincides with ring in memory per worker (within 1% at every worker count): its line is drawn over that of ring",
        "native coincides with ring (within 1% at every worker count): its line is drawn over that of ring"]
    assert coincident([p for p in points if p.series != "native"], ["ring", "tree"])[0].startswith("tree coincides")
