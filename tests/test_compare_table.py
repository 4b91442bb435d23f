"""`dtgen compare`'s table and plots say what happened: final and eval loss, diverged runs
not ranked, each column defined, async throughput that adds up, repeats with their spread."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from opentikz_dt.errors import TraceError
from opentikz_dt.lossfacts import divergence, final_loss
from opentikz_dt.measured.compare import compare_runs, default_loss_target, render_summary_table, summarize
from opentikz_dt.measured.run import load_run
from opentikz_dt.predict.synthetic import write_synthetic_run


def _synth(tmp_path: Path, kind: str, name: str | None = None) -> Path:
    slow = {"w3": 3.0} if kind.startswith("ps") else None
    return write_synthetic_run(tmp_path / (name or kind), kind, steps=12, slowdown=slow)


def _edit_metrics(run_dir: Path, **changes) -> None:
    path = run_dir / "metrics.json"
    metrics = json.loads(path.read_text())
    metrics.update(changes)
    path.write_text(json.dumps(metrics))


def test_divergence_is_defined_by_the_final_loss_against_the_first():
    assert divergence([2.3, 1.0, 0.5]) is None
    assert "above 1.5 x" in divergence([4.0] + [28.4] * 5)
    assert "nan" in divergence([2.3, float("nan"), 0.5])
    assert final_loss([9.0, 1.0, 2.0, 3.0, 4.0, 5.0]) == 3.0  # the last 5 steps


def test_a_diverged_run_is_marked_and_not_ranked_ahead(tmp_path):
    good, bad = _synth(tmp_path, "ps-sync"), _synth(tmp_path, "ps-async")
    loss = json.loads((bad / "metrics.json").read_text())["loss"]
    # reaches a low loss early, then blows up to 28.4 (the async run)
    _edit_metrics(bad, loss=[loss[0], 0.01] + [28.4] * (len(loss) - 2))
    runs = [load_run(good), load_run(bad)]
    target = default_loss_target(runs)
    assert target == pytest.approx(min(runs[0].metrics["loss"]), rel=0.01)  # the converged run's, not 0.01
    table = render_summary_table([summarize(r, target) for r in runs], target, runs[0].spec)
    assert "Final loss" in table
    row = next(line for line in table.splitlines() if line.startswith("synth-ps-async"))
    assert "28.4$^{\\ddagger}$" in row and "diverged" in row
    assert "Diverged: a non-finite loss, or a final loss above 1.5" in table
    for column in ("Samples/s:", "Final loss:", "Time to loss:", "Bytes/step:"):
        assert column in table  # every column is defined in the note


def test_one_run_has_no_time_to_loss_column(tmp_path):
    run = load_run(_synth(tmp_path, "ps-sync"))
    assert default_loss_target([run]) is None
    table = render_summary_table([summarize(run, None)], None, run.spec)
    assert "Time to loss" not in table and "Final loss" in table


def test_async_throughput_adds_up_to_the_table(tmp_path):
    """The per-worker bars and the table's samples/s are one quantity (the issue: 1,114 vs 671+641+371)."""
    run = load_run(_synth(tmp_path, "ps-async"))
    rates, done = run.metrics["per_worker_samples_per_s"], run.metrics["steps_per_worker"]
    assert sum(rates.values()) == pytest.approx(run.metrics["samples_per_s"], rel=1e-3)
    # one budget of 12 x 3 updates, the 3x straggler did fewer of them and nobody idled
    assert done["w3"] < done["w1"] and sum(done.values()) <= 12 * 3


def test_compare_draws_no_chart_of_identical_bars_and_says_each_runs_rate(tmp_path):
    """Synchronous steps give every worker of a run one rate: `dtgen compare` then draws no
    throughput chart (a group of identical bars per run), as a single run's figures do not, and
    the table's note gives each run's rate per worker; a run whose workers differ brings it back."""
    sync, ring = _synth(tmp_path, "ps-sync"), _synth(tmp_path, "allreduce-ring")
    written = compare_runs([sync, ring], tmp_path / "alike", ("tex",))
    assert sorted(p.name for p in written) == ["compare-loss.tex", "compare-table.tex"]
    sync_rate, ring_rate = (sum(rates.values()) / len(rates)
                            for rates in (load_run(r).metrics["per_worker_samples_per_s"] for r in (sync, ring)))
    assert (f"Per worker (samples/s): synth-ps-sync {sync_rate:,.0f}; synth-allreduce-ring {ring_rate:,.0f}; "
            "every run's workers alike (no per-worker bar chart).") in (tmp_path / "alike" / "compare-table.tex").read_text()
    written = compare_runs([sync, _synth(tmp_path, "ps-async")], tmp_path / "differ", ("tex",))
    assert "compare-throughput.tex" in {p.name for p in written}  # the async straggler's workers differ
    assert "every run's workers alike" not in (tmp_path / "differ" / "compare-table.tex").read_text()


