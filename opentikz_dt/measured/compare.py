"""`dtgen compare`: several runs in one set of plots and one booktabs table of summary metrics.

Summary metrics per run: samples/s, mean step time, time to a loss (wall-clock seconds
from the end of the first step until the mean loss first reaches the target; the
default target is the lowest loss every run reached), bytes per step (sent by all
ranks), and staleness (mean and max versions behind, async only). Must not import torch.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from ..errors import DtgenError
from ..figures.model import Tex
from ..figures.render import base_context, environment
from ..texsafe import escape_text
from ..workload import human_bytes
from .export import write_outputs
from .plots import render_loss_plot, render_staleness_plot, render_throughput_plot
from .run import Run, load_run


@dataclass(frozen=True)
class Summary:
    name: str
    strategy: str
    samples_per_s: float
    step_ms: float | None
    time_to_loss_s: float | None
    bytes_per_step: float
    staleness_mean: float | None
    staleness_max: float | None
    ended_early: bool


def strategy_name(spec) -> str:
    s = spec.strategy
    return {
        "parameter-server": f"PS {s.sync}",
        "central-storage": "central storage",
        "allreduce": f"{s.algorithm} all-reduce",
        "gossip": "gossip",
        "pipeline": f"{'GPipe' if s.schedule == 'gpipe' else '1F1B'} pipeline",
        "single": "single device",
    }.get(s.kind, s.kind)


def default_loss_target(runs: list) -> float | None:
    """The lowest loss every run reached (the largest of the runs' minima), to 3 significant digits, rounded up."""
    minima = [min(v for v in run.metrics["loss"] if math.isfinite(v)) for run in runs
              if any(math.isfinite(v) for v in run.metrics["loss"])]
    if not minima:
        return None
    worst = max(minima)
    if worst <= 0:
        return worst
    digits = 2 - math.floor(math.log10(abs(worst)))
    return math.ceil(worst * 10 ** digits) / 10 ** digits


def time_to_loss(metrics: dict, target: float | None) -> float | None:
    if target is None:
        return None
    loss, wall = metrics["loss"], metrics["wall_s"]
    if not wall:
        return None
    for value, when in zip(loss, wall):
        if math.isfinite(value) and value <= target:
            return max(0.0, when - wall[0])
    return None


def summarize(run: Run, target: float | None) -> Summary:
    m = run.metrics
    steps = max(1, m["steps"])
    sent = sum(b["sent"] for b in m["bytes"].values())
    stale = [v for v in m["staleness"] if math.isfinite(v)]
    times = list(m["step_time_s"].values())
    name = f"{run.name} (predicted)" if run.info.get("predicted") is not None else run.name
    return Summary(name, strategy_name(run.spec), m["samples_per_s"],
                   statistics.fmean(times) * 1000 if times else None, time_to_loss(m, target), sent / steps,
                   statistics.fmean(stale) if stale else None, max(stale) if stale else None, run.failed)


def _cell(value: float | None, fmt: str) -> str:
    return "--" if value is None else format(value, fmt)


def render_summary_table(summaries: list, target: float | None, spec, body_only: bool = False,
                         source: str = "") -> str:
    """A booktabs table: one row per run."""
    target_tex = "--" if target is None else f"$\\leq$ {target:g}"
    header = ["Run", "Strategy", "Samples/s", "Step (ms)", f"Time to loss {target_tex} (s)", "Bytes/step",
              "Staleness mean (max)"]
    rows = []
    for s in summaries:
        name = escape_text(s.name) + ("$^{\\dagger}$" if s.ended_early else "")
        stale = "--" if s.staleness_mean is None else f"{s.staleness_mean:.2f} ({s.staleness_max:g})"
        cells = [name, escape_text(s.strategy), f"{s.samples_per_s:,.0f}", _cell(s.step_ms, ".1f"),
                 _cell(s.time_to_loss_s, ".3f") if s.time_to_loss_s is not None else "not reached",
                 escape_text(human_bytes(s.bytes_per_step)), stale]
        rows.append(Tex(" & ".join(cells)))
    footnote = ""
    if any(s.ended_early for s in summaries):
        footnote = Tex("$^{\\dagger}$run ended early (failed); metrics cover the steps it completed")
    context = base_context(spec, "summary table", body_only, [], source=source or "runs")
    context.update(colspec=Tex("llrrrrr"), header=Tex(" & ".join(header)), rows=rows, footnote=footnote,
                   ncols=len(header))
    return environment().get_template("table-summary.tex.j2").render(context)


def compare_runs(run_dirs: list, out_dir: str | Path, formats: tuple = ("tex", "pdf"),
                 loss: float | None = None, body_only: bool = False, echo=None) -> list:
    """Write compare-loss, compare-throughput, compare-staleness (async runs) and compare-table; return the paths.
    A run and a prediction of it also get compare-phases (per phase, with the error), echoed as text."""
    if not run_dirs:
        raise DtgenError("dtgen compare needs at least one run directory")
    runs = [load_run(path) for path in run_dirs]
    target = loss if loss is not None else default_loss_target(runs)
    summaries = [summarize(run, target) for run in runs]
    source = ", ".join(str(r.path) for r in runs)[:300]
    out_dir = Path(out_dir)
    makers = {"compare-loss": lambda bare: render_loss_plot(runs, bare),
              "compare-throughput": lambda bare: render_throughput_plot(runs, bare)}
    if any(run.metrics["staleness"] for run in runs):
        makers["compare-staleness"] = lambda bare: render_staleness_plot(runs, bare)
    makers["compare-table"] = lambda bare: render_summary_table(summaries, target, runs[0].spec, bare, source)
    written = []
    for stem, make in makers.items():
        written += write_outputs(make(False), out_dir, stem, formats, body=make(True) if body_only else None)
    from ..predict.compare import pair, write_phase_comparison

    both = pair(runs)
    if both is not None:
        paths, text = write_phase_comparison(*both, out_dir, formats, body_only)
        written += paths
        if echo is not None:
            echo(text)
    return written
