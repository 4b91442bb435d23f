"""`dtgen compare`: several runs in one set of plots and one booktabs table of summary metrics.

Summary metrics per run: samples/s, mean step time, final loss (and whether the run
diverged: opentikz_dt.lossfacts), the held-out eval loss (training.eval), time to a loss
(wall-clock seconds from the end of the first step until the mean loss first reaches the
target; the default target is the lowest loss every converged run reached, and none for
runs of a single spec), bytes per step (sent by all ranks), staleness (mean and max
versions behind, async only), and memory per rank (the largest rank's measured bytes;
only where a run measured memory, so older run directories keep their table). Runs of
one spec (a `dtgen run --repeat` folder, or several run directories) make one row and
one series: their mean, with min--max as the spread and as error bars. The table's note defines every column and states where each row's numbers come
from (source.table_source: measured on which hardware, predicted from which calibration,
illustrative), one line per distinct source. Must not import torch.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from ..errors import DtgenError, UsageError
from ..figures.memory import render_compare_memory, total_bytes
from ..figures.fit import target_width_cm
from ..figures.model import Tex
from ..figures.render import base_context, environment
from ..figures.plugin import plugin_of
from ..texsafe import escape_text
from ..workload import human_bytes
from .export import write_outputs
from .plots import render_loss_plot, render_staleness_plot, render_throughput_plot, runs_alike, runs_alike_note
from ..lossfacts import DIVERGED_DEFINITION, FINAL_DEFINITION, divergence, final_loss
from .repeats import aggregate, expand, group, name_apart
from .run import Run, bytes_per_step, load_run
from .source import table_source


@dataclass(frozen=True)
class Stat:
    """A metric over one run (n = 1) or the repeats of one spec: mean and min--max."""
    mean: float
    lo: float
    hi: float
    n: int


def stat(values) -> Stat | None:
    values = [v for v in values if v is not None and math.isfinite(v)]
    if not values:
        return None
    return Stat(statistics.fmean(values), min(values), max(values), len(values))


@dataclass(frozen=True)
class Summary:
    name: str
    strategy: str
    samples_per_s: Stat | None
    step_ms: Stat | None
    time_to_loss_s: Stat | None
    bytes_per_step: float
    staleness_mean: float | None
    staleness_max: float | None
    ended_early: bool
    final_loss: Stat | None = None
    eval_loss: Stat | None = None
    perplexity: Stat | None = None
    diverged: int = 0  # how many of the runs diverged (lossfacts.divergence)
    repeats: int = 1
    reached: int = 0  # how many of the runs reached the target loss
    source: str = ""  # where the row's numbers come from (source.table_source), plain text
    memory: Stat | None = None  # bytes of the run's largest rank (metrics.json's memory), None: not measured


def strategy_name(spec) -> str:
    """The strategy's short name in the table (its figures plugin's table_name): PS sync, ring all-reduce."""
    return plugin_of(spec).table_name(spec)


def default_loss_target(runs: list) -> float | None:
    """The lowest loss every converged run reached (the largest of their minima), to 3
    significant digits, rounded up; None for runs of one spec only (one run's own loss
    would only restate its length) and for diverged runs (they are not ranked)."""
    if len(group(runs)) < 2:
        return None
    minima = [min(v for v in run.metrics["loss"] if math.isfinite(v)) for run in runs
              if divergence(run.metrics["loss"]) is None and any(math.isfinite(v) for v in run.metrics["loss"])]
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
    return summarize_repeats([run], target)


def summarize_repeats(runs: list, target: float | None) -> Summary:
    """One row: a run, or the repeats of one spec (means, with min--max in the Stats)."""
    run = runs[0]
    m = run.metrics
    sent = sum(b["sent"] for b in bytes_per_step(m).values())  # each rank's by the steps it completed
    stale = [v for r in runs for v in r.metrics["staleness"] if math.isfinite(v)]
    name = run.label
    diverged = [divergence(r.metrics["loss"]) is not None for r in runs]
    times = [time_to_loss(r.metrics, target) for r, bad in zip(runs, diverged) if not bad]
    evals = [r.metrics.get("eval") or {} for r in runs]
    return Summary(
        name, strategy_name(run.spec), stat(r.metrics["samples_per_s"] for r in runs),
        stat(statistics.fmean(r.metrics["step_time_s"].values()) * 1000 for r in runs if r.metrics["step_time_s"]),
        stat(times), sent, statistics.fmean(stale) if stale else None, max(stale) if stale else None,
        any(r.failed for r in runs), stat(final_loss(r.metrics["loss"]) for r in runs),
        stat(e.get("loss") for e in evals), stat(e.get("perplexity") for e in evals), sum(diverged), len(runs),
        sum(t is not None for t in times), "; ".join(dict.fromkeys(table_source(r) for r in runs)),
        stat(largest_rank_bytes(r) for r in runs))


def largest_rank_bytes(run: Run) -> int | None:
    """Measured bytes of the run's largest rank (figures.memory.total_bytes: parameters,
    gradients, optimizer state, activations); None where the run measured no memory."""
    memory = run.metrics.get("memory") or {}
    return max((total_bytes(entry) for entry in memory.values()), default=None)


def _cell(value: Stat | None, fmt: str) -> str:
    """mean, and (min--max) when the row stands for repeats."""
    if value is None:
        return "--"
    if value.n == 1:
        return format(value.mean, fmt)
    return f"{format(value.mean, fmt)} ({format(value.lo, fmt)}--{format(value.hi, fmt)})"


def _time_cell(s: Summary) -> str:
    if s.final_loss is None and not s.diverged:  # no loss at all (a prediction): nothing to reach
        return "--"
    if s.time_to_loss_s is not None and s.reached == s.repeats - s.diverged:
        return _cell(s.time_to_loss_s, ".3f")
    if s.time_to_loss_s is not None:
        return f"{_cell(s.time_to_loss_s, '.3f')}, {s.reached} of {s.repeats}"
    return "diverged" if s.diverged == s.repeats else "not reached"


def _loss_cell(s: Summary) -> str:
    cell = "non-finite" if s.final_loss is None and s.diverged else _cell(s.final_loss, ".4g")
    if s.diverged:
        cell += "$^{\\ddagger}$" + (f" ({s.diverged} of {s.repeats})" if s.repeats > 1 else "")
    return cell


def _bytes_cell(value: Stat | None) -> str:
    """Bytes in human units, (min--max) for repeats; -- where not measured."""
    if value is None:
        return "--"
    text = escape_text(human_bytes(value.mean))
    if value.n == 1 or value.lo == value.hi:
        return text
    return f"{text} ({escape_text(human_bytes(value.lo))}--{escape_text(human_bytes(value.hi))})"


def _eval_cell(s: Summary) -> str:
    cell = _cell(s.eval_loss, ".4g")
    return cell + (f" / {_cell(s.perplexity, '.3g')}" if s.perplexity is not None else "")


def column_notes(summaries: list, target: float | None, compared: bool = False) -> list:
    """What each column means (the table's note), in column order; only the columns shown."""
    diverged = any(s.diverged for s in summaries)  # the mark is defined only where a row carries it
    notes = ["Samples/s: all workers' samples after their first step, over the wall time from the end of "
             "step 0 to the last step's end (the per-worker rates add up to it). Step: mean step time per worker.",
             f"Final loss: {FINAL_DEFINITION}." + (f" $^{{\\ddagger}}$Diverged: {DIVERGED_DEFINITION}." if diverged
                                                   else "")]
    if any(s.eval_loss is not None for s in summaries):
        ppl = " / perplexity (transformer)" if any(s.perplexity is not None for s in summaries) else ""
        notes.append(f"Eval loss{ppl}: the final model on the held-out samples of training.eval (no training "
                     "batch saw them).")
    if target is not None:
        notes.append(f"Time to loss: wall seconds from the end of step 0 until the loss first reaches {target:g}, "
                     "the lowest loss every converged run reached; diverged runs are not ranked.")
    notes.append("Bytes/step: sent by all ranks. Staleness: versions behind, per async update.")
    if any(s.memory is not None for s in summaries):
        notes.append("Memory/rank: the largest rank's parameters, gradients, optimizer state and activations, "
                     "measured on its first step" + (" (compare-memory: each role's largest rank)." if compared
                                                     else "."))
    if any(s.repeats > 1 for s in summaries):
        notes.append("n runs: the mean over repeats of one spec, (min--max) over them.")
    if any(s.ended_early for s in summaries):
        notes.append("$^{\\dagger}$run ended early (failed); metrics cover the steps it completed.")
    return notes + source_notes(summaries)


def source_notes(summaries: list) -> list:
    """Where each row's numbers come from (measured on which hardware, predicted from which
    calibration, illustrative): one line per distinct source, naming its rows when the
    rows have more than one source. TeX, the sources escaped."""
    rows: dict = {}
    for s in summaries:
        rows.setdefault(s.source or "unknown", []).append(s.name)
    if len(rows) == 1:
        return [f"Source: {escape_text(next(iter(rows)))}."]
    return [f"Source of {escape_text(', '.join(names))}: {escape_text(line)}." for line, names in rows.items()]


NARROW_TABLE_CM = 13.0  # below this target width the table is turned: one column per run


def render_summary_table(summaries: list, target: float | None, spec, body_only: bool = False,
                         source: str = "", compared: bool = False, extra_notes: tuple = ()) -> str:
    """A booktabs table: one row per run (or per spec's repeats), each column defined in the note.
    At a narrow target width (figure.width / --width column) it is turned: one row per metric,
    one column per run, so a single run's table fits a column. `compared`: the table of
    `dtgen compare`, whose notes may name its other figures."""
    evals = any(s.eval_loss is not None for s in summaries)
    ppl = any(s.perplexity is not None for s in summaries)
    header = ["Run", "Strategy", "Samples/s", "Step (ms)", "Final loss"]
    header += ["Eval loss" + (" / ppl" if ppl else "")] if evals else []
    header += [f"Time to loss $\\leq$ {target:g} (s)"] if target is not None else []
    header += ["Bytes/step", "Staleness mean (max)"]
    memory = any(s.memory is not None for s in summaries)  # runs from before memory was measured: no column
    header += ["Memory/rank"] if memory else []
    rows = []
    for s in summaries:
        name = escape_text(s.name) + (f" ({s.repeats} runs)" if s.repeats > 1 else "") + (
            "$^{\\dagger}$" if s.ended_early else "")
        stale = "--" if s.staleness_mean is None else f"{s.staleness_mean:.2f} ({s.staleness_max:g})"
        cells = [name, escape_text(s.strategy), _cell(s.samples_per_s, ",.0f"),
                 _cell(s.step_ms, ".1f"), _loss_cell(s)]
        cells += [_eval_cell(s)] if evals else []
        cells += [_time_cell(s)] if target is not None else []
        cells += [escape_text(human_bytes(s.bytes_per_step)), stale]
        cells += [_bytes_cell(s.memory)] if memory else []
        rows.append(cells)
    notes = [Tex(note) for note in column_notes(summaries, target, compared)]
    notes[1:1] = [Tex(escape_text(note)) for note in extra_notes]  # beside Samples/s, the note they extend
    context = base_context(spec, "summary table", body_only, [], source=source or "runs")
    target_cm = target_width_cm(spec)
    if target_cm is not None and target_cm < NARROW_TABLE_CM:
        turned = [Tex(" & ".join([name] + [c[i] for c in rows])) for i, name in enumerate(header) if i > 0]
        context.update(colspec=Tex("l" + "r" * len(rows)), header=Tex(" & ".join([header[0]] + [c[0] for c in rows])),
                       rows=turned, footnote=notes, ncols=len(rows) + 1, size=Tex("\\footnotesize"),
                       note_width=Tex(f"{target_cm - 2 * 6 / 28.45 - 0.05:.2f}cm"))
    else:
        context.update(colspec=Tex("ll" + "r" * (len(header) - 2)), header=Tex(" & ".join(header)),
                       rows=[Tex(" & ".join(cells)) for cells in rows],
                       footnote=notes, ncols=len(header), size=Tex(""), note_width=None)
    return environment().get_template("table-summary.tex.j2").render(context)


def compare_runs(run_dirs: list, out_dir: str | Path, formats: tuple = ("tex", "pdf"),
                 loss: float | None = None, body_only: bool = False, echo=None) -> list:
    """Write compare-loss, compare-throughput (where some run's workers differ: plots.runs_alike),
    compare-staleness (async runs), compare-memory (runs that measured memory per rank) and
    compare-table; return the paths.
    A run and a prediction of it also get compare-phases (per phase, with the error), echoed as text."""
    if not run_dirs:
        raise DtgenError("dtgen compare needs at least one run directory")
    everything = [load_run(path) for path in expand(run_dirs)]
    lowest = min((v for run in everything for v in run.metrics["loss"] if v is not None and math.isfinite(v)),
                 default=None)
    if loss is not None and loss < 0 and (lowest is None or lowest >= 0):
        # a loss below 0 is a python training.model.loss's to reach (the default target allows
        # one); these runs' losses never go there, so it is a mistyped option, not a target
        lowest_text = f"the lowest is {lowest:.4g}" if lowest is not None else "none recorded a loss"
        raise UsageError(f"--loss {loss:g}: no run's loss goes below 0 ({lowest_text}), so none could reach it")
    target = loss if loss is not None else default_loss_target(everything)
    groups = group(everything)
    name_apart(groups)
    summaries = [summarize_repeats(members, target) for members in groups]
    runs = [aggregate(members) for members in groups]  # one series per spec, error bars over its repeats
    source = ", ".join(str(r.path) for r in everything)[:300]
    out_dir = Path(out_dir)
    makers = {"compare-loss": lambda bare: render_loss_plot(runs, bare)}
    alike = runs_alike(runs)
    if not alike:  # bars of one height per run say nothing: the table's note gives the rates instead
        makers["compare-throughput"] = lambda bare: render_throughput_plot(runs, bare)
    extra = [runs_alike_note(runs)] if alike and any(run.metrics["per_worker_samples_per_s"] for run in runs) else []
    if any(run.metrics["staleness"] for run in runs):
        makers["compare-staleness"] = lambda bare: render_staleness_plot(runs, bare)
    if any(run.metrics["memory"] for run in runs):  # one spec's repeats: its first run's memory (aggregate)
        makers["compare-memory"] = lambda bare: render_compare_memory(runs, bare, source)
    makers["compare-table"] = lambda bare: render_summary_table(summaries, target, runs[0].spec, bare, source,
                                                                    compared=True, extra_notes=extra)
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
