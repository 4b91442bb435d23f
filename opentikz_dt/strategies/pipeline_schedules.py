"""The pipeline schedules torch.distributed.pipelining ships, as data: their spec names,
torch classes, where each rank's virtual stages (chunks) sit, and each rank's order of
operations. Must not import torch.

One source for the order. For the multi-stage schedules (interleaved 1F1B, looped BFS,
interleaved zero bubble, ZB-V, DualPipeV) torch executes exactly the table its schedule
class computes (`pipeline_order`); `rank_orders` takes that table from torch itself, in a
subprocess (`python -m opentikz_dt.runner.schedule_order`), so the expected timeline and
the simulator draw and simulate what the runner runs, and this package still never
imports torch (figures and validation start fast). A subprocess rather than shipped
tables: the order depends on (p, m, v) with no useful bound (a cluster-scale prediction
asks for p = 64), so shipped tables would either be huge or miss most specs. Without
torch installed these schedules' expected figures and predictions are refused in one
line (`ScheduleOrderError`).

GPipe and 1F1B are single-stage schedules: torch runs them from code
(`PipelineScheduleSingle._step_microbatches`), not from their `pipeline_order` (which is
a picture only, and for 1F1B numbers the last stage's forwards from 1); `single_stage_ops`
is that code's order, checked against a real run's trace (tests/test_pipeline_schedules.py).

An operation is (op, microbatch, stage): op F (forward), B (full backward), I (backward
for the input gradient only) or W (the weight gradient, run later: zero bubble); stage is
the global virtual stage index, 0 .. p·v - 1. DualPipeV's overlapped F+B pairs are listed
as their two parts, in the order torch runs them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True)
class Schedule:
    name: str  # strategy.schedule
    torch_class: str  # in torch.distributed.pipelining.schedules
    printed: str  # as a figure names it
    placement: str  # "one": one stage per rank; "loop": rank r holds r, r+p, ...; "v": r and 2p-1-r
    fixed_v: int | None  # stages per rank the schedule requires (None: strategy.stages_per_rank)
    splits_backward: bool  # B split into I (input gradient) and W (weight gradient)
    paper: str  # where its bubble is stated
    bubble_form: str  # the bubble fraction as that paper gives it (TeX)


SCHEDULES = {s.name: s for s in (
    Schedule("gpipe", "ScheduleGPipe", "GPipe", "one", 1, False, "Huang et al., NeurIPS 2019",
             "$(p-1)/(m+p-1)$"),
    Schedule("1f1b", "Schedule1F1B", "1F1B", "one", 1, False, "Narayanan et al., SOSP 2019",
             "$(p-1)/(m+p-1)$"),
    Schedule("interleaved-1f1b", "ScheduleInterleaved1F1B", "Interleaved 1F1B", "loop", None, False,
             "Narayanan et al., SC 2021", "$(p-1)/(vm+p-1)$"),
    Schedule("looped-bfs", "ScheduleLoopedBFS", "Looped BFS", "loop", None, False,
             "Lamy-Poirier, 2023", "$(p-1)/(vm+p-1)$"),
    Schedule("interleaved-zero-bubble", "ScheduleInterleavedZeroBubble", "Interleaved ZB", "loop", None, True,
             "Qi et al., ICLR 2024", "below 1F1B's"),
    Schedule("zbv-zero-bubble", "ScheduleZBVZeroBubble", "ZB-V", "v", 2, True,
             "Qi et al., ICLR 2024", "below 1F1B's"),
    Schedule("dualpipev", "ScheduleDualPipeV", "DualPipeV", "v", 2, True,
             "DeepSeek-AI, 2024 (DeepSeek-V3)", "below 1F1B's"),
)}
DEFAULT_V = 2  # stages per rank of the looped schedules when strategy.stages_per_rank is not set


class ScheduleOrderError(Exception):
    """The order of a schedule could not be had from torch (not installed, or refused the shape)."""


def schedule_of(name: str) -> Schedule:
    return SCHEDULES[name]


def stages_per_rank(strategy) -> int:
    """v: the virtual stages (chunks) each rank holds under the spec's schedule."""
    s = SCHEDULES[strategy.schedule]
    if s.fixed_v is not None:
        return s.fixed_v
    return int(strategy.options.get("stages_per_rank", DEFAULT_V))


def rank_stages(schedule: str, rank: int, ranks: int, v: int) -> list[int]:
    """The global stage indices rank `rank` holds, its chunk 0 first."""
    placement = SCHEDULES[schedule].placement
    if placement == "one":
        return [rank]
    if placement == "v":
        return [rank, 2 * ranks - 1 - rank]
    return [rank + k * ranks for k in range(v)]


def stage_rank(schedule: str, stage: int, ranks: int) -> int:
    placement = SCHEDULES[schedule].placement
    if placement == "v" and stage >= ranks:
        return 2 * ranks - 1 - stage
    return stage % ranks


def single_stage_ops(schedule: str, stage: int, stages: int, micro: int) -> list[tuple[str, int]]:
    """GPipe: all forwards, then all backwards. 1F1B: min(stages - stage - 1, micro)
    forwards to warm up, then one forward and one backward in turn, then the backwards
    left. ("F" | "B", microbatch), as torch's PipelineScheduleSingle runs them."""
    if schedule == "gpipe":
        return [("F", m) for m in range(micro)] + [("B", m) for m in range(micro)]
    warmup = min(stages - stage - 1, micro)
    ops = [("F", m) for m in range(warmup)]
    for i in range(micro - warmup):
        ops += [("F", warmup + i), ("B", i)]
    return ops + [("B", m) for m in range(micro - warmup, micro)]