def test_repeats_are_one_row_with_their_spread_and_error_bars(tmp_path):
    folder = tmp_path / "rep"
    for index, scale in ((1, 1.0), (2, 1.2)):
        run_dir = shutil.copytree(_synth(tmp_path, "ps-sync", f"s{index}"), folder / f"r{index}")
        metrics = json.loads((run_dir / "metrics.json").read_text())
        _edit_metrics(run_dir, samples_per_s=metrics["samples_per_s"] * scale,
                      per_worker_samples_per_s={w: v * scale for w, v in metrics["per_worker_samples_per_s"].items()})
    other = _synth(tmp_path, "ps-async")  # its straggler's workers differ: the bar chart is drawn
    written = compare_runs([folder, other], tmp_path / "out", ("tex",))
    table = (tmp_path / "out" / "compare-table.tex").read_text()
    row = next(line for line in table.splitlines() if line.startswith("synth-ps-sync"))
    low = json.loads((folder / "r1" / "metrics.json").read_text())["samples_per_s"]
    assert "(2 runs)" in row and f"({low:,.0f}--{low * 1.2:,.0f})" in row
    assert "mean over repeats of one spec, (min--max)" in table
    bars = (tmp_path / "out" / "compare-throughput.tex").read_text()
    assert "y explicit" in bars and "+= (0," in bars and "mean of 2 runs" in bars
    assert len([p for p in written if p.suffix == ".tex"]) >= 3
    with pytest.raises(TraceError, match=r"a folder of repeats \(r1, r2, \.\.\.\), not one run"):
        load_run(folder)  # `dtgen figure FOLDER` says what to do instead


@pytest.mark.dist
def test_run_repeat_writes_r1_to_rn_and_compare_draws_them_with_error_bars(tmp_path):
    """`dtgen run --repeat 2` -> OUT/r1, OUT/r2 and a spread line; `dtgen compare OUT` -> one row of 2 runs."""
    import os
    import subprocess
    import sys

    import yaml

    from opentikz_dt.runner.testing import small_spec_data

    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(small_spec_data("single", training={"steps": 4})))
    out = tmp_path / "rep"
    done = subprocess.run([sys.executable, "-m", "opentikz_dt", "run", str(spec), "-o", str(out), "--repeat", "2"],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["r1", "r2"]
    assert "2 repeats: samples/s mean" in done.stderr and f"repeat folder: {out}" in done.stderr
    compare_runs([out], tmp_path / "cmp", ("tex",))
    table = (tmp_path / "cmp" / "compare-table.tex").read_text()
    assert "t-single (2 runs)" in table and "Time to loss" not in table
    # one worker: no bar chart of it (the error bars of repeats: test_repeats_are_one_row_...)
    assert "t-single (mean of 2 runs)" in table and "every run's workers alike" in table
    assert not (tmp_path / "cmp" / "compare-throughput.tex").exists()


@pytest.mark.latex
def test_compare_with_repeats_and_a_diverged_run_compiles(tmp_path):
    folder = tmp_path / "rep"
    for index in (1, 2):
        shutil.copytree(_synth(tmp_path, "ps-sync", f"s{index}"), folder / f"r{index}")
    bad = _synth(tmp_path, "ps-async")
    loss = json.loads((bad / "metrics.json").read_text())["loss"]
    _edit_metrics(bad, loss=[loss[0]] + [float("inf")] * (len(loss) - 1))
    written = compare_runs([folder, bad], tmp_path / "out", ("pdf",))
    assert "non-finite$^{\\ddagger}$" in (tmp_path / "out" / "compare-table.tex").read_text()
    assert sorted(p.name for p in written if p.suffix == ".pdf") == [
        "compare-loss.pdf", "compare-staleness.pdf", "compare-table.pdf", "compare-throughput.pdf"]


def test_the_run_summary_says_the_final_loss_the_table_says(tmp_path):
    """The terminal's `loss A -> B` and the compare table's "Final loss" are one number, defined once."""
    from opentikz_dt.runner.strategies import load_strategy
    from opentikz_dt.runner.summary import render_summary

    run = load_run(write_synthetic_run(tmp_path / "r", "ps-sync", steps=12))
    loss = run.metrics["loss"]
    assert final_loss(loss) != loss[-1]  # else the check below could not tell the two apart
    metrics = {"steps_done": 12, "steps": 12, "staleness": [], **run.metrics}  # a synthetic run omits these
    text = render_summary(run.spec, load_strategy(run.spec.strategy.kind).roles(run.spec), metrics,
                          {"world_size": 4, "backend": "gloo", "device": "cpu"}, run.path)
    table = render_summary_table([summarize(run, None)], None, run.spec)
    row = next(line for line in table.splitlines() if line.startswith("synth-ps-sync"))
    shown = f"{final_loss(loss):.4f}"
    assert f"loss {loss[0]:.4f} -> {shown} (mean loss of the last 5 steps)" in text
    assert f"{final_loss(loss):.3g}"[:4] in row
