"""Figures of pipeline parallelism: the stages left to right, the expected schedule (in the
order torch's schedule runs it: strategies/pipeline_schedules.py) with its bubble, and
lanes named after the stages. Must not import torch."""

from __future__ import annotations

from ...errors import DtgenError
from ..pipeline_schedules import SCHEDULES, ScheduleOrderError, op_label, play, rank_orders, rank_stages, reference_bubble, schedule_of, stages_per_rank
from ...figures.schedule import Sim, one_panel
from ...figures.spacing import pipeline_needs
from ...figures.texts import label_text
from ...figures.topology_peer import pipeline_layout

KIND = "pipeline"
TIMELINE_BOXES = ("forward", "backward", "wgrad", "slowdown", "send", "recv", "optimizer", "skipped", "wait")
LANE_ROLE = "stage"
PIPELINED = True
WINDOW_STEPS = 2
SCHEDULE_NAMES = {name: s.printed for name, s in SCHEDULES.items()}


def schedule_name(spec) -> str:
    """The schedule as printed: GPipe, 1F1B, Interleaved 1F1B, ZB-V, ..."""
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
    try:
        sim, end = _schedule(spec, cost)
    except ScheduleOrderError as e:
        raise DtgenError(f"strategy.schedule: {e}") from None
    return one_panel(spec, sim, end, _title(spec, drawn_bubble(sim, spec.strategy.stages, sim.flush_ms)))


# Compute time of one operation per unit of a stage's forward: the usual B = 2F, and a
# split backward's two halves I = W = F (Qi et al.'s equal-cost case).
OP_COST = {"F": 1.0, "B": 2.0, "I": 1.0, "W": 1.0}


def _schedule(spec, cost, op_cost=None) -> tuple[Sim, float]:
    """Each rank's operations in torch's order (pipeline_schedules.rank_orders), played as
    early as their dependencies allow (`play`). `op_cost` overrides OP_COST (the bubble
    tests run F = B)."""
    sim = Sim(spec, cost)
    s, workers = spec.strategy, spec.topology.workers
    ranks, micro, v = s.stages, s.microbatches, stages_per_rank(s)
    samples = spec.training.batch_size // micro
    # The ideal pipeline the caption's formula describes: balanced stages (each rank a p-th
    # of the model's FLOPs, each of its v chunks a v-th of that) and activation transfers
    # hidden behind compute. A straggler (topology.workers.slowdown) still stretches its boxes.
    even = samples * sim.flops / ranks / v / cost.flops_per_ms
    unit = [even * workers.slowdown_of(f"w{k + 1}") for k in range(ranks)]
    costs = op_cost or OP_COST
    orders = rank_orders(s.schedule, ranks, micro, v)
    chunk_of = {st: c for r in range(ranks) for c, st in enumerate(rank_stages(s.schedule, r, ranks, v))}
    played = play(orders, ranks, ranks * v, s.schedule, lambda r, op, st: unit[r] * costs[op],
                  lambda op, src, dst: 0.0)
    free = [0.0] * ranks
    for a in played:
        lane = f"w{a.rank + 1}"
        sim.add(lane, a.free, a.start, "wait", "bubble" if a.free == 0.0 else "")
        kind = {"F": "forward", "W": "wgrad"}.get(a.op, "backward")
        free[a.rank] = sim.add(lane, a.start, a.end, kind, op_label(a.op, a.mb, chunk_of[a.stage], v))
    end = max(free)
    opt = max(cost.min_ms, 2 * sim.params / ranks / cost.flops_per_ms)
    for k in range(ranks):
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


