"""Which stretch of a run a figure shows, and how many boxes it may draw.

A Window is a range of steps (both ends included) and the time interval they cover.
By default it is a representative stretch: after warm-up, the consecutive steps whose
mean duration is closest to the run's median step time. `bound_boxes` keeps the drawn
objects of a lane under a budget however many spans fall in the window (FIGURES.md:
TeX fails past about 10,000 fills). Must not import torch.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass
from typing import NamedTuple

from ..errors import TraceError, UsageError
from .trace import Trace

MAX_BOXES = 2400  # whole figure; ~10,000 fills is TeX's limit and compile time grows with it
MAX_BINS = 120  # time bins of an aggregated lane: 1 mm each on the 12 cm axis
_WORKER = re.compile(r"^w[1-9][0-9]*$")
_STEPS = re.compile(r"^\s*(\d*)\s*(?::\s*(\d*)\s*)?$")


class StepsOptionError(UsageError):
    """A --steps value that is not FIRST:LAST."""


@dataclass(frozen=True)
class Window:
    first: int  # step, included
    last: int  # step, included
    t0: float  # µs on the run's clock
    t1: float
    chosen: str  # "default" (representative) or "requested"
    reference: str  # "all workers" (sync) or the worker whose steps bound the window (async)

    @property
    def numbers(self) -> str:
        """The steps drawn, as numbers: 5, or 5–7."""
        return f"{self.first}" if self.first == self.last else f"{self.first}\u2013{self.last}"

    @property
    def label(self) -> str:
        return f"step {self.numbers}" if self.first == self.last else f"steps {self.numbers}"


def parse_steps(text: str | None) -> tuple:
    """'10:14' -> (10, 14), '12' -> (12, 12), '10:' -> (10, None), ':14' -> (None, 14), None -> None."""
    if text is None:
        return None
    match = _STEPS.match(text)
    if not match or (not match.group(1) and not match.group(2) and ":" not in text):
        raise StepsOptionError(f"--steps {text!r}: expected FIRST:LAST, both included (e.g. 10:14), or one step (12)")
    first = int(match.group(1)) if match.group(1) else None
    if ":" not in text:
        return first, first
    last = int(match.group(2)) if match.group(2) else None
    if first is not None and last is not None and last < first:
        raise StepsOptionError(f"--steps {text!r}: the last step comes before the first")
    return first, last


def worker_ranks(trace: Trace) -> list[int]:
    ranks = [r for r, ident in trace.ids.items() if _WORKER.match(ident)]
    return sorted(ranks) or trace.ranks


def step_intervals(trace: Trace, ranks: list[int]) -> dict:
    """step -> (start, end, ranks seen) over the given ranks, in µs."""
    wanted = set(ranks)
    out: dict = {}
    for (rank, step), (start, end, _) in trace.extents.items():
        if rank not in wanted:
            continue
        cur = out.get(step)
        out[step] = (start, end, 1) if cur is None else (min(cur[0], start), max(cur[1], end), cur[2] + 1)
    return out


def spans_in(trace: Trace, window: Window) -> dict:
    """rank -> about how many spans the window holds (counted per step, so an upper bound)."""
    out: dict = {}
    for (rank, _), (start, end, count) in trace.extents.items():
        if end >= window.t0 and start <= window.t1:
            out[rank] = out.get(rank, 0) + count
    return out


def select_window(trace: Trace, steps: tuple | None = None, width: int = 3, asynchronous: bool = False) -> Window:
    """The window to draw: the requested steps, or a representative stretch of `width` steps."""
    workers = worker_ranks(trace)
    # Async workers drift apart, so their step numbers do not line up in time: the first
    # worker's steps bound the window and every rank is drawn over that interval.
    ranks = workers[:1] if asynchronous else workers
    reference = trace.ids.get(ranks[0], "w1") if asynchronous else "all workers"
    intervals = step_intervals(trace, ranks)
    if not intervals:
        raise TraceError(f"{trace.source}: the trace has no worker steps")
    have = sorted(intervals)
    if steps is not None:
        first = have[0] if steps[0] is None else steps[0]
        last = have[-1] if steps[1] is None else steps[1]
        inside = [s for s in have if first <= s <= last]
        if not inside:
            raise TraceError(f"steps {first}:{last} are not in the trace (it has steps {have[0]} to {have[-1]})")
        return _window(intervals, inside[0], inside[-1], "requested", reference)
    complete = [s for s in have if intervals[s][2] == len(ranks)] or have
    if trace.ended_early and len(complete) > 1:
        complete = complete[:-1]  # the last step before a crash may have been cut off on some lane
    warm = max(1, len(complete) // 10) if len(complete) > width + 1 else 0
    candidates = complete[warm:] or complete
    durations = {s: intervals[s][1] - intervals[s][0] for s in candidates}
    median = statistics.median(durations.values())
    # A sampled trace (trace.sample_every > 1) has no consecutive steps: fall back to fewer.
    for size in range(max(1, min(width, len(candidates))), 0, -1):
        best, best_cost = None, None
        for index in range(len(candidates) - size + 1):
            run = candidates[index:index + size]
            if run[-1] - run[0] != size - 1:
                continue  # steps missing in between: not consecutive
            cost = abs(sum(durations[s] for s in run) / size - median)
            if best_cost is None or cost < best_cost:
                best, best_cost = run[0], cost
        if best is not None:
            return _window(intervals, best, best + size - 1, "default", reference)
    raise TraceError(f"{trace.source}: no step to draw")  # unreachable: size 1 always matches


def _window(intervals: dict, first: int, last: int, chosen: str, reference: str) -> Window:
    inside = [intervals[s] for s in intervals if first <= s <= last]
    return Window(first, last, min(i[0] for i in inside), max(i[1] for i in inside), chosen, reference)


class Cell(NamedTuple):
    """A drawable box of one lane: [start, end) µs, its kind, and how many spans it stands for."""

    start: float
    end: float
    kind: str
    count: int = 1  # spans it stands for (0: a derived box, such as a pipeline bubble)
    label: str = ""  # kept only while the cell is one span
    phase: str = ""  # a collective's phase (its fill), kept even where its label is not


def bound_boxes(cells: list, t0: float, t1: float, budget: int) -> tuple:
    """At most `budget` cells for one lane, and whether any were merged.

    Under budget the cells are returned as they are (exact). Over it, touching cells of
    one kind are joined first; if that is not enough the lane is cut into equal bins and
    each bin is drawn as its time shares: one segment per kind, as wide as the time
    that kind took in the bin, in order of first appearance (a utilisation strip).
    """
    if len(cells) <= budget:
        return cells, False
    gap = (t1 - t0) / (budget * 4)
    joined = _join(cells, gap)
    if len(joined) <= budget:
        return joined, True
    kinds = list(dict.fromkeys((c.kind, c.phase) for c in cells))  # a collective's phases keep their fills
    bins = max(1, min(MAX_BINS, budget // len(kinds)))
    width = (t1 - t0) / bins
    fill = [dict.fromkeys(kinds, 0.0) for _ in range(bins)]
    for cell in cells:
        a = max(0, min(bins - 1, int((cell.start - t0) / width)))
        b = max(0, min(bins - 1, int((cell.end - t0) / width)))
        for index in range(a, b + 1):
            lo = max(cell.start, t0 + index * width)
            hi = min(cell.end, t0 + (index + 1) * width)
            if hi > lo:
                fill[index][(cell.kind, cell.phase)] += hi - lo
    strips = []
    for index, shares in enumerate(fill):
        x = t0 + index * width
        for kind, phase in kinds:
            if shares[(kind, phase)] > 0:
                strips.append(Cell(x, x + shares[(kind, phase)], kind, 1, phase=phase))
                x += shares[(kind, phase)]
    return _join(strips, 0.0), True


def _join(cells: list, gap: float) -> list:
    out: list = []
    for cell in cells:
        if out and out[-1].kind == cell.kind and out[-1].phase == cell.phase and cell.start - out[-1].end <= gap:
            prev = out[-1]
            out[-1] = Cell(prev.start, max(prev.end, cell.end), prev.kind, prev.count + cell.count, phase=prev.phase)
        else:
            out.append(cell)
    return out