def rank_orders(schedule: str, ranks: int, micro: int, v: int = 1) -> tuple:
    """Each rank's operations in the order torch runs them: ((op, mb, stage), ...) per rank."""
    if SCHEDULES[schedule].placement == "one":
        return tuple(tuple((op, m, r) for op, m in single_stage_ops(schedule, r, ranks, micro)) for r in range(ranks))
    return _torch_orders(schedule, ranks, micro, v)


@lru_cache(maxsize=64)
def _torch_orders(schedule: str, ranks: int, micro: int, v: int) -> tuple:
    """The table from torch's schedule class, computed in a subprocess (see the module doc)."""
    cmd = [sys.executable, "-m", "opentikz_dt.runner.schedule_order", schedule, str(ranks), str(micro), str(v)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ScheduleOrderError(f"the order of schedule {schedule} could not be had from torch: {e}") from None
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        raise ScheduleOrderError(lines[-1] if lines else f"schedule_order exited {done.returncode}")
    return tuple(tuple((op, int(mb), int(st)) for op, mb, st in rank) for rank in json.loads(done.stdout))


# ---------------------------------------------------------------- playing an order


@dataclass(frozen=True)
class Played:
    rank: int
    op: str
    mb: int
    stage: int
    free: float  # when the rank was free to start it
    ready: float  # when its input (activation, gradient) had arrived
    start: float
    end: float


def play(orders, ranks: int, stages: int, schedule: str, duration, message, start=None) -> list[Played]:
    """Run each rank's order as early as its dependencies allow: F(s, m) after F(s-1, m),
    B or I (s, m) after B or I (s+1, m) (the last stage: after its own F), W after its I;
    a dependency from another rank adds `message(op, from_stage, to_stage)`, one on the
    same rank (a V's turn, a loop's wrap) none. `duration(rank, op, stage)` is the compute
    time. Returns the operations with their times, in the order they were placed."""
    start = list(start) if start is not None else [0.0] * ranks
    free, pos, end, out = list(start), [0] * ranks, {}, []
    left = sum(len(o) for o in orders)
    while left:
        progressed = False
        for r in range(ranks):
            if pos[r] >= len(orders[r]):
                continue
            op, mb, s = orders[r][pos[r]]
            if op == "F":
                src = s - 1 if s > 0 else None
                dep = start[r] if src is None else end.get(("F", src, mb))
            elif op == "W":
                src, dep = None, end.get(("I", s, mb))
            elif s == stages - 1:
                src, dep = None, end.get(("F", s, mb))
            else:
                src = s + 1
                dep = end.get(("B", src, mb), end.get(("I", src, mb)))
            if dep is None:
                continue
            if src is not None and stage_rank(schedule, src, ranks) != r:
                dep += message(op, src, s)
            begin = max(free[r], dep)
            done = begin + duration(r, op, s)
            out.append(Played(r, op, mb, s, free[r], dep, begin, done))
            end[(op, s, mb)] = free[r] = done
            pos[r] += 1
            left -= 1
            progressed = True
        if not progressed:
            stuck = {r: orders[r][pos[r]] for r in range(ranks) if pos[r] < len(orders[r])}
            raise ScheduleOrderError(f"pipeline schedule '{schedule}' deadlocked at {stuck}")
    return out


# ---------------------------------------------------------------- the bubble papers state


def reference_bubble(schedule: str, ranks: int, micro: int, v: int) -> tuple[float, str, str]:
    """(fraction, TeX form, the numbers) of the bubble as the schedule's paper states it for
    balanced stages: GPipe and 1F1B (p-1)/(m+p-1) of each rank's step; interleaved 1F1B
    and looped BFS (p-1)/(vm+p-1) (Megatron's (1/v)(p-1)/m of the ideal time, as a share
    of the whole step); the zero-bubble papers (Qi et al.; DeepSeek-V3's Table 2) give
    their bubbles in the F, B and W times, not as a share in p and m: their reference is
    1F1B's, which they stay below (tests/test_pipeline_schedules.py)."""
    s = SCHEDULES[schedule]
    if s.splits_backward:
        return (ranks - 1) / (micro + ranks - 1), "1F1B's $(p-1)/(m+p-1)$", f"1F1B's {ranks - 1}/{micro + ranks - 1}"
    vm = micro * (v if s.placement != "one" else 1)
    return (ranks - 1) / (vm + ranks - 1), s.bubble_form, f"{ranks - 1}/{vm + ranks - 1}"


def op_label(op: str, mb: int, chunk: int, chunks: int) -> str:
    """A box's text: the microbatch (1-based), its chunk as a letter where a rank holds
    several (1a, 1b); a weight-gradient box is told by its own style (wgrad)."""
    return f"{mb + 1}{'abcdefghijklmnop'[chunk] if chunks > 1 else ''}"


def in_flight(schedule: str, microbatches: int, stages: int, stage: int) -> int:
    """Microbatches whose activations stage `stage` (0-based) holds at its peak: GPipe
    all of them (every forward before any backward); 1F1B its warm-up forwards plus one,
    min(m, p - stage): p on the first stage."""
    if schedule == "gpipe" or stages <= 1:
        return microbatches
    return min(microbatches, stages - stage)
