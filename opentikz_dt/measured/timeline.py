"""A measured trace -> the figures' Timeline model, drawn by the same template as the expected one.

One lane per rank (servers on top, as seed 001 draws the Update blocks above the
workers), the rank's compute and communication spans on it: Fetch, forward/backward,
Push, waits shaded, the server's updates. A rank whose communication overlaps its
compute (pipeline send/recv) gets a second lane for it. A push ends where the server
received it (`received_pushes`), so no push is drawn ending after the update it fed
began; time inside a step that no span explains is drawn as wait ("idle"), not blank.
A pipeline's lanes (its figures plugin says PIPELINED) label forward/backward with the
microbatch and print the measured bubble fraction beside the theoretical (p-1)/(m+p-1).
Time is ms on the run's clock; the axis counts from the window's start, as the expected
schedule's does from its first step. The words it writes (title, notes, axis title, lane
names) are the spec's where it sets them (texts.py).
Must not import torch.
"""

from __future__ import annotations

import bisect
from collections import Counter

from dataclasses import dataclass, replace
from typing import NamedTuple

from ..figures.model import elide
from ..figures.names import BOX_KINDS, PHASED_BOX
from ..figures.plugin import plugin_of
from ..figures.texts import label_text, more_lanes_text
from ..figures.timeline import MIN_VISIBLE_CM, WIDTH_CM, Box, Lane, Panel, Timeline
from .texts import axis_title, bubble_title_note, comm_lane_name, lane_name, panel_title, timeline_note
from .trace import COMM, Span, Trace
from .window import MAX_BINS, MAX_BOXES, Cell, Window, bound_boxes, select_window, spans_in

PHASES = {"reduce-scatter": "RS", "all-gather": "AG", "reduce": "R", "broadcast": "B", "intra": "intra",
          "inter": "inter"}
# The box's text -> the phase the legend names, as the expected schedule names it (a
# hierarchical all-reduce's intra and inter are its host-level phases).
PHASE_NAMES = {"RS": "reduce-scatter", "AG": "all-gather", "R": "reduce", "B": "broadcast",
               "intra": "intra-host reduce", "inter": "inter-host all-reduce"}
# A collective of one dimension of a mesh (the trace's `dim` arg): its box text starts with
# the dimension's short name ("tp AR", "dp RS"), and the legend names both ("tensor all-reduce").
DIMS = {"tensor": "tp", "data": "dp", "pipeline": "pp"}
SKIPPABLE = ("optimizer", "update")  # the spans fp16's scaler can skip (drawn as `skipped`)
OVERLAP_US = 1.0  # spans on one lane may touch within this slack (clock rounding)
FAST_FACTOR = 8  # a lane this many times over its box budget is binned in one pass over raw events


@dataclass(frozen=True)
class Bubble:
    measured: float  # over the drawn steps
    run_mean: float  # over every complete step after the first
    theory: float  # the schedule's paper: (p-1)/(m+p-1), (p-1)/(vm+p-1), or 1F1B's for zero bubble
    stages: int
    microbatches: int
    form: str = "$(p-1)/(m+p-1)$"  # the theory's formula (TeX), as the caption writes it
    ideal: str = ""  # its numbers, "3/11"; empty: (p-1)/(m+p-1)'s


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
    if name in ("forward", "backward") and isinstance(args.get("mb"), int):
        # a pipeline's (or a mesh's pipeline dimension's) microbatch; a multi-stage
        # schedule's chunk as a letter (1a, 1b)
        chunk = args.get("chunk")
        text = f"{args['mb'] + 1}{'abcdefghijklmnop'[chunk] if isinstance(chunk, int) and 0 <= chunk < 16 else ''}"
        return text
    if name == "update":
        return "U" if asynchronous else "Update"
    if name == PHASED_BOX:
        short = PHASES.get(str(args.get("phase", "")), "")
        dim = DIMS.get(str(args.get("dim", "")))
        return f"{dim} {short or 'AR'}" if dim else short
    return {"fetch": "F", "push": "P", "forward": "fwd", "backward": "bwd", "slowdown": "slow",
            "optimizer": "opt", "gossip": "G"}.get(name, "")


def _lane_spans(mine: list) -> tuple:
    """(main lane spans, comm lane spans or None) of one rank's spans: comm splits off only
    when it overlaps compute."""
    compute = [s for s in mine if s.tid != COMM]
    comm = [s for s in mine if s.tid == COMM]
    # only what is drawn counts (a span the figure does not know is the runner's business)
    if _overlaps([s for s in compute if s.name in BOX_KINDS], [s for s in comm if s.name in BOX_KINDS]):
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


