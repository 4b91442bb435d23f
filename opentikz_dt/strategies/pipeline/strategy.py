"""Pipeline parallelism (the vertical model split): whole layers per stage, microbatches
through torch's pipelining schedules (GPipe, 1F1B)."""

from .._base import Strategy

KIND = "pipeline"
STRATEGY = Strategy(KIND, "Pipeline-parallel training", ("send", "recv", "optimizer"),
                    options=("microbatches", "schedule", "stages"), workers=(2, None), data_parallel=False, order=60)


def stage_ops(schedule: str, stage: int, stages: int, micro: int) -> list[tuple[str, int]]:
    """The op order of one stage (0-based), as torch's schedules run it: GPipe all forwards
    then all backwards; 1F1B min(stages - stage - 1, micro) forwards to warm up, then one
    forward and one backward in turn, then the backwards left. ("F" | "B", microbatch).
    The expected timeline (figures) and the simulator (predict) both schedule by it."""
    if schedule == "gpipe":
        return [("F", m) for m in range(micro)] + [("B", m) for m in range(micro)]
    warmup = min(stages - stage - 1, micro)
    ops = [("F", m) for m in range(warmup)]
    for i in range(micro - warmup):
        ops += [("F", warmup + i), ("B", i)]
    return ops + [("B", m) for m in range(micro - warmup, micro)]


def rules(spec, model_blocks):
    s, t, workers = spec.strategy, spec.training, spec.topology.workers.count
    if s.stages != workers:
        yield ("strategy", "stages"), f"pipeline stages must fit the workers: one stage per worker, so {workers}, got {s.stages}"
    blocks = model_blocks()
    if blocks is not None and s.stages > blocks[0]:
        yield ("training", "model", "layers"), (f"{s.stages} pipeline stages need at least {s.stages} {blocks[1]}s;"
                                                f" the model has {blocks[0]}")
    if s.schedule == "1f1b" and s.microbatches < s.stages:
        yield ("strategy", "microbatches"), f"1f1b needs at least as many microbatches as stages ({s.stages}), got {s.microbatches}"
    if t.batch_size % s.microbatches:
        yield ("strategy", "microbatches"), f"batch_size {t.batch_size} does not split into {s.microbatches} equal microbatches"
    if t.compile:  # the other strategies run the model as one plain module under ctx.forward_backward
        yield ("training", "compile"), ("strategy pipeline cannot run compiled: torch.distributed.pipelining runs "
                                        "each stage's forward and backward itself (its shape inference and chunked "
                                        "schedules do not take a compiled stage)")


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
  schedule: 1f1b              # gpipe | 1f1b"""


def expected_memory(spec, sizes) -> list:
    """Each stage holds its layers (the last stage a copy of a tied weight), their
    gradients and their optimizer state."""
    ids = spec.topology.workers.ids
    return [sizes.rank("stage", w, n) for w, n in zip(ids, sizes.stage_params(len(ids)))]
