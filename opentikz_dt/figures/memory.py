"""The memory figure: one slot per rank, a bar stacked by category (parameters, gradients,
optimizer state, activations), the expected bar (from the spec, opentikz_dt.memory) and
the measured one (metrics.json's `memory`, runner/memory.py) side by side.

`dtgen figure SPEC --kind memory` draws the expected bars alone; `dtgen figure RUN_DIR`
both; `dtgen compare RUN_DIR...` one measured bar per role of each run (render_compare_memory). Many ranks are elided per role (the first few, a gap, the last), so the figure
stays readable at 1,024 workers. Pure: data -> TeX text, numbers formatted here, labels
only through texsafe. Must not import torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..memory import CATEGORIES
from ..texsafe import escape_text
from ..workload import human_bytes, human_count
from .fit import COLUMN_CM, target_width_cm
from .model import Tex
from .render import base_context, environment

# category -> (legend text, palette colour)
STYLE = {"params": ("parameters", "otblue"), "grads": ("gradients", "otorange"),
         "optimizer": ("optimizer state", "otteal"), "activations": ("activations", "otpurple")}
UNITS = ((1e9, "GB"), (1e6, "MB"), (1e3, "kB"), (1, "B"))
KEEP_FIRST, KEEP_LAST = 3, 1  # ranks of one role drawn when there are more than KEEP_FIRST + KEEP_LAST + 1
AXIS_MARGIN_CM = 1.7  # y tick labels and the y label, left of the bars
SLOT_CM = 0.95  # one rank: two bars and a gap
TICK_CHAR_CM = 0.13  # a \scriptsize sans character, about
PLOT_BORDER_CM = 2 * 6 / 28.45  # the standalone border of plot-base.tex.j2


@dataclass(frozen=True)
class Slot:
    x: float
    label: Tex


@dataclass(frozen=True)
class Box:
    """One category's piece of one bar, in axis coordinates."""

    x0: str
    x1: str
    y0: str
    y1: str
    color: str
    expected: bool


def num(value: float) -> str:
    return f"{value:.6g}"


def rank_label(ident: str) -> str:
    """w3 -> W3, ps2 -> PS2, ps -> PS."""
    return ident.upper()


def elide(ranks: list) -> list:
    """The ranks drawn, per role (in rank order) all of them when few, else the first
    KEEP_FIRST, a gap (the pair (first, last) of the ranks left out) and the last KEEP_LAST."""
    groups: list = []
    for r in ranks:
        if groups and groups[-1][0] == r["role"]:
            groups[-1][1].append(r)
        else:
            groups.append((r["role"], [r]))
    out = []
    for _, members in groups:
        if len(members) > KEEP_FIRST + KEEP_LAST + 1:
            out += members[:KEEP_FIRST] + [(members[KEEP_FIRST], members[-KEEP_LAST - 1])] + members[-KEEP_LAST:]
        else:
            out += members
    return out


def unit_for(top: float) -> tuple[float, str]:
    for scale, name in UNITS:
        if top >= scale:
            return scale, name
    return 1, "B"


def nice_max(value: float) -> float:
    """A round axis top a little above `value`."""
    if value <= 0 or not math.isfinite(value):
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10):
        if value * 1.05 <= step * power:
            return step * power
    return 10 * power


def _ranks(expected, measured: dict | None, roles) -> list:
    """Every rank as {rank, id, role, expected: {...} or None, measured: {...} or None}."""
    out = []
    for rank, (role, ident) in enumerate(roles):
        exp = expected[rank].as_dict() if expected is not None and rank < len(expected) else None
        out.append({"rank": rank, "id": ident, "role": role, "expected": exp,
                    "measured": (measured or {}).get(rank)})
    return out


def _stack(values: dict, x0: float, x1: float, scale: float, expected: bool) -> tuple[list, float]:
    boxes, y = [], 0.0
    for category in CATEGORIES:
        v = values.get(category)
        if not v:
            continue
        top = y + v / scale
        boxes.append(Box(num(x0), num(x1), num(y), num(top), STYLE[category][1], expected))
        y = top
    return boxes, y


CAPACITY_SPAN = 10  # the capacity line is drawn where it is at most this times the tallest bar