def received_pushes(spans: list, ids: dict, events: list | None = None) -> list:
    """Each push drawn as what the server received when: the worker's `push` span ends when
    its send call returned, which can come after the update that needed it began (the
    sender was not scheduled yet). Where the servers' `update` spans say when they had
    each push (arg `received_us`: {worker id: µs}, on the server's clock; the latest
    shard's counts; an async push is matched by its `ticket` too), the push ends there
    and the sender's time after it is drawn as what it is, a wait. The updates are looked
    up in `events` (the whole trace's raw events: an update may start after the window
    that shows its push), else among `spans`. The two ends are on different ranks'
    clocks, aligned to within each rank's bound (trace metadata `clock`; 0 for ranks of
    one machine)."""
    wanted = {(ids.get(s.rank), s.step, s.args.get("ticket")) for s in spans if s.name == "push"}
    if not wanted:  # no push drawn: nothing to look up in a possibly long trace
        return spans
    if not any("received_us" in s.args for s in spans if s.name == "update"):
        events = None  # a trace that records none (older runs, predictions): no pass over all of it
    received: dict = {}  # (worker id, step, async ticket) -> the last server's receive time
    for name, args in ((e["name"], e["args"]) for e in events) if events is not None else \
            ((s.name, s.args) for s in spans):
        times = args.get("received_us") if name == "update" else None
        if isinstance(times, dict):
            for worker, at in times.items():
                key = (worker, args["step"], args.get("ticket"))
                if key in wanted and isinstance(at, (int, float)):
                    received[key] = max(received.get(key, at), at)
    if not received:
        return spans
    out = []
    for s in spans:
        at = received.get((ids.get(s.rank), s.step, s.args.get("ticket"))) if s.name == "push" else None
        if at is None or s.end <= at:
            out.append(s)
            continue
        end = max(s.start, at)
        out.append(s._replace(end=end))
        out.append(s._replace(name="wait", start=end, args={"step": s.step, "id": s.id}))
    return out


def phase_name(label: str) -> str:
    """The phase the legend names for a collective's box text (box_label's): "RS" ->
    reduce-scatter, "tp AR" -> tensor all-reduce; "" for none."""
    dim, _, short = label.rpartition(" ")
    named = {v: k for k, v in DIMS.items()}.get(dim)
    if named:
        return f"{named} {PHASE_NAMES.get(short, 'all-reduce')}"
    return PHASE_NAMES.get(label, "")


def box_kind(name: str, args: dict) -> str:
    """The box kind a span is drawn as: its name, or `skipped` for an optimizer step or server
    update the fp16 gradient scaler skipped (the runner marks the span with arg `skipped`),
    or `wgrad` for a backward's weight-gradient half (arg grad=weight: zero bubble)."""
    if name == "backward" and args.get("grad") == "weight":
        return "wgrad"
    return "skipped" if name in SKIPPABLE and args.get("skipped") else name


def _cells(spans: list, t0: float, t1: float, pipeline: bool, asynchronous: bool, labels: bool) -> list:
    out = []
    for s in spans:
        if s.name not in BOX_KINDS:
            continue  # unknown span names are the runner's business, not drawn
        kind = box_kind(s.name, s.args)
        text = box_label(s, pipeline, asynchronous)
        # a skipped step's cross is its mark: no "opt"/"Update" inside it, which would say it ran
        out.append(Cell(max(s.start, t0), min(s.end, t1), kind, 1, text if labels and kind != "skipped" else "",
                        phase_name(text) if kind == PHASED_BOX else ""))
    return out


def _bubbles(spans: list, t0: float, t1: float, label: str = "bubble", min_us: float = OVERLAP_US,
             across: bool = False) -> list:
    """Idle gaps inside a step of a lane that holds all of its rank's spans, where no span
    explains the time, as `wait` cells labelled `label`: a pipeline stage's bubbles (when
    the trace has no wait spans; a blocking recv already shows its wait), and any rank's
    untraced time inside a step ("idle": blocked, or not scheduled on a busy machine), so
    the figure draws it as the legend's "idle / wait" instead of leaving it blank. Gaps
    shorter than `min_us` stay as they are (too thin to see). `across`: gaps between two
    steps too (a simulated schedule has no untraced time: a worker idle before its next
    step waits, for the server's update or the other workers)."""
    out, reach, step = [], None, None
    for s in sorted(spans, key=lambda s: s.start):
        if s.name not in BOX_KINDS:
            continue
        if reach is not None and (across or s.step == step) and s.start - reach > min_us:
            out.append(Cell(max(reach, t0), min(s.start, t1), "wait", 0, label))
        reach = s.end if reach is None or (s.step != step and not across) else max(reach, s.end)
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
    if not plugin_of(spec).PIPELINED:
        return None
    p, m = spec.topology.workers.count, spec.strategy.microbatches
    measured = pipeline_bubble(trace.events, window.first, window.last)
    steps = trace.steps
    run_mean = pipeline_bubble(trace.events, steps[1] if len(steps) > 2 else steps[0], steps[-1])
    if measured is None:
        return None
    theory, form, ideal = plugin_of(spec).bubble_reference(spec, p, m)  # the paper's bubble, its plugin's
    return Bubble(measured, run_mean if run_mean is not None else measured, theory, p, m, form, ideal)


