"""A measured trace -> the figures' Timeline model, drawn by the same template as the expected one.

One lane per rank (servers on top, as seed 001 draws the Update blocks above the
workers), the rank's compute and communication spans on it: Fetch, forward/backward,
Push, waits shaded, the server's updates. A rank whose communication overlaps its
compute (pipeline send/recv) gets a second lane for it. Pipeline lanes label
forward/backward with the microbatch and print the measured bubble fraction beside the
theoretical (p-1)/(m+p-1). Time is ms on the run's clock; the axis counts from the
window's start, as the expected schedule's does from its first step. Must not import torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..figures.model import elide
from ..figures.names import BOX_KINDS
from ..figures.schedule import SCHEDULE_NAMES
from ..figures.timeline import Box, Lane, Panel, Timeline
from .trace import COMM, Span, Trace
from .window import MAX_BINS, MAX_BOXES, Cell, Window, bound_boxes, select_window, spans_in

PHASES = {"reduce-scatter": "RS", "all-gather": "AG", "reduce": "R", "broadcast": "B", "intra": "intra",
          "inter": "inter"}
PHASE_NAMES = {short: name for name, short in PHASES.items()}  # RS -> reduce-scatter: the legend names them
OVERLAP_US = 1.0  # spans on one lane may touch within this slack (clock rounding)
FAST_FACTOR = 8  # a lane this many times over its box budget is binned in one pass over raw events


@dataclass(frozen=True)
class Bubble:
    measured: float  # over the drawn steps
    run_mean: float  # over every complete step after the first
    theory: float  # (p-1)/(m+p-1)
    stages: int
    microbatches: int


@dataclass(frozen=True)
class Measured:
    timeline: Timeline
    window: Window
    spans: tuple  # the trace spans drawn (not clipped to the window; empty when binned in one pass)
    aggregated: bool
    bubble: Bubble | None


def box_label(span: Span, pipeline: bool, asynchronous: bool) -> str:
    """The short text drawn inside a box when it fits (the expected schedule's vocabulary)."""
    name, args = span.name, span.args
    if pipeline and name in ("forward", "backward") and isinstance(args.get("mb"), int):
        return str(args["mb"] + 1)
    if name == "update":
        return "U" if asynchronous else "Update"
    if name == "allreduce":
        return PHASES.get(str(args.get("phase", "")), "")
    return {"fetch": "F", "push": "P", "forward": "fwd", "backward": "bwd", "slowdown": "slow",
            "optimizer": "opt", "gossip": "G"}.get(name, "")


def _lane_spans(mine: list) -> tuple:
    """(main lane spans, comm lane spans or None) of one rank's spans: comm splits off only
    when it overlaps compute."""
    compute = [s for s in mine if s.tid != COMM]
    comm = [s for s in mine if s.tid == COMM]
    if _overlaps(compute, comm):
        return compute, comm
    return mine, None


def _overlaps(a: list, b: list) -> bool:
    """Whether any span of `a` overlaps one of `b` (beyond the clock slack).

    b.start < a.end and b.end > a.start: sweeping `a` by end and `b` by start, the b spans
    that start before a.end only grow, so their latest end is all that must be compared."""
    b_sorted = sorted(b, key=lambda s: s.start)
    index, reach = 0, float("-inf")
    for s in sorted(a, key=lambda s: s.end):
        while index < len(b_sorted) and b_sorted[index].start < s.end - OVERLAP_US:
            reach = max(reach, b_sorted[index].end)
            index += 1
        if reach > s.start + OVERLAP_US:
            return True
    return False


def _cells(spans: list, t0: float, t1: float, pipeline: bool, asynchronous: bool, labels: bool) -> list:
    out = []
    for s in spans:
        if s.name not in BOX_KINDS:
            continue  # unknown span names are the runner's business, not drawn
        out.append(Cell(max(s.start, t0), min(s.end, t1), s.name, 1,
                        box_label(s, pipeline, asynchronous) if labels else ""))
    return out


def _bubbles(spans: list, t0: float, t1: float) -> list:
    """Idle gaps inside a step of a pipeline stage, where no span of the lane explains the time
    (used when the trace has no wait spans; a blocking recv already shows its wait)."""
    out, reach, step = [], None, None
    for s in sorted(spans, key=lambda s: s.start):
        if s.name not in BOX_KINDS:
            continue
        if reach is not None and s.step == step and s.start - reach > OVERLAP_US:
            out.append(Cell(max(reach, t0), min(s.start, t1), "wait", 0, "bubble"))
        reach = s.end if reach is None or s.step != step else max(reach, s.end)
        step = s.step
    return out


def pipeline_bubble(events: list, first: int | None = None, last: int | None = None) -> float | None:
    """Mean over steps of 1 - (busy compute per stage) / (stages x the step's compute makespan)."""
    per_step: dict = {}
    for e in events:
        name = e["name"]
        if name != "forward" and name != "backward":
            continue
        step = e["args"]["step"]
        if first is not None and not first <= step <= last:
            continue
        start, end = e["ts"], e["ts"] + e["dur"]
        item = per_step.get(step)
        if item is None:
            per_step[step] = item = [start, end, {}]
        item[0] = min(item[0], start)
        item[1] = max(item[1], end)
        item[2][e["pid"]] = item[2].get(e["pid"], 0.0) + (end - start)
    fractions = []
    stages = max((len(v[2]) for v in per_step.values()), default=0)
    for start, end, busy in per_step.values():
        if end > start and len(busy) == stages:
            fractions.append(1.0 - sum(busy.values()) / (stages * (end - start)))
    return sum(fractions) / len(fractions) if fractions else None


def _bubble(spec, trace: Trace, window: Window) -> Bubble | None:
    if spec.strategy.kind != "pipeline":
        return None
    p, m = spec.topology.workers.count, spec.strategy.microbatches
    measured = pipeline_bubble(trace.events, window.first, window.last)
    steps = trace.steps
    run_mean = pipeline_bubble(trace.events, steps[1] if len(steps) > 2 else steps[0], steps[-1])
    if measured is None:
        return None
    return Bubble(measured, run_mean if run_mean is not None else measured, (p - 1) / (m + p - 1), p, m)


def _title(spec) -> str:
    kind = spec.strategy.kind
    if kind == "parameter-server":
        return f"{spec.strategy.sync}hronous parameter server"
    if kind == "allreduce":
        return f"{spec.strategy.algorithm} all-reduce"
    if kind == "pipeline":
        return f"{SCHEDULE_NAMES.get(spec.strategy.schedule, spec.strategy.schedule)} pipeline"
    return kind.replace("-", " ")


def default_width(spec) -> int:
    return 2 if spec.strategy.kind == "pipeline" else 3


def _rows(spec, trace: Trace, pipeline: bool) -> list:
    """(lane id, label, role, rank or None for the elision gap): servers, then workers."""
    ids = trace.ids
    servers = [r for r in sorted(ids) if not ids[r].startswith("w")]
    workers = [r for r in sorted(ids) if ids[r].startswith("w")]
    shown = elide(len(workers), spec.figure.max_workers_drawn)
    rows: list = [(ids[rank], _label(spec, ids[rank]), "server", rank) for rank in servers]
    for index in shown:
        if index is None:
            rows.append(("more", f"{len(workers) - (len(shown) - 1):,} more {'stages' if pipeline else 'workers'}",
                         "gap", None))
        else:
            rank = workers[index - 1]
            rows.append((ids[rank], _label(spec, ids[rank]), "stage" if pipeline else "worker", rank))
    return rows


def _exact_lanes(spec, trace, window, rows, max_boxes, pipeline, asynchronous) -> tuple:
    """Lanes from typed spans: every span a box while the lane is under its budget."""
    by_rank: dict = {}
    for span in trace.spans_between(window.t0, window.t1):
        by_rank.setdefault(span.rank, []).append(span)
    lanes_spans = []
    for lane_id, label, role, rank in rows:
        if rank is None:
            lanes_spans.append((lane_id, label, role, None))
            continue
        main, comm = _lane_spans(by_rank.get(rank, []))
        lanes_spans.append((lane_id, label, role, main))
        # Pipeline send/recv are thin slivers beside the microbatches: the schedule reads
        # better without them (the expected schedule has none either).
        if comm is not None and not pipeline:
            lanes_spans.append((f"{lane_id}-comm", f"{label} (comm)", role, comm))
    budget = max(8, max_boxes // max(1, sum(1 for x in lanes_spans if x[3] is not None)))
    lanes, drawn, aggregated = [], [], False
    for lane_id, label, role, lane in lanes_spans:
        if lane is None:
            lanes.append(Lane(lane_id, label, (), role="gap"))
            continue
        cells = _cells(lane, window.t0, window.t1, pipeline, asynchronous, len(lane) <= budget)
        if pipeline and not lane_id.endswith("-comm") and not any(s.name == "wait" for s in lane):
            cells = sorted(cells + _bubbles(lane, window.t0, window.t1), key=lambda c: c.start)
        cells, merged = bound_boxes(cells, window.t0, window.t1, budget)
        aggregated |= merged
        lanes.append(Lane(lane_id, label, tuple(Box(c.start / 1000, c.end / 1000, c.kind, c.label,
                                                    PHASE_NAMES.get(c.label, "") if c.kind == "allreduce" else "")
                                                for c in cells), role=role))
        drawn.extend(lane)
    return lanes, tuple(drawn), len(drawn), aggregated, budget


def _binned_lanes(trace, window, rows, max_boxes, pipeline) -> tuple:
    """Lanes for a window far over budget, in one pass over the raw events (no typed spans):
    each lane is MAX_BINS equal time bins drawn as the time share of each kind."""
    t0, t1 = window.t0, window.t1
    width = (t1 - t0) / MAX_BINS or 1.0
    wanted = {rank for *_, rank in rows if rank is not None}
    kinds = set(BOX_KINDS)
    fill: dict = {}  # (rank, tid) -> [None | {kind: µs}] per bin
    count = 0
    last = MAX_BINS - 1
    for e in trace.events:
        start = e["ts"]
        end = start + e["dur"]
        if end < t0 or start > t1 or e["pid"] not in wanted or e["name"] not in kinds:
            continue
        count += 1
        key = (e["pid"], e["tid"])
        lane = fill.get(key)
        if lane is None:
            lane = fill[key] = [None] * MAX_BINS
        lo, hi = max(start, t0), min(end, t1)
        name = e["name"]
        for index in range(min(last, int((lo - t0) / width)), min(last, int((hi - t0) / width)) + 1):
            part = min(hi, t0 + (index + 1) * width) - max(lo, t0 + index * width)
            if part > 0:
                shares = lane[index]
                if shares is None:
                    shares = lane[index] = {}
                shares[name] = shares.get(name, 0.0) + part
    planned = []
    for lane_id, label, role, rank in rows:
        if rank is None:
            planned.append((lane_id, label, role, None))
            continue
        compute, comm = fill.get((rank, 0)), fill.get((rank, 1))
        if compute and comm and _bins_overlap(compute, comm, width):
            planned.append((lane_id, label, role, compute))
            if not pipeline:
                planned.append((f"{lane_id}-comm", f"{label} (comm)", role, comm))
        else:
            planned.append((lane_id, label, role, _add_bins(compute, comm)))
    budget = max(8, max_boxes // max(1, sum(1 for x in planned if x[3] is not None)))
    lanes = []
    for lane_id, label, role, bins in planned:
        if bins is None:
            lanes.append(Lane(lane_id, label, (), role=role))
            continue
        cells = _strips(bins, t0, width, budget)
        lanes.append(Lane(lane_id, label, tuple(Box(c.start / 1000, c.end / 1000, c.kind) for c in cells), role=role))
    return lanes, (), count, True, budget


def _bins_overlap(a: list, b: list, width: float) -> bool:
    """Whether two threads' busy time in some bin adds up to more than the bin (they overlap)."""
    return any(x and y and sum(x.values()) + sum(y.values()) > width * 1.01 for x, y in zip(a, b))


def _add_bins(a, b) -> list:
    if not a or not b:
        return a or b or []
    out = []
    for x, y in zip(a, b):
        if not x or not y:
            out.append(x or y)
            continue
        merged = dict(x)
        for kind, value in y.items():
            merged[kind] = merged.get(kind, 0.0) + value
        out.append(merged)
    return out


def _strips(bins: list, t0: float, width: float, budget: int) -> list:
    """Cells for binned shares: one segment per kind in each bin, bins merged to stay in budget."""
    kinds = [k for k in BOX_KINDS if any(b and k in b for b in bins)]
    factor = max(1, -(-len(bins) * max(1, len(kinds)) // budget))
    cells = []
    for first in range(0, len(bins), factor):
        group = [b for b in bins[first:first + factor] if b]
        x = t0 + first * width
        for kind in kinds:
            share = sum(b.get(kind, 0.0) for b in group)
            if share > 0:
                cells.append(Cell(x, x + share, kind))
                x += share
    return cells


def measured_timeline(spec, trace: Trace, steps: tuple | None = None, max_boxes: int = MAX_BOXES) -> Measured:
    """The Timeline of what the run did in a window of steps, with at most `max_boxes` boxes."""
    asynchronous = spec.strategy.sync == "async" and spec.strategy.kind == "parameter-server"
    pipeline = spec.strategy.kind == "pipeline"
    window = select_window(trace, steps, default_width(spec), asynchronous)
    rows = _rows(spec, trace, pipeline)
    drawn_ranks = [rank for *_, rank in rows if rank is not None]
    estimate = spans_in(trace, window)
    per_lane = max_boxes // max(1, len(drawn_ranks))
    if max((estimate.get(rank, 0) for rank in drawn_ranks), default=0) > FAST_FACTOR * per_lane:
        lanes, drawn, count, aggregated, budget = _binned_lanes(trace, window, rows, max_boxes, pipeline)
    else:
        lanes, drawn, count, aggregated, budget = _exact_lanes(spec, trace, window, rows, max_boxes, pipeline,
                                                               asynchronous)
    bubble = _bubble(spec, trace, window)
    seen = "predicted" if trace.metadata.get("predicted") else "measured"  # a prediction draws like a run
    panel_note = ""
    if bubble is not None:
        panel_note = f"bubble {bubble.measured:.0%} {seen}; $(p-1)/(m+p-1)$ = {bubble.theory:.0%}"
    title = f"{seen}: {_title(spec)}, {window.label}"
    notes = []
    if bubble is not None:
        notes.append(f"{seen} bubble {bubble.measured:.1%} (run mean {bubble.run_mean:.1%}) vs "
                     f"{bubble.stages - 1}/{bubble.microbatches + bubble.stages - 1} = {bubble.theory:.1%} "
                     f"for balanced stages")
    if aggregated:
        notes.append(f"{count:,} spans aggregated: where a lane has more than {budget:,}, "
                     f"equal time bins show each kind's share of the bin")
    if trace.ended_early:
        notes.append(trace.note or "run ended early")
    if not notes:
        notes.append(f"{window.label}: {'a representative window, near the median step time' if window.chosen == 'default' else 'as requested'}")
    t0_ms = window.t0 / 1000
    # A prediction is a schedule, not a measurement: like the expected one it draws the
    # server update (the event a PS figure is about) visibly, where a trace keeps true widths.
    timeline = Timeline(spec.title, (Panel("measured", title, tuple(lanes), note=panel_note),),
                        t0_ms, window.t1 / 1000, "; ".join(notes),
                        axis_label=f"time (ms) from {t0_ms:,.1f} ms into the run", widen_events=seen == "predicted")
    return Measured(timeline, window, drawn, aggregated, bubble)


def _label(spec, ident: str) -> str:
    if ident.startswith("w") and ident[1:].isdigit():
        if spec.strategy.kind == "pipeline":
            return f"Stage {ident[1:]}"
        return spec.topology.workers.label_of(ident)
    if ident in spec.topology.servers.ids:
        return spec.topology.servers.label_of(ident)
    return ident