def render_memory_plot(spec, expected, roles, measured: dict | None = None, body_only: bool = False,
                       source: str | None = None, measured_note: str = "", capacity: int | None = None) -> str:
    """The memory figure. `expected`: opentikz_dt.memory.expected_memory(spec) (None: the
    model's sizes are unknown); `roles`: (role, id) per rank; `measured`: {rank: metrics.json
    memory entry} or None (a spec: expected only); `measured_note`: where the measured
    numbers come from; `capacity`: the device's bytes (its `hardware:` preset), drawn as a
    line across the ranks when within CAPACITY_SPAN of the tallest bar, else said in a note."""
    has_expected, has_measured = expected is not None, measured is not None
    both = has_expected and has_measured  # two bars per rank, else one centred bar
    ranks = elide(_ranks(expected, measured, roles))
    tops, left_out = [], []
    for r in ranks:
        if isinstance(r, tuple):
            left_out.append(f"{rank_label(r[0]['id'])} to {rank_label(r[1]['id'])}")
            continue
        for side in ("expected", "measured"):
            values = r[side]
            if values:
                tops.append(sum(values.get(c) or 0 for c in CATEGORIES))
                if side == "measured" and values.get("peak"):
                    tops.append(values["peak"])
    tallest = max(tops, default=0)
    draw_capacity = bool(capacity) and tallest > 0 and capacity <= CAPACITY_SPAN * tallest
    if draw_capacity:
        tops.append(capacity)
    scale, unit = unit_for(max(tops, default=0))
    half = 0.19 if both else 0.28  # half a bar's width, in slots
    slots, boxes, peaks = [], [], []
    for x, r in enumerate(ranks):
        if isinstance(r, tuple):
            slots.append(Slot(x, Tex("\\dots")))  # the ranks elide() left out
            continue
        slots.append(Slot(x, Tex(escape_text(rank_label(r["id"])))))
        if r["expected"]:
            left, right = (x - 2 * half - 0.02, x - 0.02) if both else (x - half, x + half)
            boxes += _stack(r["expected"], left, right, scale, True)[0]
        if r["measured"]:
            left, right = (x + 0.02, x + 2 * half + 0.02) if both else (x - half, x + half)
            boxes += _stack(r["measured"], left, right, scale, False)[0]
            if r["measured"].get("peak"):
                peaks.append((num(left), num(right), num(r["measured"]["peak"] / scale)))
    ranks = [r for r in ranks if not isinstance(r, tuple)]
    drawn = {c for r in ranks for side in ("expected", "measured")
             for c in CATEGORIES if (r[side] or {}).get(c)}
    legend = [(Tex(STYLE[c][0]), STYLE[c][1]) for c in CATEGORIES if c in drawn]
    width = _axis_width(spec, len(slots))
    rotate = any(TICK_CHAR_CM * len(rank_label(r["id"])) + 0.15 > (width - AXIS_MARGIN_CM) / max(1, len(slots))
                 for r in ranks)
    context = base_context(spec, "memory plot", body_only, [], source=source)
    title = ("Memory per rank: expected and measured" if both
             else "Measured memory per rank" if has_measured else "Expected memory per rank")
    context.update(
        width=num(width), ymax=num(nice_max(max(tops, default=0) / scale)), xmin=num(-0.6), xmax=num(len(slots) - 0.4),
        xticks=Tex(",".join(str(s.x) for s in slots)), xticklabels=Tex(",".join("{%s}" % s.label for s in slots)),
        rotate=rotate, legend_expected=not has_measured, ylabel=Tex(escape_text(unit)), boxes=boxes, peaks=peaks, legend=legend,
        legend_columns=4 if width >= 9.5 else 2, title=Tex(escape_text(title)),
        xlabel=Tex("rank"), sides=both,
        notes=[Tex(escape_text(line)) for line in _notes(spec, expected, has_measured, measured_note, peaks, left_out)
               + _capacity_notes(spec, expected, capacity, draw_capacity)],
        note_width=num(width), groups=[],
        capacity=num(capacity / scale) if draw_capacity else None,
        capacity_label=Tex(escape_text(human_bytes(capacity))) if draw_capacity else None)
    return environment().get_template("plot-memory.tex.j2").render(context)


