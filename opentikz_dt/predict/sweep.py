"""`dtgen predict SPEC --sweep workers=2,4,...,1024`: predicted scaling, as a pgfplots figure and a table.

Every point is a full simulation (no trace kept, so 1,024 workers x 100 steps take
seconds). A second axis, `--set key=v1,v2,...` with a comma list, gives one line per
value (e.g. strategy.algorithm=ring,tree,native). Points the spec rules refuse (a
pipeline with more stages than layers, hosts that do not divide the workers) are left
out and named in the caption. A sweep assumes a cluster: every rank on its own core,
compute as calibrated solo, links as calibrated or `--link` (without a calibration, the
illustrative cost model's round numbers). Must not import torch.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import DtgenError, UsageError
from ..figures.model import Tex
from ..figures.render import base_context, environment
from ..measured.export import write_outputs
from ..measured.plots import COLORS, DASHES, MARKS
from ..measured.source import illustrative_assumptions
from ..spec import load_spec
from ..texsafe import escape_text
from .predict import apply_overrides, check_size, costs_for
from .interval import interval
from .rundir import metrics_of
from ..memory import expected_memory
from .simulate import roles, simulate
from .plugin import REGISTRY

MAX_POINTS = 64
MAX_SERIES = 5  # palette colours


@dataclass(frozen=True)
class Point:
    series: str
    workers: int
    samples_per_s: float
    step_ms: float
    rate_interval: tuple = ()   # (low, high) samples/s, () without one
    step_interval: tuple = ()   # (low, high) ms
    memory_bytes: int | None = None  # the fullest rank's expected states and activations


def worker_memory(spec) -> int | None:
    """The largest expected params + grads + optimizer state + activations of any rank
    (opentikz_dt.memory: the strategy's placement, the memory model's activations); None
    where the model's sizes are unknown (a python model)."""
    ranks = expected_memory(spec)
    return max(r.total for r in ranks) if ranks else None


SWEEP_SEEDS = 2  # simulations per point besides its own, for its interval (each costs a point's time)
MAX_SWEEP_RANK_STEPS = 2_000_000  # a whole sweep's simulated rank-steps: about 10 s here
SWEEP_SECONDS = 10


def parse_sweep(text: str) -> list[int]:
    """`workers=2,4,8` or, as a scaling study is written, `workers=2,4,...,1024`: `...` goes on
    multiplying by the ratio of the two counts before it, up to the count after it."""
    key, sep, values = str(text).partition("=")
    if key.strip() != "workers" or not sep:
        raise UsageError(f"--sweep {text!r}: expected workers=N,N,... (e.g. workers=2,4,8,16 or workers=2,4,...,1024)")
    items = [v.strip() for v in values.split(",") if v.strip()]
    try:
        numbers = [None if v == "..." else int(v) for v in items]
    except ValueError:
        raise UsageError(f"--sweep {text!r}: worker counts must be whole numbers") from None
    counts = sorted(set(_expand_ellipsis(numbers, text)))
    if not counts or counts[0] < 1:
        raise UsageError(f"--sweep {text!r}: worker counts must be 1 or more")
    if len(counts) > MAX_POINTS:
        raise UsageError(f"--sweep: {len(counts)} worker counts, at most {MAX_POINTS} per figure")
    return counts


