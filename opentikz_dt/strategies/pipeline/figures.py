"""Figures of pipeline parallelism: the stages left to right, the expected GPipe or 1F1B
schedule with its bubble, and lanes named after the stages. Must not import torch."""

from __future__ import annotations

from ...errors import DtgenError
from .strategy import stage_ops
from ...figures.schedule import Sim, one_panel
from ...figures.spacing import pipeline_needs
from ...figures.texts import label_text
from ...figures.topology_peer import pipeline_layout

KIND = "pipeline"
TIMELINE_BOXES = ("forward", "backward", "slowdown", "send", "recv", "optimizer", "skipped", "wait")
LANE_ROLE = "stage"
PIPELINED = True
WINDOW_STEPS = 2
SCHEDULE_NAMES = {"gpipe": "GPipe", "1f1b": "1F1B"}


def schedule_name(spec) -> str:
    """The schedule as printed: GPipe, 1F1B."""
    return SCHEDULE_NAMES.get(spec.strategy.schedule, spec.strategy.schedule)


# ---------------------------------------------------------------- topology


def layout(spec, spacing):
    return pipeline_layout(spec, spacing, schedule_name(spec))


def spacing_needs(sizes):
    return pipeline_needs(sizes)


# ---------------------------------------------------------------- lanes


def lane_label(spec, worker_id: str) -> str:
    """A worker's lane is its stage (figure.labels.stage_lane)."""
    return label_text(spec, "stage_lane", i=worker_id[1:])


def more_lanes_text(spec, hidden: int) -> str:
    return label_text(spec, "more_stages", n=f"{hidden:,}")


# ---------------------------------------------------------------- expected schedule


def expected_timeline(spec, cost):
    sim, end = _schedule(spec, cost)
    return one_panel(spec, sim, end, _title(spec, drawn_bubble(sim, spec.strategy.stages, sim.flush_ms)))


def _schedule(spec, cost) -> tuple[Sim, float]:
    sim = Sim(spec, cost)
    s, workers = spec.strategy, spec.topology.workers
    stages, micro = s.stages, s.microbatches
    samples = spec.training.batch_size // micro
    # The ideal pipeline the caption's (p-1)/(m+p-1) describes: balanced stages (each a
    # p-th of the model's FLOPs) and activation transfers hidden behind compute. A straggler
    # stage (topology.workers.slowdown) still stretches its own boxes.
    even = samples * sim.flops / stages / cost.flops_per_ms
    fwd = [even * workers.slowdown_of(f"w{k + 1}") for k in range(stages)]
    comm = [0.0] * stages
    ops = [stage_ops(s.schedule, k, stages, micro) for k in range(stages)]
    done: dict[tuple, float] = {}
    free = [0.0] * stages
    nxt = [0] * stages
    remaining = sum(len(o) for o in ops)
    while remaining:
        progressed = False
        for k in range(stages):
            if nxt[k] >= len(ops[k]):
                continue
            op, m = ops[k][nxt[k]]
            if op == "F":
                deps = [done.get(("F", k - 1, m), None) if k else 0.0]
                deps = [d + comm[k - 1] if (d is not None and k) else d for d in deps]
            else:
                deps = [done.get(("F", k, m))]
                if k < stages - 1:
                    d = done.get(("B", k + 1, m))
                    deps.append(None if d is None else d + comm[k])
            if any(d is None for d in deps):
                continue
            begin = max([free[k]] + deps)
            length = fwd[k] if op == "F" else 2 * fwd[k]
            lane = f"w{k + 1}"
            sim.add(lane, free[k], begin, "wait", "bubble" if free[k] == 0.0 else "")
            free[k] = sim.add(lane, begin, begin + length, "forward" if op == "F" else "backward", str(m + 1))
            done[(op, k, m)] = free[k]
            nxt[k] += 1
            remaining -= 1
            progressed = True
        if not progressed:  # cannot happen for GPipe/1F1B; guards against an endless loop
            raise DtgenError(f"pipeline schedule '{s.schedule}' deadlocked")
    end = max(free)
    opt = max(cost.min_ms, 2 * sim.params / stages / cost.flops_per_ms)
    for k in range(stages):
        lane = f"w{k + 1}"
        sim.add(lane, free[k], end, "wait", "bubble")
        sim.add(lane, end, end + opt, "optimizer", "opt")
    sim.flush_ms = end
    return sim, end + opt


def bubble_fraction(stages: int, microbatches: int) -> float:
    """The ideal pipeline bubble (GPipe and 1F1B alike): (p-1)/(m+p-1) of each stage's step is idle."""
    return (stages - 1) / (microbatches + stages - 1)


def drawn_bubble(sim: Sim, stages: int, end: float) -> float:
    """The idle share of the stages' lanes up to `end` (the flush), from the drawn boxes."""
    idle = sum(b.end_ms - b.start_ms for k in range(stages) for b in sim.boxes[f"w{k + 1}"]
               if b.kind == "wait" and b.end_ms <= end + 1e-9)
    return idle / (stages * end) if end > 0 else 0.0


def _title(spec, drawn: float) -> str:
    s = spec.strategy
    bubble = bubble_fraction(s.stages, s.microbatches)
    head = f"{schedule_name(spec)}: {s.microbatches} microbatches, {s.stages} stages"
    if abs(drawn - bubble) < 0.005:
        return f"{head}, bubble {bubble:.0%} = $(p-1)/(m+p-1)$"
    return f"{head}, bubble {drawn:.0%} (balanced stages: $(p-1)/(m+p-1)$ = {bubble:.0%})"


# ---------------------------------------------------------------- measured figures


def run_name(spec) -> str:
    return f"{schedule_name(spec)} pipeline"


def table_name(spec) -> str:
    return f"{schedule_name(spec)} pipeline"