def _capacity_notes(spec, expected, capacity: int | None, drawn: bool) -> list:
    """Where a device is known: its capacity (from its preset's datasheet) and whether the
    expected memory fits it (opentikz_dt.memory.fit_check)."""
    from ..memory import fit_check

    if not capacity:
        return []
    hardware = getattr(spec, "hardware", None)
    name = hardware.device_preset.short if hardware is not None else "the device"
    where = "dashed line" if drawn else "far above the bars, not drawn"
    lines = [f"capacity of {name}: {human_bytes(capacity)} (its datasheet; {where})"]
    fit = fit_check(expected, capacity)
    if fit is not None:
        lines.append("expected " + fit.message())
    return lines


def _axis_width(spec, slots: int) -> float:
    natural = max(5.5, min(14.0, AXIS_MARGIN_CM + slots * SLOT_CM))
    target = target_width_cm(spec)
    return natural if target is None else min(natural, target - PLOT_BORDER_CM - 0.2)


def _notes(spec, expected, has_measured: bool, measured_note: str, peaks: list, left_out: list) -> list:
    """Under the plot: what the expected bars assume, and where the measured ones come from."""

    from ..memory import model_sizes, optimizer_states

    lines = []
    sizes = model_sizes(spec)
    if expected is None or sizes is None:
        lines.append("expected: not drawn, the model's sizes are known only once the runner builds it")
    else:
        states = optimizer_states(spec.training)
        acts = ("activations from the memory model (docs/memory.md)" if any(e.activations is not None for e in expected)
                else "activations not predicted")
        lines.append(f"expected: the spec's model of {human_count(sizes.params)} "
                     f"parameters in float32, {states} optimizer value{'s' if states != 1 else ''} per "
                     f"parameter; {acts}")
    if has_measured:
        lines.append(f"measured: {measured_note}" + ("; line: CUDA allocator peak" if peaks else ""))
    if left_out:
        lines.append("not drawn (\u2026): " + ", ".join(left_out))
    return lines


def render_spec_memory(spec, body_only: bool = False) -> str:
    """`dtgen figure SPEC --kind memory`: the expected bars alone."""
    from ..errors import DtgenError
    from ..memory import device_capacity, expected_memory

    expected = expected_memory(spec)
    if expected is None:
        raise DtgenError(f"{spec.source}: no expected memory for a python model: its sizes are known only once "
                         "the runner builds it (run it, then dtgen figure RUN_DIR draws the measured memory)")
    return render_memory_plot(spec, expected, [(e.role, e.id) for e in expected], None, body_only,
                              capacity=device_capacity(spec))


def render_run_memory(run, body_only: bool = False) -> str:
    """A run's memory figure: expected from its spec beside metrics.json's measured memory."""
    from ..memory import device_capacity, expected_memory

    expected = expected_memory(run.spec)
    capacity = device_capacity(run.spec)
    sources = sorted({m["source"] for m in run.metrics["memory"].values() if m.get("source")})
    if sources == ["model"] and expected is not None:  # a prediction's memory is the model's: the expected bars
        return render_memory_plot(run.spec, expected, [(e.role, e.id) for e in expected], None, body_only,
                                  source=str(run.path), capacity=capacity)
    ranks = run.info.get("ranks") or []
    if ranks and all(isinstance(r, dict) and "role" in r and "id" in r for r in ranks):
        roles = [(r["role"], r["id"]) for r in sorted(ranks, key=lambda r: r.get("rank", 0))]
    elif expected is not None:
        roles = [(e.role, e.id) for e in expected]
    else:
        roles = [("rank", f"r{rank}") for rank in sorted(run.metrics["memory"])]
    how = {"tensors": "bytes of the tensors each category holds",
           "cuda-allocator": "bytes of the tensors each category holds, and the CUDA allocator's peak"}
    note = (f"run {run.name}, its first step; " + "; ".join(how.get(s, s) for s in sources))
    return render_memory_plot(run.spec, expected, roles, run.metrics["memory"], body_only, source=str(run.path),
                              measured_note=note, capacity=capacity)


# -- dtgen compare: memory per strategy -------------------------------------------------------

def total_bytes(entry: dict) -> int:
    """A rank's measured bytes: parameters, gradients, optimizer state and activations
    (the categories drawn stacked; the CUDA peak is drawn as a line, not added)."""
    return sum(entry.get(c) or 0 for c in CATEGORIES)


