"""Result plots of measured runs with pgfplots, in the shared palette: pure, Run(s) -> TeX text.

Loss against step and against wall time, throughput per worker (the straggler
highlighted), and the async staleness histogram; each takes one run or several (one
series per run, for `dtgen compare`). Series are thinned to MAX_POINTS so a long run
stays a small file. Numbers reach the template formatted here; labels only through
texsafe. Must not import torch.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from ..figures.model import Tex
from ..figures.render import base_context, environment
from ..figures.plugin import plugin_of
from ..texsafe import escape_text, render_label
from .run import Run, partial_ranks
from .source import plot_sources

MAX_POINTS = 400
MAX_BARS = 32
MAX_STALENESS_BIN = 30
COLORS = ("otblue", "otorange", "otteal", "otpurple", "otgray")
DASHES = ("solid", "dashed", "densely dotted", "dashdotted", "loosely dashed")
MARKS = ("*", "square*", "triangle*", "diamond*", "o")
STRAGGLER_RATIO = 1.25  # a worker this much slower than the median is highlighted


def num(value: float) -> str:
    """A number for pgfplots: up to 6 significant digits (pgfplots reads 1.5e-05)."""
    return f"{value:.6g}"


def thin(points: list, limit: int = MAX_POINTS) -> list:
    """Every k-th point and the last, so at most about `limit` remain."""
    if len(points) <= limit:
        return points
    stride = math.ceil(len(points) / limit)
    out = points[::stride]
    if out[-1] != points[-1]:
        out.append(points[-1])
    return out


def coordinates(points: list) -> Tex:
    return Tex(" ".join(f"({num(x)},{num(y)})" for x, y in points if math.isfinite(x) and math.isfinite(y)))


def run_label(run: Run) -> Tex:
    return Tex(escape_text(run.label + (f" (mean of {run.repeats} runs)" if run.repeats > 1 else "")))


def bar_coordinates(run: Run, points: list) -> Tex:
    """(x, worker) pairs as bar coordinates; for repeats with min--max error bars
    (`+= (0,up) -= (0,down)`, pgfplots' explicit asymmetric errors)."""
    rates = run.metrics["per_worker_samples_per_s"]
    spread = run.metrics.get("spread", {}).get("per_worker_samples_per_s", {})
    out = []
    for x, w in points:
        y = rates[w]
        if not math.isfinite(y):
            continue
        text = f"({num(x)},{num(y)})"
        if w in spread and all(math.isfinite(v) for v in spread[w]):
            lo, hi = spread[w]
            text += f" += (0,{num(hi - y)}) -= (0,{num(y - lo)})"
        out.append(text)
    return Tex(" ".join(out))


@dataclass(frozen=True)
class LossSeries:
    label: Tex
    color: str
    dash: str
    mark: str
    marks: bool
    by_step: Tex
    by_wall: Tex
    low: Tex = Tex("")  # repeats: the lowest and highest loss of each step (thin lines)
    high: Tex = Tex("")
    low_wall: Tex = Tex("")  # the same against the repeats' mean wall time
    high_wall: Tex = Tex("")


def _nice_max(value: float) -> float:
    if value <= 0 or not math.isfinite(value):
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for factor in (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10):
        if factor * power >= value * 1.02:
            return factor * power
    return 10 * power


def _nice_min(low: float, high: float) -> float:
    """A round lower limit a little under `low` (0 when the data come close to 0)."""
    if not math.isfinite(low) or low <= 0 or low < 0.2 * high:
        return 0.0
    span = high - low or abs(high) or 1.0
    power = 10 ** math.floor(math.log10(span))
    return math.floor((low - 0.05 * span) / power * 2) * power / 2


def _nice_top(low: float, high: float) -> float:
    """A round upper limit a little over `high`: from 0 (low is 0) the 1-2-5 ceiling of
    high; above 0 a step of the data's own span, so the lines fill the axis instead of lying
    squashed along its bottom (5.46-5.6 gets 5.62, not 6)."""
    if low <= 0 or not math.isfinite(low) or not math.isfinite(high):
        return _nice_max(high)
    span = high - low or abs(high) or 1.0
    step = 10 ** math.floor(math.log10(span)) / 2
    return math.ceil((high + 0.03 * span) / step) * step


COINCIDE_REL = 1e-4  # two losses this close (relative) at every step draw one line


def coinciding(runs: list) -> list:
    """Groups (2 or more) of runs whose loss lines coincide: the same number of steps and every
    step's loss within COINCIDE_REL. The later ones are drawn over the first: say so."""
    groups: list = []
    for run in runs:
        loss = run.metrics["loss"]
        for group in groups:
            other = group[0].metrics["loss"]
            if len(other) == len(loss) and all(
                    (math.isfinite(a) and math.isfinite(b) and abs(a - b) <= COINCIDE_REL * max(abs(a), abs(b), 1e-12))
                    or (not math.isfinite(a) and not math.isfinite(b)) for a, b in zip(loss, other)):
                group.append(run)
                break
        else:
            groups.append([run])
    return [group for group in groups if len(group) > 1]


def _names(runs: list) -> str:
    labels = [run.label for run in runs]
    return ", ".join(labels[:-1]) + " and " + labels[-1]


def _notes(runs: list, spread: str = "error bars") -> list:
    """Crashed runs; and, once, how repeats are drawn (the legend says "mean of N runs")."""
    notes = []
    for run in runs:
        if run.failed:
            steps = run.metrics.get("steps_done") or run.metrics["steps"]
            short = partial_ranks(run.metrics, {r["rank"]: r["id"] for r in run.info.get("ranks") or []
                                                if isinstance(r, dict) and "rank" in r and r.get("id")})
            notes.append(Tex(escape_text(f"{run.name}: {run.ended} after {steps:,} of {run.metrics['steps']:,} steps"
                                         + (f" ({short})" if short else ""))))
    if any(run.repeats > 1 for run in runs):
        notes.append(Tex(escape_text(f"{spread}: min\u2013max over the repeats")))
    return notes


def _source_lines(runs: list) -> list:
    """Where the plot's numbers come from, under it: "measured: ran on ..." (the hardware), or
    the prediction's source (which calibration, or the illustrative cost model: not a
    measurement); compared runs of different sources get a line each, naming their runs."""
    return [Tex(escape_text(line)) for line in plot_sources(runs)]


def render_loss_plot(runs: list, body_only: bool = False) -> str:
    """Loss against step (left) and against wall time (right); one line per run."""
    series, ymin, ymax, wall_max, step_max, finite = [], math.inf, 0.0, 0.0, 1, []
    # A run with no loss (a prediction: the simulator predicts time, not training) draws no
    # line, so it sets neither axis nor a legend entry; the notes name it.
    lossless = [run for run in runs if not any(math.isfinite(v) for v in run.metrics["loss"])]
    if len(lossless) == len(runs):
        lossless = []
    for index, run in enumerate(runs):
        if any(run is other for other in lossless):
            continue
        loss, wall = run.metrics["loss"], run.metrics["wall_s"]
        by_step = thin([(float(step), value) for step, value in enumerate(loss)])
        # Wall time counts from the end of step 0: process start-up is not training time.
        by_wall = thin([(w - wall[0], value) for w, value in zip(wall, loss)]) if wall else []
        values = [v for v in loss if math.isfinite(v)]
        finite += values
        ymax = max([ymax] + values)
        ymin = min([ymin] + values)
        wall_max = max([wall_max] + [w - wall[0] for w in wall if math.isfinite(w)])
        step_max = max(step_max, len(loss) - 1)
        band = run.metrics.get("spread", {}).get("loss", [])
        low = thin([(float(step), lo) for step, (lo, _) in enumerate(band)])
        high = thin([(float(step), hi) for step, (_, hi) in enumerate(band)])
        low_wall = thin([(w - wall[0], lo) for w, (lo, _) in zip(wall, band)]) if wall else []
        high_wall = thin([(w - wall[0], hi) for w, (_, hi) in zip(wall, band)]) if wall else []
        ymax = max([ymax] + [y for _, y in high if math.isfinite(y)])
        ymin = min([ymin] + [y for _, y in low if math.isfinite(y)])
        series.append(LossSeries(run_label(run), COLORS[index % 5], DASHES[index % 5], MARKS[index % 5],
                                 len(by_step) <= 40, coordinates(by_step), coordinates(by_wall),
                                 coordinates(low), coordinates(high), coordinates(low_wall), coordinates(high_wall)))
    context = base_context(runs[0].spec, "loss plot", body_only, [], source=_source(runs))
    target = _target_cm(runs)
    stacked = target is not None and target < 13.0  # two side-by-side axes would squeeze their text
    room = (target - PLOT_BORDER_CM - 0.3) if target is not None else 14.4
    context.update(stacked=stacked, plot_width=min(6.4, room if stacked else (room - 1.6) / 2),
                   series=series, legend=len(runs) > 1, legend_columns=min(len(series), 4),
                   ymin=_nice_min(ymin, ymax), ymax=_nice_top(_nice_min(ymin, ymax), ymax), step_min=0, step_max=step_max, wall_max=_nice_max(wall_max),
                   ylabel=Tex("loss"), title_step=Tex("loss vs step"), title_wall=Tex("loss vs wall time"),
                   notes=_notes(runs, "thin lines") + [Tex(escape_text(f"no loss: {run.label}")) for run in lossless]
                   + [Tex(escape_text(f"{_names(group)}: the same loss at every step, one line over the other"))
                      for group in coinciding([run for run in runs if not any(run is o for o in lossless)])],
                   source_lines=_source_lines(runs), note_width=_note_width_cm(runs))
    return environment().get_template("plot-loss.tex.j2").render(context)


@dataclass(frozen=True)
class BarSeries:
    label: Tex
    color: str
    points: Tex
    shift: float | None
    legend: bool
    errors: bool = False  # points carry explicit min--max error bars (repeats)


def stragglers(step_time: dict) -> list:
    """Workers whose mean step time is STRAGGLER_RATIO above the median of all workers."""
    if len(step_time) < 2:
        return []
    median = statistics.median(step_time.values())
    return [w for w, t in step_time.items() if median > 0 and t > median * STRAGGLER_RATIO]


def _worker_order(ids) -> list:
    return sorted(ids, key=lambda w: (len(w), w))


def render_throughput_plot(runs: list, body_only: bool = False) -> str:
    """Samples/s of each worker; the straggler's bar in orange (one run) or one series per run."""
    workers = _worker_order({w for run in runs for w in run.metrics["per_worker_samples_per_s"]})
    drawn = workers if len(workers) <= MAX_BARS else workers[:MAX_BARS - 1] + workers[-1:]
    xs = {w: i for i, w in enumerate(drawn)}
    series, top, mean = [], 0.0, None
    if len(runs) == 1:
        run = runs[0]
        rates = run.metrics["per_worker_samples_per_s"]
        slow = set(stragglers(run.metrics["step_time_s"]))
        errors = run.repeats > 1
        normal = bar_coordinates(run, [(xs[w], w) for w in drawn if w in rates and w not in slow])
        flagged = [(xs[w], w) for w in drawn if w in rates and w in slow]
        series.append(BarSeries(Tex("worker"), "otblue", normal, 0.0, False, errors))
        if flagged:
            series.append(BarSeries(Tex("straggler"), "otorange", bar_coordinates(run, flagged), 0.0, True, errors))
            series[0] = BarSeries(Tex("worker"), "otblue", series[0].points, 0.0, True, errors)
        top = max(_tops(run), default=1.0)
        if rates:
            mean = statistics.fmean(rates.values())
    else:
        count = len(runs)
        bar = 10 if count <= 3 else 6
        for index, run in enumerate(runs):
            rates = run.metrics["per_worker_samples_per_s"]
            points = bar_coordinates(run, [(xs[w], w) for w in drawn if w in rates])
            shift = (index - (count - 1) / 2) * (bar + 1)
            series.append(BarSeries(run_label(run), COLORS[index % 5], points, shift, True, run.repeats > 1))
            top = max([top] + _tops(run))
    width = _bar_width_cm(runs, len(drawn))
    names, rotate = _tick_names(runs[0], drawn, width)
    labels = ",".join("{%s}" % name for name in names)
    context = _bar_context(runs, "throughput plot", body_only, series, len(drawn), labels, _nice_max(top))
    context.update(width=width, rotate=rotate)
    # The mean goes in the axis title, not beside the axis: no text sticks out of a narrow figure.
    xlabel = "worker" if mean is None else f"worker (dashed: mean {mean:,.0f})"
    done = runs[0].metrics.get("steps_per_worker", {}) if len(runs) == 1 else {}
    if done and plugin_of(runs[0].spec).asynchronous(runs[0].spec):
        # async workers share one budget of updates: say who did how many
        counts = [done[w] for w in drawn if w in done]
        xlabel += ("; updates " + ", ".join(f"W{w[1:]} {done[w]}" for w in drawn if w in done) if len(counts) <= 4
                   else f"; {min(counts)}\u2013{max(counts)} updates per worker")
    context.update(xlabel=Tex(escape_text(xlabel)), ylabel=Tex("samples/s"), mean=mean, mean_label=Tex(""))
    return environment().get_template("plot-bars.tex.j2").render(context)


ALIKE_REL = 0.005  # workers whose samples/s differ by less than this (relative) get no bar chart


def workers_alike(rates: dict) -> bool:
    """Every worker's samples/s within ALIKE_REL of the fastest (synchronous steps: each worker
    does one batch per step, so their rates are one number); a bar chart of them says nothing."""
    values = [v for v in rates.values() if math.isfinite(v)]
    return bool(values) and len(values) == len(rates) and max(values) - min(values) <= ALIKE_REL * max(values)


def alike_note(rates: dict) -> str:
    """The note standing for the per-worker bar chart when every worker's rate is the same."""
    value = statistics.fmean(rates.values())
    return f"Per worker: {value:,.0f} samples/s, every worker alike (no per-worker bar chart)."


def runs_alike(runs: list) -> bool:
    """Whether no run's workers differ (workers_alike): `dtgen compare`'s bar chart of them,
    a group of identical bars per run, says nothing. Runs without per-worker rates draw nothing."""
    rates = [run.metrics["per_worker_samples_per_s"] for run in runs if run.metrics["per_worker_samples_per_s"]]
    return all(workers_alike(r) for r in rates)


def runs_alike_note(runs: list) -> str:
    """The note standing for `dtgen compare`'s bar chart when every run's workers are alike:
    each run's rate per worker, named as its legend would name it."""
    each = [f"{run.label}{f' (mean of {run.repeats} runs)' if run.repeats > 1 else ''} "
            f"{statistics.fmean(run.metrics['per_worker_samples_per_s'].values()):,.0f}"
            for run in runs if run.metrics["per_worker_samples_per_s"]]  # (plain text: the table escapes it)
    return f"Per worker (samples/s): {'; '.join(each)}; every run's workers alike (no per-worker bar chart)."


def _tops(run: Run) -> list:
    """Bar heights, or the tops of their error bars."""
    spread = run.metrics.get("spread", {}).get("per_worker_samples_per_s", {})
    return [max(v, spread.get(w, (v, v))[1]) for w, v in run.metrics["per_worker_samples_per_s"].items()
            if math.isfinite(v)]


TICK_CHAR_CM = 0.13  # a \scriptsize sans character, about
AXIS_MARGIN_CM = 1.6  # y tick labels and the y label, left of the bars


def _worker_label(run: Run, worker: str) -> str:
    try:
        return render_label(run.spec.topology.workers.label_of(worker)) if worker[1:].isdigit() else escape_text(worker)
    except ValueError:
        return escape_text(worker)


def _tick_names(run: Run, drawn: list, width_cm: float) -> tuple[list, bool]:
    """(tick labels, rotated?) that fit one bar slot each: the workers' labels when they fit,
    else W1, W2, ... (the axis title says "worker"), rotated when even those do not."""
    slot = (width_cm - AXIS_MARGIN_CM) / max(1, len(drawn))
    plain = [run.spec.topology.workers.label_of(w) if w[1:].isdigit() else w for w in drawn]
    if all(TICK_CHAR_CM * len(text) + 0.2 <= slot for text in plain):
        return [_worker_label(run, w) for w in drawn], False
    short = [f"W{w[1:]}" if w[1:].isdigit() else escape_text(w) for w in drawn]
    return short, not all(TICK_CHAR_CM * len(text) + 0.2 <= slot for text in short)


def _plain_labels(run: Run) -> list:
    return [run.spec.topology.workers.label_of(w) for w in run.metrics["per_worker_samples_per_s"] if w[1:].isdigit()]


def _target_cm(runs: list) -> float | None:
    from ..figures.fit import target_width_cm

    return target_width_cm(runs[0].spec)


def _note_width_cm(runs: list) -> str | None:
    """At a target width the notes under a plot wrap within it (a long hardware line would
    otherwise widen the figure past its column); at natural width they keep one line each."""
    target = _target_cm(runs)
    return None if target is None else f"{target - PLOT_BORDER_CM - 0.3:.2f}"  # 0.3: the node's inner sep and air


def _bar_width_cm(runs: list, slots: int) -> float:
    """The axis width: bars at their natural spacing, never wider than the target width allows."""
    per_slot = 18 if len(runs) == 1 else 12 * len(runs) + 6
    natural = max(5.5, min(14.0, 1.2 + slots * per_slot / 28.45))
    if len(runs) == 1:  # room for tick labels such as "Worker 12" under every bar, up to 14 cm
        longest = max((len(label) for label in _plain_labels(runs[0])), default=8)
        natural = max(natural, min(14.0, AXIS_MARGIN_CM + slots * (TICK_CHAR_CM * longest + 0.3)))
    target = _target_cm(runs)
    return natural if target is None else min(natural, target - PLOT_BORDER_CM - 0.2)


PLOT_BORDER_CM = 2 * 6 / 28.45  # the standalone border of plot-base.tex.j2


def staleness_counts(values: list) -> dict:
    """Histogram of staleness: integer bins 0..MAX_STALENESS_BIN (the last holds the rest)."""
    counts: dict = {}
    for value in values:
        if math.isfinite(value):
            key = min(MAX_STALENESS_BIN, max(0, int(round(value))))
            counts[key] = counts.get(key, 0) + 1
    return counts


def render_staleness_plot(runs: list, body_only: bool = False) -> str:
    """How many versions behind each async update was; one series per run that has staleness."""
    compared = len(runs) > 1
    runs = [run for run in runs if run.metrics["staleness"]] or runs[:1]
    hists = [staleness_counts(run.metrics["staleness"]) for run in runs]
    last = max([0] + [k for h in hists for k in h])
    series, top = [], 1
    count = len(runs)
    bar = max(3, min(14, 160 // max(1, (last + 1) * count)))
    for index, (run, hist) in enumerate(zip(runs, hists)):
        points = [(float(k), float(v)) for k, v in sorted(hist.items())]
        shift = (index - (count - 1) / 2) * (bar + 1) if count > 1 else None
        series.append(BarSeries(run_label(run), COLORS[index % 5], coordinates(points), shift, compared))
        top = max([top] + list(hist.values()))
    labels = ",".join(f"{{{k}}}" if k < MAX_STALENESS_BIN else f"{{$\\geq${k}}}" for k in range(last + 1))
    context = _bar_context(runs, "staleness histogram", body_only, series, last + 1, labels, _nice_max(top))
    width = _bar_width_cm(runs, last + 1)
    context.update(width=width, rotate=(width - AXIS_MARGIN_CM) / (last + 1) < TICK_CHAR_CM * 3 + 0.2,
                   xlabel=Tex("staleness (versions behind)"), ylabel=Tex("updates"), mean=None, mean_label=Tex(""),
                   bar_width=bar, legend=compared)
    if not any(run.metrics["staleness"] for run in runs):
        context["notes"] = [Tex("no asynchronous updates: every update was current (staleness 0)")]
    return environment().get_template("plot-bars.tex.j2").render(context)


def _bar_context(runs, kind, body_only, series, slots, labels, ymax) -> dict:
    context = base_context(runs[0].spec, kind, body_only, [], source=_source(runs))
    per_slot = 18 if len(runs) == 1 else 12 * len(runs) + 6
    context.update(series=series, width=max(5.5, min(14.0, 1.2 + slots * per_slot / 28.45)),
                   bar_width=12 if len(runs) == 1 else (10 if len(runs) <= 3 else 6),
                   ymax=ymax, xmin=-0.6, xmax=slots - 0.4, xticks=Tex(",".join(str(i) for i in range(slots))),
                   xticklabels=Tex(labels), rotate=slots > 8, title=Tex(""),
                   legend=len(runs) > 1, legend_columns=max(2, min(len(runs), 4)), notes=_notes(runs),
                   source_lines=_source_lines(runs), note_width=_note_width_cm(runs))
    return context


def _source(runs: list) -> str:
    return ", ".join(str(run.path) for run in runs)[:300]