def default_width(spec) -> int:
    """How many steps the window shows when the user picks none (the plugin's WINDOW_STEPS)."""
    return plugin_of(spec).WINDOW_STEPS


class _Row(NamedTuple):
    """One lane to draw: a rank's, or (rank None) the elision gap standing for `hidden` ranks."""

    id: str
    label: str
    role: str
    rank: int | None
    hidden: int = 0


def _rows(spec, trace: Trace) -> list:
    """The lanes to draw: servers, then workers (the first ones, the gap, the last)."""
    ids = trace.ids
    servers = [r for r in sorted(ids) if not ids[r].startswith("w")]
    workers = [r for r in sorted(ids) if ids[r].startswith("w")]
    shown = elide(len(workers), spec.figure.max_workers_drawn)
    rows: list = [_Row(ids[rank], lane_name(spec, ids[rank]), "server", rank) for rank in servers]
    role = plugin_of(spec).LANE_ROLE
    stages = trace.metadata.get("lane_stages") or {}  # a cluster prediction: one rank stands for a stage
    per_stage = plugin_of(spec).stage_lanes(spec)
    if per_stage and not stages and len(workers) > spec.figure.max_workers_drawn:
        return rows + _stage_rows(spec, ids, workers, per_stage, role)
    for index in shown:
        if index is None:
            hidden = len(workers) - (len(shown) - 1)
            text = label_text(spec, "more_stages", n=f"{hidden:,}") if stages else more_lanes_text(spec, hidden)
            rows.append(_Row("more", text, "gap", None, hidden))
        else:
            rank = workers[index - 1]
            if ids[rank] in stages:
                rows.append(_Row(ids[rank], representative_lane(spec, stages[ids[rank]], trace), "stage", rank))
            else:
                rows.append(_Row(ids[rank], lane_name(spec, ids[rank]), role, rank))
    return rows


def _stage_rows(spec, ids: dict, workers: list, per_stage: int, role: str) -> list:
    """One lane per pipeline stage (its first worker's, which stands for the stage's workers:
    they run alike), the stages elided past figure.max_workers_drawn."""
    count = len(workers) // per_stage
    shown = elide(count, spec.figure.max_workers_drawn)
    rows = []
    for index in shown:
        if index is None:
            hidden = count - (len(shown) - 1)
            rows.append(_Row("more", label_text(spec, "more_stages", n=f"{hidden:,}"), "gap", None, hidden))
            continue
        rank = workers[(index - 1) * per_stage]
        rows.append(_Row(ids[rank], f"{lane_name(spec, ids[rank])} (stage {index})", role, rank))
    return rows


def representative_lane(spec, stage: int, trace: Trace) -> str:
    """The lane of the rank standing for a pipeline stage's ranks: 'Stage 3, 64 ranks'; with
    one stage, 'Each of 16 ranks' (the data replicas run alike)."""
    ranks = int(trace.metadata.get("ranks_per_lane") or 1)
    if len(trace.metadata.get("lane_stages") or {}) == 1:
        return f"Each of {ranks:,} ranks" if ranks > 1 else lane_name(spec, "w1")
    name = label_text(spec, "stage_lane", i=stage)
    return f"{name}, {ranks:,} ranks" if ranks > 1 else name


def _comm_row(spec, row: _Row) -> _Row:
    """The lane of a rank's communication, drawn under its compute where the two overlap."""
    return row._replace(id=f"{row.id}-comm", label=comm_lane_name(spec, row.label))


def _gap_lane(row: _Row) -> Lane:
    return Lane(row.id, row.label, (), role="gap", hidden=row.hidden)


