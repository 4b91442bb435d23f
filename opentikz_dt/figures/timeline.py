"""The one drawable timeline model, shared by the expected schedule and measured traces.

    Timeline(title, panels=[Panel(id, title, lanes=[Lane(id, label, role, boxes=[
        Box(start_ms, end_ms, kind, label)])], note)], start_ms, end_ms, note)

- Time is in milliseconds on one axis for every panel, starting at `start_ms` (0 = the
  start of the window: the first step for a schedule, the run's epoch for a trace).
- A Box is one span on one lane. `kind` is a trace-event name of
  docs/dev/runner-interface.md: fetch, forward, backward, slowdown, optimizer, update,
  push, allreduce, gossip, send, recv, wait; or `skipped`, an optimizer step or server
  update that did not apply (fp16 gradients overflowed). `label` is short plain text drawn inside
  the box when it fits ("F", "3", "reduce-scatter"); it is escaped when drawn. A fetch
  or push box too narrow for its letter draws none (a letter set beside its box floated
  between the lanes); the legend names the letter of the boxes that do hold one
  ("fetch (F)").
- A Lane is one process (its id: w1, ps, ps2, ...; role worker | server | stage) or,
  with role "gap", the ellipsis standing for elided lanes (no boxes; id w4-more: the
  first hidden lane's id plus "-more").
- A Panel is one scenario drawn on the shared axis (sync and async side by side).
- Titles and notes are plain text (escaped when drawn; panel titles may hold $...$ math)
  or Tex that a caller already made safe (a spec's label through texsafe.render_label).
Nothing here knows about specs: schedule.py builds Timelines from a spec, and a trace
reader can build them from trace.json the same way.

draw_timeline turns a Timeline into centimetre coordinates for templates/timeline.tex.j2,
merging boxes too thin to see and refusing more than MAX_BOXES (TeX's limits: about
10,000 fills compile), so callers window long runs with `window`. The words it writes
itself (legend, phase names, elided lanes, narrow lane names; `Words`, English by
default) are the caller's: render_timeline passes the spec's. Must not import torch.
"""

from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass, field, replace

from ..errors import DtgenError
from ..texsafe import escape_text, render_label
from .model import Tex
from .names import BOX_KINDS, PHASED_BOX

MAX_BOXES = 4000
WIDTH_CM = 12.0
LANE_H = 0.46
LANE_GAP = 0.14
PANEL_GAP = 1.35
MIN_EVENT_CM = 0.12  # server updates are drawn at least this wide (over idle time, up to the next busy box)
MIN_VISIBLE_CM = 0.03  # boxes closer than this merge: the eye cannot tell them apart
HAIRLINE_CM = 0.01  # the narrowest box drawn: a short span stays visible
ARRIVALS = ("push",)  # boxes that end when another lane's rank had the message: never drawn later
ZERO_CM = 1e-4  # a span narrower than this once drawn has no length (clipping's float residue)
AXIS_BELOW = 0.08  # the axis line runs this far under the last lane (templates/timeline.tex.j2)

KIND_NAMES = {
    "fetch": "fetch", "forward": "forward", "backward": "backward", "wgrad": "weight gradient",
    "slowdown": "straggler delay",
    "optimizer": "optimizer step", "update": "server update",
    "skipped": "skipped (fp16 overflow)", "push": "push", "allreduce": "all-reduce",
    "gossip": "gossip", "send": "send", "recv": "recv", "wait": "idle / wait",
}


@dataclass(frozen=True)
class Words:
    """The words draw_timeline writes itself, English unless the caller passes the spec's
    (figures/texts.timeline_words). In the templates {n} is a count, {i} a lane's number."""

    legend: dict = field(default_factory=lambda: dict(KIND_NAMES))  # box kind -> legend name
    phases: dict = field(default_factory=dict)  # all-reduce phase (reduce-scatter) -> legend name; unset: itself
    more_workers: str = "{n} more workers"
    more_stages: str = "{n} more stages"
    worker_short: str = "W{i}"
    server_short: str = "PS {i}"
    comm_lane: str = "{lane} (comm)"  # a rank's communication lane, {lane} its compute lane's name

    def phase(self, phase: str) -> str:
        """A phase's name in the legend (a native all-reduce's one phase is the box kind's)."""
        if phase in self.phases:
            return self.phases[phase]
        return self.legend["allreduce"] if phase == KIND_NAMES["allreduce"] else phase


