"""Numbers of a profiled run: the window of steps drawn, each group's bytes per step, the
communication table's rows, and each rank's compute / communication / idle split.

Bandwidths as nccl-tests define them (docs/PERFORMANCE.md of nccl-tests): algbw = size /
time, with size the collective's whole buffer (kineto.nccl_tests_size); busbw = algbw x
2(n-1)/n for an all-reduce, x (n-1)/n for an all-gather or reduce-scatter (and all-to-all),
x 1 for a broadcast, reduce, send or recv; n is the group's size. Times are each call's
measured duration on the rank that ran it (the GPU kernel's where there is one), averaged
over the traced ranks of the group. Must not import torch.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from ..errors import UsageError
from .profile_set import ProfileSet

BUS_FACTORS = {"all-reduce": lambda n: 2 * (n - 1) / n, "all-gather": lambda n: (n - 1) / n,
               "reduce-scatter": lambda n: (n - 1) / n, "all-to-all": lambda n: (n - 1) / n}
WINDOW_STEPS = 3  # steps a default window shows


def bus_factor(kind: str, n: int) -> float:
    """nccl-tests' busbw / algbw for a collective of kind over n ranks."""
    rule = BUS_FACTORS.get(kind)
    return rule(n) if rule is not None and n > 0 else 1.0


@dataclass(frozen=True)
class StepWindow:
    first: int
    last: int
    t0: float  # µs
    t1: float
    chosen: str  # default | requested | whole

    @property
    def label(self) -> str:
        if self.chosen == "whole":
            return "the whole profiled window"
        return f"step {self.first}" if self.first == self.last else f"steps {self.first}\u2013{self.last}"


def step_numbers(pset: ProfileSet) -> list:
    return sorted({n for p in pset.ranks for n, _, _ in p.steps})


def select_steps(pset: ProfileSet, steps: tuple | None) -> StepWindow:
    """The steps drawn: as asked (--steps), else WINDOW_STEPS consecutive steps whose mean
    time is nearest the median step time (the first profiled step is often a warm-up)."""
    numbers = step_numbers(pset)
    if pset.whole_window:
        return StepWindow(0, 0, *_bounds(pset, 0, 0), "whole")
    if steps is not None:
        first = steps[0] if steps[0] is not None else numbers[0]
        last = steps[1] if steps[1] is not None else numbers[-1]
        inside = [n for n in numbers if first <= n <= last]
        if not inside:
            raise UsageError(f"--steps {first}:{last}: the traces hold steps {numbers[0]}\u2013{numbers[-1]} "
                             f"(ProfilerStep#N)")
        return StepWindow(inside[0], inside[-1], *_bounds(pset, inside[0], inside[-1]), "requested")
    if len(numbers) <= WINDOW_STEPS:
        return StepWindow(numbers[0], numbers[-1], *_bounds(pset, numbers[0], numbers[-1]), "default")
    times = {n: statistics.mean(e - s for p in pset.ranks for m, s, e in p.steps if m == n) for n in numbers}
    median = statistics.median(times.values())
    best = min(range(len(numbers) - WINDOW_STEPS + 1),
               key=lambda i: (abs(statistics.mean(times[n] for n in numbers[i:i + WINDOW_STEPS]) - median), i))
    chosen = numbers[best:best + WINDOW_STEPS]
    return StepWindow(chosen[0], chosen[-1], *_bounds(pset, chosen[0], chosen[-1]), "default")


def _bounds(pset: ProfileSet, first: int, last: int) -> tuple:
    starts = [s for p in pset.ranks for n, s, _ in p.steps if n == first]
    ends = [e for p in pset.ranks for n, _, e in p.steps if n == last]
    return min(starts), max(ends)


def _in_steps(rank_steps: list, start: float) -> int | None:
    for n, s, e in rank_steps:
        if s <= start < e:
            return n
    return None


@dataclass(frozen=True)
class CommRow:
    kind: str
    group: tuple
    dim: str
    calls_per_step: float  # per rank
    size: float | None  # bytes per call (nccl-tests' size), mean
    time_us: float  # per call, mean
    algbw: float | None  # bytes/s
    busbw: float | None

    @property
    def bytes_per_step(self) -> float | None:
        return None if self.size is None else self.size * self.calls_per_step