def _exact_lanes(spec, trace, window, rows, max_boxes, pipeline, asynchronous, whole_steps=False) -> tuple:
    """Lanes from typed spans: every span a box while the lane is under its budget; with
    `whole_steps` only the window's steps' spans (asynchronous: those done by its end),
    every gap between them a wait."""
    by_rank: dict = {}
    spans = trace.spans_between(window.t0, window.t1)
    pushes: dict = {}
    for span in spans:
        if span.name == "push":
            pushes.setdefault(span.rank, []).append(span.end)
    for ends in pushes.values():
        ends.sort()
    for span in received_pushes(spans, trace.ids, trace.events):
        # whole steps: a synchronous schedule's window steps, every lane's; an asynchronous
        # one's every iteration done by the window's end (a fast worker's extra iterations
        # are the point of it) and the updates of them, none cut
        if whole_steps and not (_done_by(pushes, span, window.t1) if asynchronous
                                else window.first <= span.step <= window.last):
            continue
        # a push cut where the server had it can end before the window it overlapped
        # (drawn, it was a box from the window's edge back to that end)
        if span.end >= window.t0:
            by_rank.setdefault(span.rank, []).append(span)
    lanes_spans = []  # (row, its spans; None for the gap, whether they are all its rank's)
    for row in rows:
        if row.rank is None:
            lanes_spans.append((row, None, False))
            continue
        main, comm = _lane_spans(by_rank.get(row.rank, []))
        lanes_spans.append((row, main, comm is None))
        # Pipeline send/recv are thin slivers beside the microbatches: the schedule reads
        # better without them (the expected schedule has none either).
        if comm is not None and not pipeline:
            lanes_spans.append((_comm_row(spec, row), comm, False))
    budget = max(8, max_boxes // max(1, sum(1 for _, lane, _ in lanes_spans if lane is not None)))
    visible_us = (window.t1 - window.t0) * MIN_VISIBLE_CM / WIDTH_CM
    lanes, drawn, aggregated = [], [], False
    for row, lane, whole in lanes_spans:
        if lane is None:
            lanes.append(_gap_lane(row))
            continue
        cells = _cells(lane, window.t0, window.t1, pipeline, asynchronous, len(lane) <= budget)
        if pipeline and not row.id.endswith("-comm") and not any(s.name == "wait" for s in lane):
            cells = sorted(cells + _bubbles(lane, window.t0, window.t1, across=whole_steps), key=lambda c: c.start)
        elif (whole or (whole_steps and not row.id.endswith("-comm"))) and not pipeline \
                and not (asynchronous and row.role == "server"):
            # (a simulated schedule's compute lane idles only waiting for its communication)
            # (an async server's spans carry the pushing workers' steps, not steps of its own:
            # between two of them it replies, which is its work, not idle time)
            cells = sorted(cells + _bubbles(lane, window.t0, window.t1, "idle", visible_us, whole_steps),
                           key=lambda c: c.start)
        cells, merged = bound_boxes(cells, window.t0, window.t1, budget)
        aggregated |= merged
        lanes.append(Lane(row.id, row.label, tuple(Box(c.start / 1000, c.end / 1000, c.kind, c.label,
                                                       (c.phase or phase_name(c.label)) if c.kind == PHASED_BOX else "")
                                                   for c in cells), role=row.role))
        drawn.extend(lane)
    return lanes, tuple(drawn), len(drawn), aggregated, budget


def _done_by(pushes: dict, span: Span, t1: float) -> bool:
    """Whether the asynchronous iteration `span` is part of ended by t1: a worker's iteration
    ends with its push (`pushes`: rank -> its push ends, in order; an async step number
    is the version it fetched, not the iteration); another rank's span is its own."""
    ends = pushes.get(span.rank)
    if ends is None:
        return span.end <= t1 + OVERLAP_US
    index = bisect.bisect_left(ends, span.end - OVERLAP_US)
    return index < len(ends) and ends[index] <= t1 + OVERLAP_US


def _binned_lanes(spec, trace, window, rows, max_boxes, pipeline) -> tuple:
    """Lanes for a window far over budget, in one pass over the raw events (no typed spans):
    each lane is MAX_BINS equal time bins drawn as the time share of each kind."""
    t0, t1 = window.t0, window.t1
    width = (t1 - t0) / MAX_BINS or 1.0
    wanted = {row.rank for row in rows if row.rank is not None}
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
        name = box_kind(e["name"], e["args"])
        for index in range(min(last, int((lo - t0) / width)), min(last, int((hi - t0) / width)) + 1):
            part = min(hi, t0 + (index + 1) * width) - max(lo, t0 + index * width)
            if part > 0:
                shares = lane[index]
                if shares is None:
                    shares = lane[index] = {}
                shares[name] = shares.get(name, 0.0) + part
    planned = []  # (row, its bins; None for the gap)
    for row in rows:
        rank = row.rank
        if rank is None:
            planned.append((row, None))
            continue
        compute, comm = fill.get((rank, 0)), fill.get((rank, 1))
        if compute and comm and _bins_overlap(compute, comm, width):
            planned.append((row, compute))
            if not pipeline:
                planned.append((_comm_row(spec, row), comm))
        else:
            planned.append((row, _add_bins(compute, comm)))
    budget = max(8, max_boxes // max(1, sum(1 for _, bins in planned if bins is not None)))
    lanes = []
    for row, bins in planned:
        if bins is None:
            lanes.append(_gap_lane(row))
            continue
        cells = _strips(bins, t0, width, budget)
        lanes.append(Lane(row.id, row.label, tuple(Box(c.start / 1000, c.end / 1000, c.kind) for c in cells), role=row.role))
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


def _skipped_steps(trace: Trace, window) -> list[int]:
    """Steps in the window whose update was skipped (fp16 gradients that overflowed): the
    runner marks their optimizer or update span `skipped`."""
    return sorted({e["args"]["step"] for e in trace.events
                   if e["args"].get("skipped") and window.first <= e["args"]["step"] <= window.last})


def async_updates_note(spec, trace: Trace) -> str:
    """How many updates each async worker did over the whole run: they share one budget of
    steps x workers, so a straggler does fewer (counted from the pushes; only when every
    step was traced)."""
    if int(spec.runtime.trace.get("sample_every", 1)) != 1 or trace.ended_early:
        return ""
    counts = Counter(e["args"]["id"] for e in trace.events if e["name"] == "push")
    workers = [w for w in spec.topology.workers.ids if w in counts]
    if not workers:
        return ""
    if len(workers) > 4:
        return (f"{min(counts[w] for w in workers)}\u2013{max(counts[w] for w in workers)} updates per worker of "
                f"{spec.training.steps * spec.topology.workers.count:,}")
    total = spec.training.steps * spec.topology.workers.count
    return "updates: " + ", ".join(f"W{w[1:]} {counts[w]}" for w in workers) + f" of {total:,}"


def measured_timeline(spec, trace: Trace, steps: tuple | None = None, max_boxes: int = MAX_BOXES,
                      whole_steps: bool = False) -> Measured:
    """The Timeline of what the run did in a window of steps, with at most `max_boxes` boxes.
    `whole_steps` (a simulated schedule from its start: the expected timeline) draws the
    window's steps whole on every lane, a server's updates of them included, and nothing
    of the steps after."""
    plugin = plugin_of(spec)  # its strategy's figures plugin (strategies/<kind>/figures.py)
    asynchronous, pipeline = plugin.asynchronous(spec), plugin.PIPELINED
    window = select_window(trace, steps, default_width(spec), asynchronous)
    if whole_steps:
        extents = [e for (_, step), e in trace.extents.items() if window.first <= step <= window.last]
        window = replace(window, t0=min(e[0] for e in extents), t1=max(e[1] for e in extents))
    rows = _rows(spec, trace)
    drawn_ranks = [row.rank for row in rows if row.rank is not None]
    estimate = spans_in(trace, window)
    per_lane = max_boxes // max(1, len(drawn_ranks))
    # (whole steps pick their spans one by one: a simulation's few steps are never that many)
    if not whole_steps and max((estimate.get(rank, 0) for rank in drawn_ranks), default=0) > FAST_FACTOR * per_lane:
        lanes, drawn, count, aggregated, budget = _binned_lanes(spec, trace, window, rows, max_boxes, pipeline)
    else:
        lanes, drawn, count, aggregated, budget = _exact_lanes(spec, trace, window, rows, max_boxes, pipeline,
                                                               asynchronous, whole_steps)
    bubble = _bubble(spec, trace, window)
    seen = "predicted" if trace.metadata.get("predicted") else "measured"  # a prediction draws like a run
    panel_note = bubble_title_note(spec, seen, bubble) if bubble is not None else ""
    if asynchronous and not panel_note:
        panel_note = async_updates_note(spec, trace)
    note = timeline_note(spec, seen, window, bubble, (count, budget) if aggregated else None,
                         (trace.note or "run ended early") if trace.ended_early else None,
                         _skipped_steps(trace, window))
    t0_ms = window.t0 / 1000
    # A prediction is a schedule, not a measurement: like the expected one it draws the
    # server update (the event a PS figure is about) visibly, where a trace keeps true widths.
    timeline = Timeline(spec.title, (Panel("measured", panel_title(spec, seen, window), tuple(lanes), note=panel_note),),
                        t0_ms, window.t1 / 1000, note, axis_label=axis_title(spec, t0_ms),
                        widen_events=seen == "predicted")
    return Measured(timeline, window, drawn, aggregated, bubble)
