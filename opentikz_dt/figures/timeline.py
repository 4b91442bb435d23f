"""The one drawable timeline model, shared by the expected schedule and measured traces.

    Timeline(title, panels=[Panel(id, title, lanes=[Lane(id, label, role, boxes=[
        Box(start_ms, end_ms, kind, label)])], note)], start_ms, end_ms, note)

- Time is in milliseconds on one axis for every panel, starting at `start_ms` (0 = the
  start of the window: the first step for a schedule, the run's epoch for a trace).
- A Box is one span on one lane. `kind` is a trace-event name of
  docs/dev/runner-interface.md: fetch, forward, backward, slowdown, optimizer, update,
  push, allreduce, gossip, send, recv, wait. `label` is short plain text drawn inside
  the box when it fits ("F", "3", "reduce-scatter"); it is escaped when drawn.
- A Lane is one process (its id: w1, ps, ps2, ...; role worker | server | stage) or,
  with role "gap", the ellipsis standing for elided lanes (no boxes; id w4-more: the
  first hidden lane's id plus "-more").
- A Panel is one scenario drawn on the shared axis (sync and async side by side).
Nothing here knows about specs: schedule.py builds Timelines from a spec, and a trace
reader can build them from trace.json the same way.

draw_timeline turns a Timeline into centimetre coordinates for templates/timeline.tex.j2,
merging boxes too thin to see and refusing more than MAX_BOXES (TeX's limits: about
10,000 fills compile), so callers window long runs with `window`. Must not import torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from ..errors import DtgenError
from ..texsafe import escape_text, render_label
from .model import Tex
from .names import BOX_KINDS

MAX_BOXES = 4000
WIDTH_CM = 12.0
LANE_H = 0.46
LANE_GAP = 0.14
PANEL_GAP = 1.35
MIN_VISIBLE_CM = 0.03  # boxes closer than this merge: the eye cannot tell them apart

KIND_NAMES = {
    "fetch": "fetch", "forward": "forward", "backward": "backward", "slowdown": "straggler delay",
    "optimizer": "optimizer step", "update": "server update", "push": "push", "allreduce": "all-reduce",
    "gossip": "gossip", "send": "send", "recv": "recv", "wait": "idle / wait",
}


@dataclass(frozen=True)
class Box:
    start_ms: float
    end_ms: float
    kind: str
    label: str = ""


@dataclass(frozen=True)
class Lane:
    id: str
    label: str
    boxes: tuple = ()
    role: str = "worker"  # worker | server | stage | gap


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
    less than gap_ms apart); the merged box's label counts them."""
    out: list[Box] = []
    runs: list[int] = []
    thin = 3 * gap_ms
    for box in sorted(boxes, key=lambda b: (b.start_ms, b.end_ms)):
        if (out and out[-1].kind == box.kind and box.start_ms - out[-1].end_ms < gap_ms
                and box.end_ms - box.start_ms < thin and (runs[-1] > 1 or out[-1].end_ms - out[-1].start_ms < thin)):
            runs[-1] += 1
            out[-1] = Box(out[-1].start_ms, max(out[-1].end_ms, box.end_ms), box.kind,
                          f"{KIND_NAMES[box.kind]} ×{runs[-1]:,}")
        else:
            out.append(box)
            runs.append(1)
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
    note: Tex = Tex("")


@dataclass(frozen=True)
class TimelineDrawing:
    title: Tex
    width: float
    panels: tuple
    legend: tuple  # (style, Tex name)
    axis_label: Tex
    note: Tex = Tex("")
    names_: tuple = field(default=())

    def names(self) -> list[str]:
        out = ["title"] + [f"legend-{style[3:]}" for style, _ in self.legend]
        for panel in self.panels:
            out.append(f"panel-{panel.name}")
            out += [f"{lane.name}-label" for lane in panel.lanes]
            if panel.note:
                out.append(f"panel-{panel.name}-note")
        out.append("axis-label")
        if self.note:
            out.append("note")
        return out


def _tick_text(value: float, step: float) -> Tex:
    if step >= 1 and float(step).is_integer():
        return Tex(f"{value:,.0f}")
    return Tex(f"{round(value, 6):g}")


def _fits(text: str, width_cm: float) -> bool:
    return width_cm >= 0.13 * len(text) + 0.12


def draw_timeline(timeline: Timeline, width_cm: float = WIDTH_CM) -> TimelineDrawing:
    """Centimetre geometry of a Timeline; raises when it has too many boxes to compile."""
    count = box_count(timeline)
    if count > MAX_BOXES:
        raise DtgenError(f"timeline has {count:,} boxes; at most {MAX_BOXES:,} can be drawn (window or aggregate it first)")
    start, end = timeline.span()
    if not end > start:
        end = start + 1.0
    scale = width_cm / (end - start)
    gap_ms = MIN_VISIBLE_CM / scale
    step = nice_step(end - start)
    ticks_ms = [start + k * step for k in range(int((end - start) / step + 1e-9) + 1)]
    kinds_used: list[str] = []
    panels, y = [], 0.0
    for panel in timeline.panels:
        if not panel.id.isalpha():
            raise DtgenError(f"panel id {panel.id!r} must be letters only")
        top = y
        lanes, boxes = [], []
        for lane in panel.lanes:
            yc = y - LANE_H / 2
            name = f"{lane.id}-{panel.id}"
            lanes.append(DrawnLane(name, Tex(render_label(lane.label)), yc, lane.role == "gap"))
            for box in merge_close(lane.boxes, gap_ms):
                if box.kind not in BOX_KINDS:
                    raise DtgenError(f"unknown box kind {box.kind!r} (one of {', '.join(BOX_KINDS)})")
                if box.kind not in kinds_used:
                    kinds_used.append(box.kind)
                x0, x1 = (box.start_ms - start) * scale, (box.end_ms - start) * scale
                x1 = max(x1, x0 + 0.01)
                text = escape_text(box.label) if box.label and _fits(box.label, x1 - x0) else ""
                boxes.append(DrawnBox(f"tl-{box.kind}", x0, y - LANE_H, x1, y, Tex(text)))
            y -= LANE_H + LANE_GAP
        bottom = y + LANE_GAP
        ticks = tuple(((t - start) * scale, _tick_text(t - start, step)) for t in ticks_ms)
        panels.append(DrawnPanel(panel.id, Tex(render_label(panel.title)), top, bottom, tuple(lanes), tuple(boxes),
                                 ticks, Tex(escape_text(panel.note)) if panel.note else Tex("")))
        y = bottom - PANEL_GAP
    legend = tuple((f"tl-{kind}", Tex(KIND_NAMES[kind])) for kind in BOX_KINDS if kind in kinds_used)
    return TimelineDrawing(Tex(render_label(timeline.title)), width_cm, tuple(panels), legend,
                           Tex(escape_text(timeline.axis_label)),
                           Tex(escape_text(timeline.note)) if timeline.note else Tex(""))