@dataclass(frozen=True)
class Box:
    start_ms: float
    end_ms: float
    kind: str
    label: str = ""
    phase: str = ""  # all-reduce boxes: the phase's full name (reduce-scatter), one colour per phase
    count: int = 1  # a merged run of boxes too thin to see: how many


@dataclass(frozen=True)
class Lane:
    id: str
    label: str
    boxes: tuple = ()
    role: str = "worker"  # worker | server | stage | gap
    hidden: int = 0  # gap lanes: how many lanes it stands for


@dataclass(frozen=True)
class Panel:
    id: str  # letters only: prefixes node names (sync-w1-label)
    title: str
    lanes: tuple
    note: str = ""


@dataclass(frozen=True)
class Timeline:
    title: str
    panels: tuple
    start_ms: float = 0.0
    end_ms: float | None = None  # None: the end of the last box
    note: str = ""
    axis_label: str = "time (ms)"
    axis_unit_ms: float | None = None  # ticks count this many ms as 1 (relative units); None: ticks in ms
    widen_events: bool = False  # draw server updates at least MIN_EVENT_CM wide (schedules and predictions, not measurements)

    def span(self) -> tuple[float, float]:
        ends = [b.end_ms for p in self.panels for lane in p.lanes for b in lane.boxes]
        return self.start_ms, (self.end_ms if self.end_ms is not None else max(ends, default=self.start_ms + 1.0))


def box_count(timeline: Timeline) -> int:
    return sum(len(lane.boxes) for p in timeline.panels for lane in p.lanes)


def window(timeline: Timeline, start_ms: float, end_ms: float, note: str = "") -> Timeline:
    """Only what happens in [start_ms, end_ms], boxes clipped to it."""
    panels = []
    for panel in timeline.panels:
        lanes = []
        for lane in panel.lanes:
            boxes = tuple(replace(b, start_ms=max(b.start_ms, start_ms), end_ms=min(b.end_ms, end_ms))
                          for b in lane.boxes if b.end_ms > start_ms and b.start_ms < end_ms)
            lanes.append(replace(lane, boxes=boxes))
        panels.append(replace(panel, lanes=tuple(lanes)))
    return replace(timeline, panels=tuple(panels), start_ms=start_ms, end_ms=end_ms, note=note or timeline.note)


def merge_thin(timeline: Timeline, width_cm: float = None) -> Timeline:
    """Merge the boxes too thin to see at the drawing's scale (see merge_close)."""
    start, end = timeline.span()
    gap_ms = MIN_VISIBLE_CM * (end - start) / (width_cm or WIDTH_CM)
    panels = tuple(replace(p, lanes=tuple(replace(lane, boxes=tuple(merge_close(lane.boxes, gap_ms))) for lane in p.lanes))
                   for p in timeline.panels)
    return replace(timeline, panels=panels)


def limit_boxes(timeline: Timeline, max_boxes: int = MAX_BOXES) -> Timeline:
    """Merge what cannot be seen, then window from the start so at most `max_boxes` remain."""
    timeline = merge_thin(timeline)
    if box_count(timeline) <= max_boxes:
        return timeline
    start, end = timeline.span()
    starts = sorted(b.start_ms for p in timeline.panels for lane in p.lanes for b in lane.boxes)
    cut = starts[max_boxes]  # the first box left out starts here
    note = f"first {cut - start:,.1f} ms of {end - start:,.1f} ms shown"
    return window(timeline, start, cut, note=note)


def merge_close(boxes, gap_ms: float) -> list[Box]:
    """Merge runs of same-kind boxes too thin to tell apart (each under ~3 gap_ms wide and
    less than gap_ms apart); the merged box counts them (a box merged before counts its own)."""
    out: list[Box] = []
    thin = 3 * gap_ms
    for box in sorted(boxes, key=lambda b: (b.start_ms, b.end_ms)):
        if (out and out[-1].kind == box.kind and out[-1].phase == box.phase and box.kind != "update" and box.start_ms - out[-1].end_ms < gap_ms
                and box.end_ms - box.start_ms < thin and (out[-1].count > 1 or out[-1].end_ms - out[-1].start_ms < thin)):
            count = out[-1].count + box.count
            out[-1] = Box(out[-1].start_ms, max(out[-1].end_ms, box.end_ms), box.kind,
                          f"{KIND_NAMES[box.kind]} ×{count:,}", box.phase, count)
        else:
            out.append(box)
    return out