def _title(spec, drawn: float, shape: bool = True) -> str:
    """The panel title: the schedule, its shape (left out where the figure's title gives it)
    and its bubble, drawn beside the paper's form."""
    s = spec.strategy
    v = stages_per_rank(s)
    bubble, form, _ = reference_bubble(s.schedule, s.stages, s.microbatches, v)
    letters = ", ".join("abcdefghijklmnop"[:v])
    if shape:
        chunks = f" x {v} chunks ({letters})" if v > 1 else ""
        head = f"{schedule_name(spec)}: {s.microbatches} microbatches, {s.stages} stages{chunks}"
    else:
        head = schedule_name(spec) + (f": {v} chunks a stage ({letters})" if v > 1 else "")
    sep = ": " if ":" not in head else ", "
    if schedule_of(s.schedule).splits_backward:  # no closed form in p and m: 1F1B's as the reference
        return f"{head}{sep}bubble {drawn:.0%} (1F1B: {bubble:.0%})"
    if abs(drawn - bubble) < 0.005:
        return f"{head}{sep}bubble {bubble:.0%} = {form}"
    return f"{head}{sep}bubble {drawn:.0%} (balanced stages: {form} = {bubble:.0%})"


# ---------------------------------------------------------------- measured figures


def run_name(spec) -> str:
    return f"{schedule_name(spec)} pipeline"


def table_name(spec) -> str:
    return f"{schedule_name(spec)} pipeline"


# ---------------------------------------------------------------- schedules side by side

# The schedules a comparison of pipeline schedules draws (`dtgen figure SPEC --kind schedules`).
COMPARED = ("gpipe", "1f1b", "interleaved-1f1b", "zbv-zero-bubble", "dualpipev")


def schedules_timeline(spec, cost):
    """One panel per schedule of COMPARED for the spec's stages, microbatches and model, on
    one time axis (each in torch's order, balanced stages, illustrative costs). A schedule
    the spec's shape cannot take (DualPipeV's 2p microbatches, the model's blocks for
    p x 2 stages) is left out and said so in the note."""
    from dataclasses import replace

    from .strategy import microbatch_rules
    from ...figures.schedule import lanes
    from ...figures.timeline import Panel, Timeline

    s = spec.strategy
    blocks = workload_blocks(spec)
    panels, ends, left_out = [], [], []
    for k, name in enumerate(COMPARED):
        options = {key: val for key, val in s.options.items() if key != "stages_per_rank"}
        if schedule_of(name).fixed_v is None:
            options["stages_per_rank"] = stages_per_rank(replace(s, schedule=name))
        one = replace(spec, strategy=replace(s, schedule=name, options=options))
        v = stages_per_rank(one.strategy)
        problems = [m for _, m in microbatch_rules(name, s.microbatches, s.stages)]
        if blocks is not None and s.stages * v > blocks:
            problems.append(f"{s.stages} x {v} stages, the model has {blocks} blocks")
        if problems:
            left_out.append(schedule_of(name).printed)
            continue
        try:
            sim, end = _schedule(one, cost)
        except ScheduleOrderError as e:
            raise DtgenError(f"strategy.schedule: {e}") from None
        ends.append(end)
        panels.append(Panel("abcdefgh"[k] * 2, _title(one, drawn_bubble(sim, s.stages, sim.flush_ms), shape=False),
                            lanes(one, sim, False)))
    note = "illustrative cost model, balanced stages, each schedule in torch's order"
    if left_out:  # (dtgen validate with that schedule says why)
        note += "; not drawn (the spec's shape does not fit): " + ", ".join(left_out)
    return Timeline(f"Pipeline schedules: {s.stages} stages, {s.microbatches} microbatches", tuple(panels), 0.0,
                    max(ends), note, "time (ms)")


def workload_blocks(spec) -> int | None:
    """The model's blocks (layers) a stage is cut from; None for a python model."""
    from ...workload import workload_of

    w = workload_of(spec)
    return None if w is None else len(w.blocks)


def bubble_reference(spec, stages: int, microbatches: int) -> tuple[float, str, str]:
    """The spec's schedule's own reference bubble (pipeline_schedules.reference_bubble)."""
    from ...strategies.pipeline_schedules import reference_bubble, stages_per_rank

    return reference_bubble(spec.strategy.schedule, stages, microbatches, stages_per_rank(spec.strategy))