def _expand_ellipsis(numbers: list, text: str) -> list[int]:
    if None not in numbers:
        return numbers
    at = numbers.index(None)
    if numbers.count(None) > 1 or at < 2 or at != len(numbers) - 2:
        raise UsageError(f"--sweep {text!r}: write '...' once, after two counts and before the last "
                         "(e.g. workers=2,4,...,1024)")
    a, b, last = numbers[at - 2], numbers[at - 1], numbers[-1]
    if a < 1 or b <= a or b % a or last < b:
        raise UsageError(f"--sweep {text!r}: '...' multiplies by the ratio of the two counts before it, "
                         f"which must be a whole number above 1 ({a}, {b}), up to a last count at least {b}")
    counts = numbers[:at]
    while counts[-1] * (b // a) <= last:
        counts.append(counts[-1] * (b // a))
        if len(counts) > MAX_POINTS:
            return counts  # the caller names the limit
    if counts[-1] != last:
        raise UsageError(f"--sweep {text!r}: {last} is not reached by multiplying {b} by {b // a}")
    return counts


def _series(sets: tuple) -> tuple[list, tuple]:
    """(label, fixed sets) per line: the one --set with a comma list becomes the lines."""
    fixed, varying = [], None
    for item in sets:
        key, _, value = str(item).partition("=")
        if "," in value and not value.strip().startswith(("[", "{")):
            if varying is not None:
                raise UsageError("--sweep: only one --set may list several values (one line per value)")
            varying = (key, [v.strip() for v in value.split(",")])
        else:
            fixed.append(item)
    if varying is None:
        return [("", ())], tuple(fixed)
    if len(varying[1]) > MAX_SERIES:
        raise UsageError(f"--set {varying[0]}: {len(varying[1])} values, at most {MAX_SERIES} lines per figure")
    # the legend's words, not the command line's: strategy.algorithm=ring -> "algorithm: ring"
    words = varying[0].split(".")[-1].replace("_", " ")
    return [(f"{words}: {v}", (f"{varying[0]}={v}",)) for v in varying[1]], tuple(fixed)


def run_sweep(spec_path, sweep: str, calibration=None, sets: tuple = (), steps: int | None = None,
              link: str | None = None, latency_ms: float | None = None,
              device: str | None = None) -> tuple[list, list, object, dict]:
    """(points, skipped, base spec, assumptions)."""
    counts = parse_sweep(sweep)
    lines, fixed = _series(sets)
    base = apply_overrides(load_spec(spec_path), fixed)
    if steps is not None:
        base = apply_overrides(base, (f"training.steps={steps}",))
    planned, skipped, assumed, carried = [], [], {}, {}
    for label, extra in lines:
        for n in counts:
            try:
                spec = apply_overrides(base, extra, workers=n)
            except DtgenError:
                skipped.append(f"{label + ' ' if label else ''}{n}")
                continue
            check_size(spec, spec.training.steps)
            costs, assumed, _ = costs_for(spec, calibration, link, latency_ms, dedicated=True, device=device)
            planned.append((label, n, spec, costs))
            carried.update({note: None for note in assumed.get("transfer", [])})
    if len(carried) > 1:  # one per line's strategy: say it once for every line
        first = next(iter(carried)).split(":")[0]
        carried = {f"{first}: its message latency is carried to every line as a cost per message, of its "
                   "untraced time per step only the floor (every rank on its own core)": None}
    if carried:
        assumed = dict(assumed, transfer=list(carried))
    check_sweep_size(planned)
    points, seen = [], []
    for label, n, spec, costs in planned:
        result = simulate(spec, costs, record=False)
        m = metrics_of(result, spec, spec.training.steps)
        step = sum(m["step_time_s"].values()) / max(1, len(m["step_time_s"])) * 1000
        spread = interval(spec, costs, spec.training.steps, m, seeds=SWEEP_SEEDS)
        assumed = dict(assumed, interval_sources=spread["interval_sources"])
        points.append(Point(label or base.name, n, m["samples_per_s"], step,
                            tuple(spread["samples_per_s_interval"]),
                            tuple(v * 1000 for v in spread["step_time_interval_s"]), worker_memory(spec)))
        seen.append((n, spec, costs, step))
    # the strategy may say why it scales as it does (one line under the figure; one series only)
    note = REGISTRY.get(base.strategy.kind).sweep_note(seen) if len(lines) == 1 and seen else None
    if note:
        assumed = {**assumed, "strategy_note": note}
    return points, skipped, base, assumed


def check_sweep_size(planned: list) -> None:
    """Refuse a sweep the simulator cannot do in about 10 s: every point is a simulation of
    ranks x steps (and its interval's seeds, where the calibration has a spread, its upper
    end, where it is carried from another strategy, and its probed collectives' fastest and
    slowest rounds, counted whether or not the strategy turns out to use them: interval.py)."""
    total = sum(len(roles(spec)) * spec.training.steps
                * (1 + (SWEEP_SEEDS if costs.draw is not None else 0) + (costs.upper is not None)
                   + len(costs.probe_ends))
                * REGISTRY.get(spec.strategy.kind).simulation_weight(spec) for _, _, spec, costs in planned)
    if total > MAX_SWEEP_RANK_STEPS:
        raise DtgenError(f"--sweep: {total:,.0f} simulated rank-steps (ranks x steps per point, weighed by the "
                         f"strategy's cost of a rank-step, x{1 + SWEEP_SEEDS} or more "
                         f"for the interval where the calibration has a spread): at most "
                         f"{MAX_SWEEP_RANK_STEPS:,}, about {SWEEP_SECONDS} s of simulation at ~5 us per rank-step "
                         "(benchmarks/bench_predict_scale.py); use fewer worker counts or lines, or --steps")


def caption(assumed: dict, skipped: list, steps: int) -> list[str]:
    if assumed.get("source") == "datasheet":  # a spec's hardware: (predict/cluster.py)
        hw = assumed["hardware"]
        if assumed.get("device_probe"):  # matmul, HBM (and NVLink) rates measured on the device
            probe = assumed["device_probe"]
            intra = "NVLink at the probe's bus bandwidth" if probe["intra_bus_bytes_per_s"] else \
                f"{hw['intra_host']} inside a host of {hw['gpus_per_host']}"
            notes = [f"{assumed['caption']}: {hw['device']} peaks x {assumed['matmul_efficiency']:.3g} (the probe's "
                     f"best matmul), HBM at the probe's copy rate, {intra}, {hw['inter_host']} between hosts, "
                     "collectives as NCCL's cost model has them"]
            return [escape_text(n) for n in notes]
        compute = (f"the datasheet's compute scaled to {assumed['measured_compute']['calibration']} at each shape's "
                   "microbatch" if assumed.get("measured_compute") else
                   f"{hw['device']} peaks x {assumed['matmul_efficiency']:.3g} measured matmul efficiency")
        notes = [f"{assumed['caption']}: {compute}, HBM at {assumed['hbm_efficiency']:.0%} of its datasheet "
                 f"bandwidth, {hw['intra_host']} inside a "
                 f"host of {hw['gpus_per_host']}, {hw['inter_host']} between hosts, collectives as NCCL's cost model "
                 "has them"]
        return [escape_text(n) for n in notes]
    source = assumed.get("calibration", "")
    # The illustrative cost model measured nothing: its compute, links and latency are round
    # numbers (predict/costs.illustrative_calibration), none of them "as calibrated".
    illustrative = illustrative_assumptions(assumed)
    compute = "compute at the model's nominal speed" if illustrative else "compute as calibrated solo"
    rate = assumed.get("link_bytes_per_s")
    link = f"links {rate * 8 / 1e9:g} Gbit/s" if rate else "links as calibrated"
    lat = assumed.get("latency_s")
    latency = f", latency {lat * 1e3:g} ms" if lat is not None else ""
    preset = assumed.get("link_preset")
    if preset:  # a preset says where its numbers come from, and which it does not have
        link = f"links {preset['name']} ({rate * 8 / 1e9:g} Gbit/s per direction, {preset['source']})"
        if lat is None:
            latency = (", latency the model's nominal one" if illustrative else ", latency as calibrated") + (
                " (no source gives the preset's)")
        if not illustrative:
            link = f"compute measured on {preset['compute']}; {link}"
    parts = [compute, link]
    if illustrative and not rate:
        parts = ["compute and links at the model's nominal speeds"]
    # The file's name only: a figure for a paper must not carry this machine's paths.
    source = ("illustrative cost model (round numbers, not measured)" if illustrative
              else f"calibration {Path(source).name}")
    notes = [f"predicted from the {source}: every rank on its own core, {'; '.join(parts)}{latency}; "
             f"{steps} steps, first left out"]
    if assumed.get("strategy_note"):
        notes.append(assumed["strategy_note"])
    if assumed.get("transfer"):  # a sweep writes no run.json: the whole caveat goes in its caption
        notes.append("; ".join(assumed["transfer"]))
    if skipped:
        notes.append("not valid for this spec, left out: " + ", ".join(skipped[:8]) + (" ..." if len(skipped) > 8 else ""))
    return [escape_text(n) for n in notes]


_URL = re.compile(r"https?://[^\s,;()]+")


def _breakable_urls(tex: str) -> str:
    """A source's URL in a note may break after a slash (no hyphen added); the notes never
    break at a hyphen (plot-scaling.tex.j2), so a URL reads back as itself."""
    return _URL.sub(lambda m: m.group(0).replace("/", "/\\allowbreak{}"), tex)


def log_ticks(values: list) -> Tex:
    """1-2-5 ticks covering the values (a log axis with a tick or three per decade)."""
    lo, hi = min(values), max(values)
    ticks, decade = [], 10.0 ** math.floor(math.log10(max(lo, 1e-12)))
    while decade <= hi * 10:
        ticks += [m * decade for m in (1, 2, 5) if lo / 1.5 <= m * decade <= hi * 1.5]
        decade *= 10
    if len(ticks) > 8:
        ticks = [t for t in ticks if f"{t:.6g}".lstrip("0.").startswith("1")]
    if sum(lo <= t <= hi for t in ticks) < 2:
        # The axis ends at the data: values within one 1-2-5 step (135k..190k) would
        # leave it with no labelled tick at all. Label both ends, rounded.
        ticks = sorted({float(f"{lo:.2g}"), float(f"{hi:.2g}")} | {t for t in ticks if lo <= t <= hi})
    return Tex(",".join(f"{t:.6g}" for t in ticks))


def log_limits(values: list) -> Tex:
    """', ymin=..., ymax=...' for a log axis whose values hardly change (2,722-2,760 ms): its
    own limits so close together overflow pgfplots ("Dimension too large"); opened to a factor
    of 1.2 either side. '' where the data span enough."""
    lo, hi = min(values), max(values)
    if hi >= 1.5 * lo:
        return Tex("")
    return Tex(f", ymin={lo / 1.2:.6g}, ymax={hi * 1.2:.6g}")


def _band(points: list, key: str) -> Tex:
    """The interval as one closed polygon: the upper bounds left to right, the lower back."""
    upper = [(p.workers, getattr(p, key)[1]) for p in points if getattr(p, key)]
    lower = [(p.workers, getattr(p, key)[0]) for p in reversed(points) if getattr(p, key)]
    return Tex(" ".join(f"({x},{max(y, 1e-9):.6g})" for x, y in upper + lower))


def _band_note(assumed: dict) -> str:
    """What the band holds, for the notes under the plots: in the legend, four sources made
    one line wider than the plots."""
    sources = assumed.get("interval_sources") or []
    return "band: the predicted interval" + (f", from {'; '.join(sources)}" if sources else "")


COINCIDE = 0.01  # two series within 1% at every worker count draw one line: the caption says so
METRICS = (("samples_per_s", "throughput"), ("step_ms", "step time"), ("memory_bytes", "memory per worker"))


def coincident(points: list, labels: list, metrics: tuple = METRICS) -> list[str]:
    """Notes for series drawn under an earlier one (within COINCIDE at every worker count of
    both): "native coincides with ring", naming the plots where only some coincide."""
    def values(label, key):
        return {p.workers: getattr(p, key) for p in points if p.series == label and getattr(p, key)}

    notes = []
    for j, later in enumerate(labels):
        hidden: dict = {}
        for key, plot in metrics:
            mine = values(later, key)
            for earlier in labels[:j]:
                theirs = values(earlier, key)
                if mine and mine.keys() == theirs.keys() and all(
                        abs(mine[w] - theirs[w]) <= COINCIDE * max(abs(mine[w]), abs(theirs[w])) for w in mine):
                    hidden.setdefault(earlier, []).append(plot)
                    break
        for earlier, plots in hidden.items():
            drawn = [plot for key, plot in metrics if values(later, key)]
            where = "" if plots == drawn else " in " + ", ".join(plots)
            # pgfplots draws the lines in order: the later one lies on top of the earlier
            notes.append(f"{later} coincides with {earlier}{where} (within 1% at every worker count): "
                         f"its line is drawn over that of {earlier}")
    return notes


def render_scaling(points: list, skipped: list, spec, assumed: dict, body_only: bool = False) -> str:
    labels = list(dict.fromkeys(p.series for p in points))
    counts = sorted({p.workers for p in points})
    if not counts:
        raise UsageError("--sweep: no worker count gives a valid spec")
    series = []
    # a band only where some point's interval has a width (the illustrative model has none)
    bands = any(p.rate_interval and p.rate_interval[1] > p.rate_interval[0] * 1.0005 for p in points)
    for i, label in enumerate(labels):
        mine = sorted((p for p in points if p.series == label), key=lambda p: p.workers)
        series.append({"label": Tex(escape_text(label)), "color": COLORS[i % 5], "dash": DASHES[i % 5],
                       "mark": MARKS[i % 5],
                       "throughput": Tex(" ".join(f"({p.workers},{max(p.samples_per_s, 1e-9):.6g})" for p in mine)),
                       "step": Tex(" ".join(f"({p.workers},{max(p.step_ms, 1e-9):.6g})" for p in mine)),
                       "memory": Tex(" ".join(f"({p.workers},{p.memory_bytes / 1e6:.6g})" for p in mine
                                              if p.memory_bytes)),
                       "throughput_band": _band(mine, "rate_interval") if bands else None,
                       "step_band": _band(mine, "step_interval") if bands else None})
    # memory per worker: expected from the spec (the same as dtgen figure SPEC --kind memory), MB;
    # a panel only where it changes (a flat line on a log axis says one number and fails to compile)
    memory = [p.memory_bytes / 1e6 for p in points if p.memory_bytes]
    flat_memory = bool(memory) and max(memory) - min(memory) <= COINCIDE * max(memory)
    memory_note = ("memory per worker: the fullest rank's parameters, gradients and optimizer state as the "
                   "strategy places them and its activations, from the memory model (docs/memory.md)")
    if flat_memory:
        memory_note = memory_note.replace("memory per worker: ", f"memory per worker: {max(memory):,.3g} MB at every "
                                          "worker count" + (" on every line" if len(labels) > 1 else "") + ", ")
        memory = []
    context = base_context(spec, "scaling plot", body_only, [], source=spec.source)
    context.update(series=series, legend=len(labels) > 1 or bands,
                   legend_columns=min(len(labels) + bands, 4),
                   band_label=Tex("predicted interval") if bands else None,
                   xmin=counts[0] / 1.3, xmax=counts[-1] * 1.3, xticks=Tex(",".join(map(str, counts))),
                   xticklabels=Tex(",".join(f"{c:,}".replace(",", "{,}") for c in counts)),
                   yticks_rate=log_ticks([max(p.samples_per_s, 1e-9) for p in points]),
                   yticks_step=log_ticks([max(p.step_ms, 1e-9) for p in points]),
                   ylim_rate=log_limits([max(p.samples_per_s, 1e-9) for p in points]),
                   ylim_step=log_limits([max(p.step_ms, 1e-9) for p in points]),
                   memory=memory, yticks_memory=log_ticks(memory) if memory else None,
                   ylim_memory=log_limits(memory) if memory else Tex(""),
                   notes=[Tex(_breakable_urls(note)) for note in caption(assumed, skipped, spec.training.steps)]
                   + [Tex(escape_text(note)) for note in coincident(points, labels, METRICS[:2] if flat_memory else METRICS)]
                   + ([Tex(escape_text(_band_note(assumed)))] if bands else [])
                   + ([Tex(escape_text(memory_note))] if memory or flat_memory else []))
    return environment().get_template("plot-scaling.tex.j2").render(context)


def render_scaling_table(points: list) -> str:
    lines = [f"{'series':28} {'workers':>8} {'samples/s':>14} {'step ms':>10} {'MB/worker':>11}"]
    lines += [f"{p.series:28} {p.workers:>8,} {p.samples_per_s:>14,.0f} {p.step_ms:>10.3f} "
              + (f"{p.memory_bytes / 1e6:>11.3f}" if p.memory_bytes else f"{'-':>11}") for p in points]
    return "\n".join(lines) + "\n"


def sweep_command(spec_path, sweep, calibration, sets, steps, out, link, latency_ms, dedicated, formats,
                  echo=print, device: str | None = None) -> list:
    started = time.perf_counter()
    points, skipped, spec, assumed = run_sweep(spec_path, sweep, calibration, sets, steps, link, latency_ms, device)
    out = Path(out) if out is not None else Path("figures") / f"{spec.name}-scaling"
    table = render_scaling_table(points)
    echo(table.rstrip())
    echo(f"simulated {len(points)} points in {time.perf_counter() - started:.1f} s")
    written = write_outputs(render_scaling(points, skipped, spec, assumed), out, "predicted-scaling", formats)
    (out / "predicted-scaling.txt").write_text(table, encoding="utf-8")
    return written + [out / "predicted-scaling.txt"]