def nice_step(span: float, target: int = 6) -> float:
    """A 1-2-2.5-5 x 10^k tick step giving about `target` ticks over `span`."""
    raw = span / target
    power = 10 ** math.floor(math.log10(raw))
    for mult in (1, 2, 2.5, 5, 10):
        if mult * power >= raw:
            return mult * power
    return 10 * power


# ---------------------------------------------------------------- drawing


@dataclass(frozen=True)
class DrawnBox:
    style: str
    x0: float
    y0: float
    x1: float
    y1: float
    text: Tex = Tex("")
    text_style: str = "tl-forward-text"  # the label colour that reads on this fill

    @property
    def xc(self) -> float:
        return (self.x0 + self.x1) / 2

    @property
    def yc(self) -> float:
        return (self.y0 + self.y1) / 2


@dataclass(frozen=True)
class DrawnLane:
    name: str  # <panel>-<lane id>
    label: Tex
    y: float  # centre
    gap: bool


@dataclass(frozen=True)
class DrawnPanel:
    name: str
    title: Tex
    top: float
    bottom: float
    lanes: tuple
    boxes: tuple
    ticks: tuple  # (x, Tex label)
    title_lines: int = 1
    grid: tuple = ()  # (top, bottom) stretches of the tick lines: all but the elision rows


@dataclass(frozen=True)
class LegendEntry:
    style: str
    name: Tex
    x: float
    y: float

    @property
    def node(self) -> str:
        return f"legend-{self.style[3:]}"


@dataclass(frozen=True)
class TimelineDrawing:
    title: Tex
    width: float  # the plot area (cm); lane labels sit left of 0
    panels: tuple
    legend: tuple  # LegendEntry, rows above the first panel
    axis_label: Tex
    note: Tex = Tex("")
    label_width: float = 2.0  # cm left of the plot area reserved for lane labels
    legend_top: float = 0.0

    @property
    def styles_used(self) -> set:
        """The box styles some box draws with (a style only some figures use is defined only there)."""
        return {b.style for p in self.panels for b in p.boxes}

    @property
    def text_width(self) -> float:
        """Width for wrapped text (title, note): labels and plot area together, less the nodes' padding."""
        return self.label_width + self.width - TEXT_PAD

    def names(self) -> list[str]:
        out = ["title"] + [entry.node for entry in self.legend]
        for panel in self.panels:
            out.append(f"panel-{panel.name}")
            out += [f"{lane.name}-label" for lane in panel.lanes]
        out.append("axis-label")
        if self.note:
            out.append("note")
        return out


def _tick_text(value: float, step: float) -> Tex:
    if step >= 1 and float(step).is_integer():
        return Tex(f"{value:,.0f}")
    return Tex(f"{round(value, 6):g}")


# Text widths are estimated (Latin Modern Sans): about 0.55 em a character on average.
CHAR_CM = {"scriptsize": 0.125, "footnotesize": 0.145, "small": 0.155}
BORDER_CM = 2 * 8 / 28.45  # the standalone border on each side
LABEL_GAP = 0.15  # lane label to plot area
TEXT_PAD = 0.25  # what the wrapped text nodes (title, panel titles, note) lose to their padding
NARROW_CM = 11.0  # at or below this target width lanes, labels and legend are compacted
NARROW_LABEL_CM = 1.6  # the longest lane label a narrow figure keeps
NARROW_LANES = 5  # workers drawn at most when narrow (first ones, ellipsis, last)