def comm_rows(pset: ProfileSet) -> list:
    """One row per (collective kind, group), over every traced rank of the group and every
    profiled step (calls outside any step count only for a whole-window profile)."""
    acc: dict = {}  # (kind, group) -> [calls, sizes, times, ranks]
    steps_of = {p.rank: max(1, len(p.steps)) for p in pset.ranks}
    for p in pset.ranks:
        for c in p.collectives:
            if _in_steps(p.steps, c.start) is None:
                continue
            item = acc.setdefault((c.kind, c.group), [0, [], [], set()])
            item[0] += 1
            if c.size is not None:
                item[1].append(c.size)
            item[2].append(c.end - c.start)
            item[3].add(p.rank)
    rows = []
    for (kind, group), (calls, sizes, times, ranks) in acc.items():
        per_step = calls / sum(steps_of[r] for r in ranks)
        size = statistics.mean(sizes) if sizes else None
        time_us = statistics.mean(times)
        algbw = size / (time_us * 1e-6) if size is not None and time_us > 0 else None
        busbw = algbw * bus_factor(kind, len(group) or 1) if algbw is not None else None
        rows.append(CommRow(kind, group, pset.groups.get(group, ""), per_step, size, time_us, algbw, busbw))
    order = ("all-reduce", "reduce-scatter", "all-gather", "broadcast", "reduce", "all-to-all", "send", "recv")
    rows.sort(key=lambda r: (order.index(r.kind) if r.kind in order else len(order), r.kind, r.dim, r.group))
    return rows


def group_bytes(pset: ProfileSet) -> dict:
    """ranks -> bytes per step each member sends into the group's collectives (nccl-tests size summed, per rank)."""
    out: dict = {}
    for row in comm_rows(pset):
        if row.bytes_per_step is not None and row.kind != "recv":
            out[row.group] = out.get(row.group, 0.0) + row.bytes_per_step
    return out


@dataclass(frozen=True)
class Split:
    """Of a rank's time in the drawn steps: computing, communicating with nothing to compute
    (exposed communication), and idle (neither), in µs; `overlapped` is communication hidden
    under compute."""

    compute: float
    exposed_comm: float
    idle: float
    overlapped: float

    @property
    def total(self) -> float:
        return self.compute + self.exposed_comm + self.idle


def _union(intervals: list) -> list:
    out = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def _length(intervals: list) -> float:
    return sum(e - s for s, e in intervals)


def _intersect(a: list, b: list) -> list:
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        s, e = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if s < e:
            out.append([s, e])
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def rank_split(pset: ProfileSet, rank_profile, t0: float, t1: float) -> Split:
    """Compute / exposed communication / idle of one rank over [t0, t1] within its steps.

    On a GPU the split is the device's, as HTA's temporal breakdown counts it: compute
    kernels vs NCCL kernels vs no kernel. On a CPU it is the main thread's: its compute
    phases vs collectives (on any thread) vs nothing."""
    steps = _union([[max(s, t0), min(e, t1)] for _, s, e in rank_profile.steps if e > t0 and s < t1])
    if rank_profile.kernels:
        compute = [[k.start, k.end] for k in rank_profile.kernels if k.kind != "comm"]
        comm = [[k.start, k.end] for k in rank_profile.kernels if k.kind == "comm"]
    else:
        compute = [[p.start, p.end] for p in rank_profile.phases if p.kind in ("forward", "backward", "optimizer")]
        comm = [[c.start, c.end] for c in rank_profile.collectives]
        comm += [[p.start, p.end] for p in rank_profile.phases if p.kind in ("comm", "wait", "send", "recv")]
    compute = _intersect(_union(compute), steps)
    comm = _intersect(_union(comm), steps)
    busy = _union(compute + comm)
    total = _length(steps)
    overlapped = _length(_intersect(compute, comm))
    return Split(_length(compute), _length(comm) - overlapped, total - _length(busy), overlapped)
