"""`dtgen predict SPEC --sweep shapes [--workers N]`: every layout of one worker count
the strategy can take (a mesh: the factorizations of N into pipeline x data x tensor
degrees, its plugin's `shapes` hook), each a full simulation, drawn as the figure people
draw to choose a layout: one row per shape, fastest first, labelled `pipeline x data x
tensor`, with its predicted step time (in ms, s, min or h as its size asks) (and interval where the calibration has a
spread) beside the memory per worker the strategy's placement expects. With a `hardware:`
device, its memory is the dashed line and a shape whose fullest rank is over it does not
fit: its dot and bar are drawn open, the table says `no`, and the caption names the
fastest shape that fits. Shapes the spec
rules refuse (a tensor degree that does not divide the heads, more stages than blocks, a
tensor group across hosts, ...) are left out and named in the caption. One column wide
by default (`--width`). Must not import torch.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import DtgenError, UsageError
from ..figures.fit import COLUMN_CM, width_cm
from ..figures.model import Tex
from ..figures.render import base_context, environment
from ..figures.textwidth import text_cm
from ..memory import KNOBS, device_capacity, spec_fit
from ..measured.export import write_outputs
from ..spec import load_spec
from ..strategies import plugin
from ..texsafe import escape_text
from ..workload import human_bytes
from .interval import interval
from .predict import apply_overrides, check_size, costs_for, on_cluster_path
from .rundir import metrics_of
from .simulate import simulate
from .plugin import REGISTRY
from .sweep import SWEEP_SEEDS, caption, check_sweep_size, worker_memory

MAX_ROWS = 24  # rows drawn (the fastest); the rest are named in the caption
ROW_CM = 0.34  # one row: a scriptsize label with air
MIN_HEIGHT_CM = 2.0  # the y label (two lines) fits beside the rows
# the memory axis ends at most this many times the device's memory: the bars of shapes far
# over it are cut at the axis' end, their value written in them, so the device's line and
# the shapes near it stay readable
CAPACITY_SPAN = 4
PLOT_BORDER_CM = 2 * 6 / 72.27 * 2.54  # plot-base's border on both sides


@dataclass(frozen=True)
class ShapePoint:
    label: str  # "pipeline x data x tensor"
    step_ms: float
    samples_per_s: float
    step_interval: tuple = ()  # (low, high) ms, () without one
    memory_bytes: int | None = None  # the fullest rank's expected states and activations
    fits: bool | None = None  # memory_bytes within the spec's device (None: no device, or no memory)


def _point(label: str, step_ms: float, samples_per_s: float, interval: tuple, spec) -> ShapePoint:
    fit = spec_fit(spec)  # the fullest rank against the spec's device (opentikz_dt.memory)
    return ShapePoint(label, step_ms, samples_per_s, interval, worker_memory(spec), None if fit is None else fit.fits)


def _reason(exc: DtgenError) -> str:
    """The first refusal of an invalid shape, without its file position."""
    lines = [line for line in str(exc).splitlines() if line.strip()]
    line = lines[1] if len(lines) > 1 else lines[0]
    return re.sub(r"^.*?:\d+:\d+: ", "", line)


def run_shapes(spec_path, calibration=None, sets: tuple = (), steps: int | None = None, link: str | None = None,
               latency_ms: float | None = None, device: str | None = None,
               workers: int | None = None) -> tuple[list, list, object, dict, int]:
    """(points fastest first, [(label, reason)] refused, base spec, assumptions, workers)."""
    base = apply_overrides(load_spec(spec_path), sets)
    if steps is not None:
        base = apply_overrides(base, (f"training.steps={steps}",))
    count = workers if workers is not None else base.topology.workers.count
    layouts = REGISTRY.get(base.strategy.kind).shapes(base, count)
    if layouts is None:
        raise UsageError(f"--sweep shapes: strategy kind '{base.strategy.kind}' has one layout per worker count; "
                         "the sweep compares a mesh's (strategy.parallelism) or use --sweep workers=...")
    datasheet, on_device = on_cluster_path(base, calibration, device, link)
    planned, refused, assumed = [], [], {}
    for label, extra, refusal in layouts:
        if refusal:
            refused.append((label, refusal))
            continue
        try:
            spec = apply_overrides(base, extra, workers=count)
        except DtgenError as exc:
            refused.append((label, _reason(exc)))
            continue
        if datasheet:  # every shape from the device's datasheet (predict/cluster.py), one lane per stage
            planned.append((label, count, spec, None))
            continue
        check_size(spec, spec.training.steps)
        costs, assumed, _ = costs_for(spec, calibration, link, latency_ms, dedicated=True, device=device)
        planned.append((label, count, spec, costs))
    if not planned:
        reasons = list(dict.fromkeys(reason for _, reason in refused))
        named = [f"{label.replace(' x ', 'x')}: {reason}" for label, reason in refused[:3]]
        raise DtgenError(f"--sweep shapes: no shape of {count:,} worker{'s' if count != 1 else ''} (pipeline x data x "
                         f"tensor) is valid for {base.source}: " + (reasons[0] if len(reasons) == 1 else
                         "; ".join(named) + (f"; ... ({len(refused)} shapes in all)" if len(refused) > 3 else "")))
    if datasheet:
        return _datasheet_points(planned, refused, base, count, on_device)
    check_sweep_size(planned)
    points = []
    for label, _, spec, costs in planned:
        m = metrics_of(simulate(spec, costs, record=False), spec, spec.training.steps)
        step = sum(m["step_time_s"].values()) / max(1, len(m["step_time_s"])) * 1000
        spread = interval(spec, costs, spec.training.steps, m, seeds=SWEEP_SEEDS)
        assumed = dict(assumed, interval_sources=spread["interval_sources"])
        # samples per step, the same in every shape (the rows of a mesh share it)
        assumed["global_batch"] = spec.training.batch_size * plugin(spec.strategy.kind).data_parallel_width(spec)
        points.append(_point(label, step, m["samples_per_s"], tuple(v * 1000 for v in spread["step_time_interval_s"]),
                             spec))
    points.sort(key=lambda p: (round(p.step_ms, 9), p.label))
    return points, refused, base, assumed, count


def _datasheet_points(planned: list, refused: list, base, count: int, cal=None) -> tuple:
    """The shapes of a spec with `hardware:`: each step time from the datasheet model, its
    compute scaled by `cal` (a calibration on the hardware's device) at the shape's
    microbatch, or its rates set by `cal`, a device probe of it (cluster.rated_cluster)."""
    from .cluster import assumptions, layout_of, model_of, rated_cluster, recompute_of, step_seconds

    points = []
    for label, _, spec, _ in planned:
        layout, model = layout_of(spec), model_of(spec)
        step = step_seconds(model, layout, rated_cluster(cal, spec, model, layout)[0], recompute_of(spec))
        batch = spec.training.batch_size * plugin(spec.strategy.kind).data_parallel_width(spec)
        points.append(_point(label, step * 1000, batch / step, (), spec))
    spec = planned[0][2]
    cluster, measured = rated_cluster(cal, spec, model_of(spec), layout_of(spec))
    assumed = assumptions(spec, layout_of(spec), cluster, recompute_of(spec))
    assumed.update(measured)
    if "measured_compute" in measured:
        assumed["measured_compute"] = dict(measured["measured_compute"], scale="per shape, at its microbatch")
    assumed["global_batch"] = spec.training.batch_size * plugin(spec.strategy.kind).data_parallel_width(spec)
    points.sort(key=lambda p: (round(p.step_ms, 9), p.label))
    return points, refused, base, assumed, count


def _ticks(high: float) -> list[float]:
    """0 and up to three 1-2-5 steps up to `high`."""
    step = 10.0 ** math.floor(math.log10(max(high, 1e-12)))
    for m in (1, 2, 5, 10):
        if high / (m * step) <= 3:
            step *= m
            break
    # a tick at the axis' right end would print into the next panel's first tick label
    return [k * step for k in range(int(high / step) + 1) if k * step <= 0.95 * high or k == 0]


# (unit, ms per unit): the step-time axis reads in the largest unit its longest step is at
# least 1 of, past a few thousand of the one below (1,000,000,000 ms reads 278 h)
TIME_UNITS = (("ms", 1.0), ("s", 1e3), ("min", 6e4), ("h", 3.6e6))


def time_unit(longest_ms: float) -> tuple[str, float]:
    """The unit the step-time axis reads in: ms up to 10 s, s up to 10 min, min up to 10 h, then h."""
    unit = TIME_UNITS[0]
    for name, size in TIME_UNITS[1:]:
        if longest_ms >= 10 * size:
            unit = (name, size)
    return unit


def _memory_unit(largest: int) -> tuple[str, int]:
    """The decimal unit the largest memory reads in as 1 or more (B, kB, MB, GB), as every
    byte count dtgen prints (workload.human_bytes)."""
    unit, scale = "B", 1
    for name, size in (("kB", 10**3), ("MB", 10**6), ("GB", 10**9)):
        if largest >= size:
            unit, scale = name, size
    return unit, scale


def _label(text: str) -> Tex:
    return Tex(r"$\times$".join(escape_text(part) for part in text.split(" x ")))


def render_shapes(points: list, refused: list, spec, assumed: dict, workers: int, width: str | None = None,
                  body_only: bool = False) -> str:
    target = width_cm(width) or COLUMN_CM
    shown = points[:MAX_ROWS]
    label_cm = max(text_cm(p.label.replace(" x ", "x")) for p in shown) + 0.2
    axis_cm = max(2.0, (target - PLOT_BORDER_CM - label_cm - 0.55 - 0.35 - 0.45) / 2)
    high_ms = max(max(p.step_interval[1] if p.step_interval else p.step_ms, p.step_ms) for p in shown) * 1.08
    step_unit, per = time_unit(high_ms)
    high_step = high_ms / per
    capacity = device_capacity(spec) if any(p.fits is not None for p in points) else None
    largest = max((p.memory_bytes or 0) for p in shown)
    if capacity:  # the axis reaches the device's line; bars far beyond it are cut (CAPACITY_SPAN)
        largest = max(capacity, min(largest, CAPACITY_SPAN * capacity))
    unit, scale = _memory_unit(largest)
    memory = [p.memory_bytes / scale for p in shown if p.memory_bytes]
    memory_max = largest / scale * 1.08
    band = any(p.step_interval and p.step_interval[1] > p.step_interval[0] * 1.0005 for p in shown)
    rows = [{"y": i + 1, "label": _label(p.label), "step": f"{p.step_ms / per:.6g}",
             "low": f"{max(0.0, p.step_ms - p.step_interval[0]) / per:.6g}" if band else None,
             "high": f"{max(0.0, p.step_interval[1] - p.step_ms) / per:.6g}" if band else None,
             "memory": f"{min(p.memory_bytes / scale, memory_max):.6g}" if p.memory_bytes else None,
             # a bar cut at the axis' end carries its value (in the axis' unit)
             "cut": f"{p.memory_bytes / scale:,.0f}" if p.memory_bytes and p.memory_bytes / scale > memory_max else None,
             "open": p.fits is False} for i, p in enumerate(shown)]
    left_out = [p.label for p in points[MAX_ROWS:]]
    notes = caption(assumed, [], spec.training.steps)
    if refused:
        names = [label.replace(" x ", "x") for label, _ in refused]
        notes.append(escape_text(f"{len(names)} shape{'s' if len(names) != 1 else ''} not valid for this spec, "
                                 f"left out (the .txt table beside the figure says why): " + ", ".join(names[:8])
                                 + (f" and {len(names) - 8} more" if len(names) > 8 else "")))
    notes.insert(0, escape_text(f"{workers:,} workers as pipeline x data x tensor, fastest first, each at the "
                                f"global batch of {assumed['global_batch']:,} samples"
                                + (f"; {len(left_out)} slower shapes not drawn" if left_out else "")
                                + ("; bars: the predicted interval" if band else "")))
    if memory:
        notes.append(escape_text("memory per worker: the fullest rank's parameters, gradients and optimizer state as "
                                 "the mesh places them (its stage, 1/tensor of the split layers, 1/data with fsdp) "
                                 "and its activations, from the memory model (docs/memory.md)"))
    if capacity and memory:
        notes.append(escape_text(fit_note(points, spec, capacity)))
    context = base_context(spec, "shapes plot", body_only, [], source=spec.source)
    # the notes are escaped above (escape_text): Tex, or the template would escape them again
    context.update(rows=rows, count=len(rows), axis_width=f"{axis_cm:.3f}", height=f"{max(len(rows) * ROW_CM, MIN_HEIGHT_CM):.3f}",
                   step_ticks=Tex(",".join(f"{t:.6g}" for t in _ticks(high_step))), step_max=f"{high_step:.6g}",
                   memory=bool(memory), memory_ticks=Tex(",".join(f"{t:.6g}" for t in _ticks(memory_max))),
                   memory_max=f"{memory_max:.6g}", memory_unit=unit, band=band, step_unit=step_unit,
                   capacity=f"{capacity / scale:.6g}" if capacity and memory else None,
                   # one plot of filled dots (fits, or no device) and one of open ones, each only if used
                   dot_groups=[g for g in (False, True) if any(r["open"] == g for r in rows)],
                   note_width=f"{target - PLOT_BORDER_CM - 0.25:.3f}", notes=[Tex(note) for note in notes])
    return environment().get_template("plot-shapes.tex.j2").render(context)


def fit_note(points: list, spec, capacity: int) -> str:
    """The caption's line on the device's memory: which shapes fit, the fastest of them."""
    device = spec.hardware.device_preset.short
    fitting = [p for p in points if p.fits]
    head = (f"dashed line: one {device}'s {human_bytes(capacity)} (its datasheet); open dots and bars: over it, "
            "does not fit")
    if not fitting:
        return head + f"; no shape fits ({KNOBS})"
    best = fitting[0]
    return head + (f"; {len(fitting)} of {len(points)} shapes fit, the fastest "
                   f"{best.label.replace(' x ', 'x')}")


def render_shapes_table(points: list, refused: list) -> str:
    fit = any(p.fits is not None for p in points)
    lines = [f"{'pipeline x data x tensor':26} {'step ms':>10} {'interval ms':>21} {'samples/s':>12} {'MB/worker':>11}"
             + (f" {'fits':>5}" if fit else "")]
    for p in points:
        spread = f"{p.step_interval[0]:.3f}..{p.step_interval[1]:.3f}" if p.step_interval else "-"
        lines.append(f"{p.label:26} {p.step_ms:>10.3f} {spread:>21} {p.samples_per_s:>12,.0f} "
                     + (f"{p.memory_bytes / 1e6:>11.3f}" if p.memory_bytes else f"{'-':>11}")
                     + ((f" {'-' if p.fits is None else 'yes' if p.fits else 'no':>5}") if fit else ""))
    lines += [f"{label:26} refused: {reason}" for label, reason in refused]
    return "\n".join(lines) + "\n"


def shapes_command(spec_path, calibration, sets, steps, out, link, latency_ms, formats, workers=None,
                   width: str | None = None, echo=print, device: str | None = None) -> list:
    width_cm(width)  # a bad width is refused before anything is simulated
    started = time.perf_counter()
    points, refused, spec, assumed, count = run_shapes(spec_path, calibration, sets, steps, link, latency_ms, device,
                                                       workers)
    out = Path(out) if out is not None else Path("figures") / f"{spec.name}-shapes"
    table = render_shapes_table(points, refused)
    echo(table.rstrip())
    echo(f"simulated {len(points)} shapes in {time.perf_counter() - started:.1f} s")
    target = width_cm(width) or COLUMN_CM
    written = write_outputs(render_shapes(points, refused, spec, assumed, count, width), out, "predicted-shapes",
                            formats, target_cm=target, notify=lambda line: echo(f"dtgen: warning: {line}"))
    (out / "predicted-shapes.txt").write_text(table, encoding="utf-8")
    return written + [out / "predicted-shapes.txt"]