def _units(text: str) -> int:
    """Character widths in average Latin characters: CJK characters count two."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def text_cm(text: str, size: str = "footnotesize") -> float:
    return CHAR_CM[size] * _units(text)


def _fits(text: str, width_cm: float) -> bool:
    return width_cm >= text_cm(text, "scriptsize") + 0.12


def _short_label(lane: Lane, words: Words) -> str:
    """The compact lane label of a narrow figure (W3, PS, PS 2; a stage's label stays). The
    abbreviation is a template of the spec's words: labels are free text, and no rule finds
    the short form of any of them (CJK words have no initials; PS is English usage)."""
    if lane.id.endswith("-comm"):  # named after its compute lane, short where that one is (W1 (comm))
        compute = replace(lane, id=lane.id.removesuffix("-comm"))
        short = _short_label(compute, words)
        return words.comm_lane.replace("{lane}", short) if short != compute.label else lane.label
    if lane.role == "server":  # a single server (ps) has no number: PS {i} gives PS
        return " ".join(words.server_short.replace("{i}", lane.id[2:]).split())
    if lane.role == "worker" and lane.id[1:].isdigit():
        return words.worker_short.replace("{i}", lane.id[1:])
    return lane.label


def tied_label(text: str) -> str:
    """render_label of `text` with its last space outside $...$ math a TeX tie (~), so a title
    that wraps never leaves its last word alone on a line ("steps" over "6–8")."""
    segments = re.split(r"(?<!\\)\$", text)  # even: text, odd: math
    if len(segments) % 2 == 1:  # (an unmatched $: render_label says so)
        for k in range(len(segments) - 1, -1, -2):  # the text segments, the last first
            seg = segments[k] if k < len(segments) - 1 else segments[k].rstrip()  # a word after the space
            at = seg.rfind(" ")
            if at > 0 or (at == 0 and k > 0):  # ... and a word (or math) before it
                head = "$".join(segments[:k] + [segments[k][:at]])
                tail = "$".join([segments[k][at + 1:]] + segments[k + 1:])
                return render_label(head) + "~" + render_label(tail)
    return render_label(text)


def _hidden(lane: Lane) -> int:
    """How many processes a lane stands for (a gap lane counts the lanes it elides)."""
    return max(1, lane.hidden) if lane.role == "gap" else 1


def fit_lanes(lanes: tuple, max_workers: int, words: Words | None = None) -> tuple:
    """At most `max_workers` worker/stage lanes: the first ones, one gap lane counting the rest, the last.
    A rank's communication lane (w1-comm) stays with its compute lane: ranks are kept or hidden
    whole, the gap counts ranks, and a gap that would stand for one rank only draws it instead."""
    words = words or Words()
    members = [k for k, lane in enumerate(lanes) if lane.role != "server"]
    if len(members) <= max_workers:
        return lanes
    ranks: list[list[int]] = []  # member lanes by rank: its compute lane, then its comm lane
    for k in members:
        if ranks and lanes[k].id == lanes[ranks[-1][0]].id + "-comm":
            ranks[-1].append(k)
        else:
            ranks.append([k])
    room = max_workers - 1 - len(ranks[-1])  # lanes left beside the gap and the last rank
    first = 0
    while first < len(ranks) - 1 and len(ranks[first]) <= room:
        room -= len(ranks[first])
        first += 1
    hidden_ranks = ranks[first:-1]
    if len(hidden_ranks) < 2 and all(lanes[r[0]].role != "gap" for r in hidden_ranks):
        return lanes  # a gap standing for one rank would say less than the rank's own lanes
    keep = {k for rank in ranks[:first] + ranks[-1:] for k in rank}
    hidden = sum(_hidden(lanes[rank[0]]) for rank in hidden_ranks)
    out, gap_done = [], False
    for k, lane in enumerate(lanes):
        if k in keep or k not in members:
            out.append(lane)
        elif not gap_done:
            stages = any(lanes[m].role == "stage" for m in members)
            text = (words.more_stages if stages else words.more_workers).replace("{n}", f"{hidden:,}")
            out.append(Lane(f"{lane.id.split('-')[0]}-more", text, (), role="gap", hidden=hidden))
            gap_done = True
    return tuple(out)


def _legend(kinds_used: list, phases: dict, names: dict, width: float, x0: float) -> tuple:
    """Legend entries in rows that fit `width` (cm from x0), the first row on top."""
    entries, rows, x = [], [[]], x0
    for style in kinds_used:
        name = phases.get(style) or names[style[3:]]
        need = 0.36 + 0.1 + text_cm(name) + 0.35
        if rows[-1] and x + need > x0 + width:
            rows.append([])
            x = x0
        rows[-1].append((style, name, x))
        x += need
    for r, row in enumerate(rows):
        for style, name, xe in row:
            entries.append(LegendEntry(style, Tex(render_label(name)), xe, 0.42 * (len(rows) - 1 - r)))
    return tuple(entries)


LETTER_KINDS = ("fetch", "push")  # boxes that name their phase with a letter (F, P), as seed 001 draws them

# The order all-reduce phases run in, so a window that starts mid-step still gives the
# first phase the plain fill and the legend lists them in order.
PHASE_ORDER = ("reduce-scatter", "all-gather", "reduce", "broadcast", "intra-host reduce", "inter-host all-reduce",
               "intra-host broadcast")


def _phase_styles(panels) -> dict:
    names = {b.phase for p in panels for lane in p.lanes for b in lane.boxes if b.kind == PHASED_BOX and b.phase}
    ordered = sorted(names, key=lambda n: (PHASE_ORDER.index(n) if n in PHASE_ORDER else len(PHASE_ORDER), n))
    styles = ("tl-allreduce", "tl-allreduce-b", "tl-allreduce-c")
    return {name: styles[min(k, 2)] for k, name in enumerate(ordered)}


def _as_tex(text: str) -> Tex:
    """Plain text escaped; Tex (a spec's label the caller already made safe) as it is."""
    return text if isinstance(text, Tex) else Tex(escape_text(text))


def _box_words(box: Box, words: Words) -> tuple[str, str]:
    """(plain, TeX) of the text inside a box. A merged run counts its boxes under the legend's
    name; an English word (fwd, opt, Update, a phase's full name) gives way to the legend's
    name where the spec set one, so the boxes read like the legend. Letters (F, P, U),
    numbers and phase abbreviations (RS) stay."""
    name = words.legend[box.kind]
    if box.count > 1:
        return f"{name} ×{box.count:,}", render_label(name) + escape_text(f" ×{box.count:,}")
    if box.kind == PHASED_BOX and box.phase and box.label == box.phase:
        name = words.phase(box.phase)
        return name, render_label(name)
    if box.kind != PHASED_BOX and len(box.label) > 1 and box.label.isalpha() and name != KIND_NAMES[box.kind]:
        return name, render_label(name)
    return box.label, escape_text(box.label)


@dataclass(frozen=True)
class _Span:
    """A box's horizontal geometry, before the lanes are stacked."""

    style: str
    x0: float
    x1: float
    text: str  # TeX inside the box ('' when it does not fit)
    thin: bool  # send/recv: a bar through the middle of the lane
    kind: str = ""


def _at_least_hairline(x0: float, x1: float, width: float, keep_end: bool = False) -> tuple[float, float]:
    """A box's edges, at least HAIRLINE_CM apart so a short span stays visible, and inside the
    plot: one at the window's end grows to the left, not past the plot's right edge. With
    `keep_end` (a message, whose end is when its receiver had it) it grows to the left too:
    grown to the right, a push that arrived just before the server's update began was drawn
    ending inside that update."""
    if x1 - x0 >= HAIRLINE_CM:
        return x0, x1
    if keep_end and x1 >= HAIRLINE_CM:
        return x1 - HAIRLINE_CM, x1
    x1 = min(max(x1, x0 + HAIRLINE_CM), width)
    return min(x0, x1 - HAIRLINE_CM), x1


def _event_end(drawn: list, index: int, x0: float, x1: float, start: float, scale: float, width: float) -> float:
    """The right edge of a server update drawn as an event: at least MIN_EVENT_CM wide, over
    the server's idle time (wait boxes give way) but never over its next busy box."""
    busy = [(b.start_ms - start) * scale for b in drawn[index + 1:] if b.kind != "wait"][:1]
    return max(x1, min([x0 + MIN_EVENT_CM, width] + busy))


def _lane_spans(boxes: list, start: float, scale: float, width: float, widen: bool, words: Words,
                phases: dict, shorts: dict) -> list[_Span]:
    """The drawn geometry of one lane's (merged) boxes; records each phase's abbreviation in `shorts`."""
    spans: list[_Span] = []
    covered = float("-inf")  # where the last widened update ends: a wait after it starts there
    for index, box in enumerate(boxes):
        if box.kind not in BOX_KINDS:
            raise DtgenError(f"unknown box kind {box.kind!r} (one of {', '.join(BOX_KINDS)})")
        x0, x1 = (box.start_ms - start) * scale, (box.end_ms - start) * scale
        # A span with no length (one that ends where the window starts, or starts where it
        # ends, once clipped) shows nothing that happened in the window: no box, no letter.
        if x1 - x0 < ZERO_CM:
            continue
        style = f"tl-{box.kind}"
        if box.kind == PHASED_BOX and box.phase:
            style = phases[box.phase]
            if box.label and box.label != box.phase and box.count == 1:
                shorts[box.phase] = box.label
        if box.kind == "wait" and x0 < covered:  # idle time a widened update drew over
            x0 = covered
            if x1 - x0 < 0.005:
                continue
        x0, x1 = _at_least_hairline(x0, x1, width, keep_end=box.kind in ARRIVALS)
        if box.kind == "update" and widen:  # the event a PS figure is about: never a hairline
            x1 = covered = _event_end(boxes, index, x0, x1, start, scale, width)
            if x1 - x0 < MIN_EVENT_CM and spans and spans[-1].kind == "wait":
                # at the plot's end it cannot grow right: it grows left, over the wait before it
                x0 = max(spans[-1].x0, x1 - MIN_EVENT_CM)
                spans[-1] = replace(spans[-1], x1=x0)
                if spans[-1].x1 - spans[-1].x0 < 0.005:
                    spans.pop()
        thin = box.kind in ("send", "recv")  # communication next to compute: a thin bar, the compute reads
        plain, tex = _box_words(box, words)
        fits = bool(plain) and not thin and _fits(plain, x1 - x0)
        spans.append(_Span(style, x0, x1, tex if fits else "", thin, box.kind))
        if fits and box.kind in LETTER_KINDS and box.count == 1 and len(plain) == 1:
            shorts[style] = plain  # a letter in the box: the legend names it
    return spans


def _grid_runs(top: float, bottom: float, gap_tops: list, lane_gap: float) -> tuple:
    """The stretches (top, bottom) a tick's grid line is drawn over: from the panel's top to
    the axis, broken at each elision row so its "1,020 more workers" is not struck through."""
    runs, upper = [], top
    for gap_top in gap_tops:
        runs.append((upper, gap_top + lane_gap))  # down to the foot of the lane above the row
        upper = gap_top - LANE_H - lane_gap  # on from the head of the lane below it
    runs.append((upper, bottom - AXIS_BELOW))
    return tuple((a, b) for a, b in runs if a > b)


def draw_timeline(timeline: Timeline, target_cm: float | None = None, words: Words | None = None) -> TimelineDrawing:
    """Centimetre geometry of a Timeline, laid out for a target total width (None: natural,
    a 12 cm plot area), with the `words` it writes itself (English by default);
    raises when it has too many boxes to compile."""
    count = box_count(timeline)
    if count > MAX_BOXES:
        raise DtgenError(f"timeline has {count:,} boxes; at most {MAX_BOXES:,} can be drawn (window or aggregate it first)")
    words = words or Words()
    narrow = target_cm is not None and target_cm <= NARROW_CM
    panels_in = [replace(p, lanes=fit_lanes(p.lanes, NARROW_LANES, words)) if narrow else p for p in timeline.panels]
    # Narrow: a role's labels are abbreviated (PS, W1) only when one of them is too long to
    # sit beside the lanes; labels that fit (GPU 1, a CJK name) stay as the spec gives them.
    too_long = {lane.role for p in panels_in for lane in p.lanes
                if narrow and lane.role != "gap" and 0.165 * _units(lane.label) > NARROW_LABEL_CM}
    labels = {}
    for panel in panels_in:
        if not panel.id.isalpha():
            raise DtgenError(f"panel id {panel.id!r} must be letters only")
        for lane in panel.lanes:
            labels[(panel.id, lane.id)] = "" if lane.role == "gap" else (
                _short_label(lane, words) if lane.role in too_long else lane.label)
    # lane labels: \footnotesize, wider than average text (capitals, digits), plus the node's padding
    label_width = max([0.165 * _units(text) for text in labels.values()] + [0.6]) + LABEL_GAP + 0.15
    if target_cm is None:
        width_cm = WIDTH_CM
    else:
        width_cm = max(3.0, target_cm - BORDER_CM - label_width - 0.3)  # 0.3: the last tick label's overhang
    start, end = timeline.span()
    if not end > start:
        end = start + 1.0
    scale = width_cm / (end - start)
    unit = timeline.axis_unit_ms or 1.0  # ticks are chosen and labelled in the axis's unit
    step = nice_step((end - start) / unit, max(3, min(6, int(width_cm / 1.3))))
    ticks_ms = [start + k * step * unit for k in range(int((end - start) / unit / step + 1e-9) + 1)]
    phases = _phase_styles(panels_in)  # phase name -> tl-allreduce[-b|-c], the style drawing it
    # phase name -> the abbreviation inside its boxes (RS), fetch/push style -> its letter (F):
    # explained by the legend
    shorts: dict = {}
    spans = {(panel.id, lane.id): _lane_spans(merge_close(lane.boxes, MIN_VISIBLE_CM / scale), start, scale, width_cm,
                                              timeline.widen_events, words, phases, shorts)
             for panel in panels_in for lane in panel.lanes}
    lane_gap = LANE_GAP
    kinds_used = list(dict.fromkeys(span.style for lane in spans.values() for span in lane))
    text_room = label_width + width_cm
    panels, y = [], 0.0
    for panel in panels_in:
        title_units = _units(panel.title) + (_units(panel.note) + 3 if panel.note else 0)
        lines = max(1, math.ceil(CHAR_CM["small"] * title_units / (text_room - TEXT_PAD)))  # as the node wraps it
        # a title that wraps keeps its last two words together ("steps 6–8", never "6–8" alone)
        title = (render_label(panel.title) + f" \\textmd{{({tied_label(panel.note)})}}" if panel.note
                 else tied_label(panel.title))
        y -= 0.45 * (lines - 1)
        top = y
        lanes, boxes, gap_tops = [], [], []
        for lane in panel.lanes:
            name = f"{lane.id}-{panel.id}"
            label = Tex(render_label(lane.label if lane.role == "gap" else labels[(panel.id, lane.id)]))
            lanes.append(DrawnLane(name, label, y - LANE_H / 2, lane.role == "gap"))
            if lane.role == "gap":
                gap_tops.append(y)
            for span in spans[(panel.id, lane.id)]:
                y0, y1 = (y - LANE_H * 0.62, y - LANE_H * 0.38) if span.thin else (y - LANE_H, y)
                boxes.append(DrawnBox(span.style, span.x0, y0, span.x1, y1, Tex(span.text), f"{span.style}-text"))
            y -= LANE_H + lane_gap
        bottom = y + lane_gap
        ticks = tuple(((t - start) * scale, _tick_text((t - start) / unit, step)) for t in ticks_ms)
        panels.append(DrawnPanel(panel.id, Tex(title), top, bottom, tuple(lanes), tuple(boxes), ticks, lines,
                                 _grid_runs(top, bottom, gap_tops, lane_gap)))
        y = bottom - PANEL_GAP
    order = [f"tl-{kind}" for kind in BOX_KINDS]
    kinds_used.sort(key=lambda style: order.index(style) if style in order else order.index("tl-allreduce") + 0.5)
    phase_names = {style: words.phase(phase) + (f" ({shorts[phase]})" if phase in shorts else "")
                   for phase, style in phases.items()}
    phase_names.update({style: f"{words.legend[style[3:]]} ({shorts[style]})" for style in kinds_used
                        if style in shorts and not words.legend[style[3:]].endswith(f"({shorts[style]})")})
    legend = _legend(kinds_used, phase_names, words.legend, text_room, -label_width)
    first = panels[0] if panels else None
    legend_top = (first.top + 0.45 * (first.title_lines - 1) if first else 0.0) + 0.95
    return TimelineDrawing(Tex(render_label(timeline.title)), width_cm, tuple(panels), legend,
                           _as_tex(timeline.axis_label), _as_tex(timeline.note) if timeline.note else Tex(""),
                           label_width, legend_top)