def role_bars(run) -> list:
    """One bar per role of a run (worker, server, storage, ...: in rank order), each the
    measured memory of that role's largest rank (ties: the lowest rank), as
    (role, rank id, memory entry). [] for a run that measured no memory."""
    memory = run.metrics.get("memory") or {}
    ranks = {r["rank"]: r for r in run.info.get("ranks") or [] if isinstance(r, dict) and "rank" in r}
    largest: dict = {}
    for rank, entry in sorted(memory.items()):
        role = ranks.get(rank, {}).get("role") or "rank"
        ident = ranks.get(rank, {}).get("id") or f"r{rank}"
        if role not in largest or total_bytes(entry) > total_bytes(largest[role][2]):
            largest[role] = (role, ident, entry)
    return list(largest.values())


COMPARE_GAP = 0.5  # slots between two runs' groups
ROLE_STEP = 1.2  # slots between two bars of one run: their tick labels (worker, server) stay apart


def render_compare_memory(runs: list, body_only: bool = False, source: str = "") -> str:
    """`dtgen compare`'s memory figure: for each run (one spec's repeats: its first run) one
    measured bar per role -- the role's largest rank -- stacked by category, the run's name
    under its bars. Runs that measured no memory are named in the note."""
    groups, left_out = [], []
    for run in runs:
        bars = role_bars(run)
        if bars:
            groups.append((run, bars))
        else:
            left_out.append(run.label)  # a prediction of a run shares its name: "(predicted)" tells them apart
    tops = [max(total_bytes(e), e.get("peak") or 0) for _, bars in groups for _, _, e in bars]
    scale, unit = unit_for(max(tops, default=0))
    half = 0.28
    x, slots, boxes, peaks, names = 0.0, [], [], [], []
    for run, bars in groups:
        name = escape_text(run.label)
        # a group is as wide as its bars, or its name under them (a \scriptsize character each)
        bars_span = 1 + (len(bars) - 1) * ROLE_STEP
        extent = max(bars_span, (TICK_CHAR_CM * len(run.label) + 0.2) / SLOT_CM)
        first = x + (extent - bars_span) / 2 + 0.5  # the first bar's centre
        for i, (role, ident, entry) in enumerate(bars):
            at = first + i * ROLE_STEP
            # \strut: every tick label as tall as the tallest, so "server" sits level with "worker"
            slots.append(Slot(at, Tex("\\strut " + escape_text(role))))
            boxes += _stack(entry, at - half, at + half, scale, False)[0]
            if entry.get("peak"):
                peaks.append((num(at - half), num(at + half), num(entry["peak"] / scale)))
        names.append((num(first + (len(bars) - 1) * ROLE_STEP / 2), Tex("\\strut " + name)))
        x += extent + COMPARE_GAP
    spec = runs[0].spec
    span = max(1.0, x - COMPARE_GAP)
    width = min(max(5.5, AXIS_MARGIN_CM + span * SLOT_CM), COLUMN_CM - PLOT_BORDER_CM - 0.2)
    drawn = {c for _, bars in groups for _, _, e in bars for c in CATEGORIES if e.get(c)}
    legend = [(Tex(STYLE[c][0]), STYLE[c][1]) for c in CATEGORIES if c in drawn]
    modelled = [run.label for run, bars in groups if all(e.get("source") == "model" for _, _, e in bars)]
    lines = ["each bar: its role's largest rank on the run's first step, the bytes of the tensors each "
             "category holds" + ("; line: CUDA allocator peak" if peaks else "")]
    if modelled:
        lines.append("not measured, from the memory model (docs/memory.md): " + ", ".join(modelled))
    if left_out:
        lines.append("no memory measured: " + ", ".join(left_out))
    context = base_context(spec, "memory plot", body_only, [], source=source or "runs")
    context.update(
        width=num(width), ymax=num(nice_max(max(tops, default=0) / scale)), xmin=num(-0.1), xmax=num(span + 0.1),
        xticks=Tex(",".join(num(s.x) for s in slots)), xticklabels=Tex(",".join("{%s}" % s.label for s in slots)),
        rotate=False, legend_expected=False, ylabel=Tex(escape_text(unit)), boxes=boxes, peaks=peaks, legend=legend,
        legend_columns=2, title=Tex(escape_text("Memory per strategy: measured and modelled" if modelled
                                                 else "Measured memory per strategy")), xlabel=Tex(""), sides=False,
        notes=[Tex(escape_text(line)) for line in lines], note_width=num(width), groups=names, capacity=None,
        capacity_label=None)
    return environment().get_template("plot-memory.tex.j2").render(context)
