"""Pipeline parallelism (the vertical model split): whole layers per stage, microbatches
through torch's pipelining schedules (GPipe, 1F1B, and the multi-stage ones with
strategy.stages_per_rank virtual stages per worker: pipeline_schedules.py)."""

from .._base import Strategy
from ..pipeline_schedules import SCHEDULES, single_stage_ops, stages_per_rank

KIND = "pipeline"
STRATEGY = Strategy(KIND, "Pipeline-parallel training", ("send", "recv", "optimizer"),
                    options=("microbatches", "schedule", "stages", "stages_per_rank"), workers=(2, None), data_parallel=False, order=60)


def stage_ops(schedule: str, stage: int, stages: int, micro: int) -> list[tuple[str, int]]:
    """A single-stage schedule's op order of one stage (pipeline_schedules.single_stage_ops)."""
    return single_stage_ops(schedule, stage, stages, micro)


def rules(spec, model_blocks):
    s, t, workers = spec.strategy, spec.training, spec.topology.workers.count
    schedule = SCHEDULES[s.schedule]
    if s.stages != workers:
        yield ("strategy", "stages"), f"pipeline stages must fit the workers: one stage per worker, so {workers}, got {s.stages}"
    if "stages_per_rank" in s.options and schedule.fixed_v is not None:
        yield ("strategy", "stages_per_rank"), (
            f"{s.schedule} holds {schedule.fixed_v} stage{'s' if schedule.fixed_v > 1 else ''} per worker; "
            f"stages_per_rank applies to {', '.join(n for n, x in SCHEDULES.items() if x.fixed_v is None)} (remove it)")
    v = stages_per_rank(s)
    blocks = model_blocks()
    if blocks is not None and s.stages * v > blocks[0]:
        if v == 1:
            yield ("training", "model", "layers"), (f"{s.stages} pipeline stages need at least {s.stages} {blocks[1]}s;"
                                                    f" the model has {blocks[0]}")
        else:
            key = ("strategy", "stages_per_rank") if "stages_per_rank" in s.options else ("training", "model", "layers")
            yield key, (f"{s.schedule} cuts the model into {s.stages} x {v} = {s.stages * v} stages, one per "
                        f"{blocks[1]} at least; the model has {blocks[0]}")
    yield from microbatch_rules(s.schedule, s.microbatches, s.stages)
    if t.batch_size % s.microbatches:
        yield ("strategy", "microbatches"), f"batch_size {t.batch_size} does not split into {s.microbatches} equal microbatches"
    if t.compile:  # the other strategies run the model as one plain module under ctx.forward_backward
        yield ("training", "compile"), ("strategy pipeline cannot run compiled: torch.distributed.pipelining runs "
                                        "each stage's forward and backward itself (its shape inference and chunked "
                                        "schedules do not take a compiled stage)")


def microbatch_rules(schedule: str, micro: int, stages: int):
    """What each torch schedule requires of the microbatch count (its constructor's checks,
    torch 2.13), refused here so that no run starts to fail there."""
    key = ("strategy", "microbatches")
    if schedule == "1f1b" and micro < stages:
        yield key, f"1f1b needs at least as many microbatches as stages ({stages}), got {micro}"
    if schedule in ("interleaved-1f1b", "interleaved-zero-bubble"):
        rounds = max(1, micro // stages)
        if micro % rounds:
            fits = [n for n in (rounds * stages, (rounds + 1) * stages) if n != micro]
            yield key, (f"{schedule} runs the microbatches in {micro} // {stages} stages = {rounds} equal rounds, "
                        f"which {micro} does not divide; use {' or '.join(map(str, fits))}")
    if schedule == "dualpipev" and micro < 2 * stages:
        yield key, (f"dualpipev needs at least as many microbatches as virtual stages (2 x {stages} = "
                    f"{2 * stages}), got {micro}")


def workers_changed(ctx, count: int) -> None:
    # Stages default to the worker count; an explicit value must follow it.
    if ctx.doc.has(("strategy", "stages")):
        ctx.doc.set(("strategy", "stages"), count)


def switch_workers(ctx, kind: str) -> int:
    # one stage per worker, and no more stages than the model has blocks (a python
    # model's blocks are known only at run time: the usual 3)
    blocks = ctx.model_blocks
    return max(2, min(STRATEGY.default_workers, STRATEGY.default_workers if blocks is None else blocks))


def starter_block(kind: str) -> str:
    return """\
strategy:
  kind: pipeline              # model parallelism: one stage per worker
  microbatches: 4             # microbatches per step (fewer -> bigger pipeline bubble)
  schedule: 1f1b              # gpipe | 1f1b | interleaved-1f1b | looped-bfs | interleaved-zero-bubble
                              # | zbv-zero-bubble | dualpipev (docs/pipeline-schedules.md)"""


def expected_memory(spec, sizes) -> list:
    """Each stage holds its layers (the last stage a copy of a tied weight), their
    gradients and their optimizer state."""
    ids = spec.topology.workers.ids
    return [sizes.rank("stage", w, n) for w, n in zip(ids, sizes.stage_params(len(ids)))]


def activation_plan(spec, rank: int):
    """Worker `rank` is stage `rank` of the pipeline: one microbatch's activations, as many
    at once as its schedule keeps in flight."""
    from ...memory_model import ActivationPlan
    from ..pipeline_schedules import in_flight

    s, stages = spec.strategy, spec.topology.workers.count
    return ActivationPlan(rank, stages, 1, spec.training.batch_size // s.microbatches,
                          in_flight(s.schedule, s.microbatches, stages, rank), s.microbatches)
