"""`pipeline`: the model cut into stages over the workers, one stage per rank (runner/split.py:
the MLP's layers, the transformer's or cnn's blocks with the embedding on the first and the
head on the last stage, an nn.Sequential's children), run by torch.distributed.pipelining
(PipelineStage + ScheduleGPipe / Schedule1F1B).

Split: L layers (blocks) over P stages in order, the first `L mod P` stages one more
(`stage_bounds`). Stage i keeps the full model's parameters under their own names, so the
stages' state dicts together are exactly `single`'s (the transformer's tied embedding is
held by the first and the last stage, whose gradients are summed every step). Not
data-parallel: every step is the whole batch of `batch_size` samples in
`strategy.microbatches` equal microbatches; the last stage computes the mean loss per
microbatch and the schedule scales the gradients by 1/microbatches, so the update equals
`single` on the same batch.

Tracing wraps the stage's chunk methods (private API of torch 2.13: the schedules call
`get_{fwd,bwd}_{recv,send}_ops(i)` and `{forward,backward}_one_chunk(i)`):
  `forward` / `backward` (compute, args mb, stage) around each chunk;
  `recv` (comm) from posting a chunk's receive to its compute start: the wait for the
  peer's activation or gradient;
  `send` (comm) the posting of a chunk's send (its completion is folded into the
  schedule's later waits and is not observable here).
"""

from __future__ import annotations

from time import perf_counter, perf_counter_ns

import torch

from ... import workload
from ..precision import autocast_forward
from ..split import TIED, stage_module
from ..stage_host import stage_through_host_if_needed

KIND = "pipeline"  # the strategy.kind this module runs (opentikz_dt/plugins.py)


def roles(spec):
    # The spec rules already refuse 1F1B with fewer microbatches than stages.
    return [("stage", w) for w in spec.topology.workers.ids]


def stage_bounds(layers: int, stages: int) -> list[int]:
    """Layer (block) index boundaries: stage i owns layers bounds[i]..bounds[i+1]-1."""
    return workload.stage_bounds(layers, stages)


def train(ctx) -> None:
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    spec, rank, stages = ctx.spec, ctx.rank, ctx.world_size
    microbatches = spec.strategy.microbatches
    stage_through_host_if_needed(ctx)  # GPUs shared over gloo: the schedules' messages via host memory
    part = stage_module(ctx.build_model(), rank, stages)
    autocast_forward(part, ctx.precision, ctx.device)
    tied = _tied_parameters(ctx, part, stages)
    opt = ctx.build_optimizer(part.parameters())
    stepper = _stage_stepper(ctx, opt, part, tied is not None and rank == stages - 1)
    state = ctx.load_checkpoint()
    if state:
        part.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
    stage = PipelineStage(part, rank, stages, ctx.device, group=ctx.group)
    hooks = _StageTrace(ctx, stage, rank)
    schedule_cls = ScheduleGPipe if spec.strategy.schedule == "gpipe" else Schedule1F1B
    schedule = schedule_cls(stage, microbatches, loss_fn=_stage_loss(ctx))
    # The schedule talks to its neighbours itself, so its traffic is counted here: per
    # step every microbatch's activation crosses each stage boundary once forward and
    # its gradient once back (sizes measured on the stage's own forward).
    boundary = _BoundaryBytes(part, first=rank == 0, last=rank == stages - 1)
    for step in range(ctx.start_step, ctx.steps):
        ctx.fault_check(step)
        t0 = perf_counter()
        x, y = ctx.batch(step, 0, 1)
        hooks.step = step
        opt.zero_grad(set_to_none=True)
        losses: list = []
        if rank == 0:
            schedule.step(x)
        elif rank == stages - 1:
            schedule.step(target=y, losses=losses)
        else:
            schedule.step()
        loss = None
        if losses:  # the last stage's loss, read a step later (ctx.step_done)
            scale = ctx.scaler.scale if ctx.scaler is not None else 1.0
            loss = torch.stack([v.detach() for v in losses]).mean() / scale
        if tied is not None:
            tied(step)
        with ctx.tracer.span("optimizer", step=step) as span:
            stepper.step(step, span)
        ctx.record_memory(part.parameters(), opt)
        moved = boundary.per_step(microbatches)
        ctx.metrics.add_bytes(sent=moved, recv=moved)
        ctx.step_done(step, loss, len(x), perf_counter() - t0)
        ctx.maybe_checkpoint(step, lambda: {"model": part.state_dict(), "opt": opt.state_dict()})
        ctx.tracer.maybe_flush()
    ctx.save_model(part.state_dict())


def _stage_loss(ctx):
    """The last stage's loss per microbatch: under autocast, scaled in fp16 (every stage's
    gradients then carry the same scale, which each stage's Stepper removes)."""
    def loss_fn(output, target):
        with ctx.autocast():
            loss = ctx.loss_fn(output, target)
        return loss if ctx.scaler is None else ctx.scaler.scale_loss(loss)

    return loss_fn


def _stage_stepper(ctx, opt, part, tied_copy: bool):
    """Each stage holds part of the model: the clip norm and fp16's skip decision use the
    squared norm summed over all stages (an all-reduce, only when clipping or in fp16),
    the tied weight counted once (by the first stage)."""
    kind = ctx.spec.training.model.get("kind", "mlp")
    skip = set(TIED.get(kind, ())) if tied_copy else set()
    counted = [p for name, p in part.named_parameters() if name not in skip]

    def reduce_sq(sq):
        ctx.comm.all_reduce(sq, group=ctx.group)
        return sq

    return ctx.stepper(opt, part.parameters(), norm_params=counted, reduce_sq=reduce_sq)


def _tied_parameters(ctx, part, stages: int):
    """For a model whose first and last stage share a parameter (the transformer's token
    embedding, reused as its output layer): a function summing the two copies'
    gradients, traced as an `allreduce`; None otherwise. Every rank creates the group."""
    kind = ctx.spec.training.model.get("kind", "mlp")
    names = TIED.get(kind, ())
    if not names or stages < 2:
        return None
    group = ctx.new_group([0, stages - 1])
    if ctx.rank not in (0, stages - 1):
        return None
    params = dict(part.named_parameters())
    tensors = [params[name] for name in names]

    def all_reduce(step: int) -> None:
        with ctx.tracer.span("allreduce", tid="comm", step=step, algorithm="native", phase="tied", chunk=0):
            for t in tensors:
                ctx.comm.all_reduce(t.grad, group=group)

    return all_reduce


class _BoundaryBytes:
    """Bytes per microbatch entering and leaving a stage, seen by a forward hook."""

    def __init__(self, part, first: bool, last: bool):
        self.first, self.last = first, last
        self.inputs = self.outputs = 0
        part.register_forward_hook(self._hook)

    def _hook(self, module, args, output):
        self.inputs = sum(a.numel() * a.element_size() for a in args if torch.is_tensor(a))
        self.outputs = output.numel() * output.element_size() if torch.is_tensor(output) else 0

    def per_step(self, microbatches: int) -> int:
        edges = (0 if self.first else self.inputs) + (0 if self.last else self.outputs)
        return edges * microbatches


_WRAPPED = ("forward_one_chunk", "backward_one_chunk", "get_fwd_recv_ops", "get_bwd_recv_ops",
            "get_fwd_send_ops", "get_bwd_send_ops")


class _StageTrace:
    """Wraps one PipelineStage's chunk methods to record per-microbatch spans;
    `span_args` go on every send and recv span (a mesh names its dimension: dim=pipeline)."""

    def __init__(self, ctx, stage, rank: int, **span_args):
        missing = [m for m in _WRAPPED if not callable(getattr(stage, m, None))]
        if missing:  # private API (checked on torch 2.13): train on, without per-microbatch spans
            ctx.log(f"dtgen: torch {torch.__version__} PipelineStage lacks {missing}; no per-microbatch spans")
            return
        self.tracer, self.stage_no, self.step, self.span_args = ctx.tracer, rank + 1, 0, span_args
        self.device_span = ctx.device_span
        self.recv_posted: dict[tuple[str, int], int] = {}
        self._wrap_compute(stage, "forward_one_chunk", "forward", "fwd", not stage.is_first)
        self._wrap_compute(stage, "backward_one_chunk", "backward", "bwd", not stage.is_last)
        self._wrap_recv(stage, "get_fwd_recv_ops", "fwd")
        self._wrap_recv(stage, "get_bwd_recv_ops", "bwd")
        self._wrap_send(stage, "get_fwd_send_ops", "fwd", not stage.is_last)
        self._wrap_send(stage, "get_bwd_send_ops", "bwd", not stage.is_first)

    def _wrap_compute(self, stage, method: str, name: str, direction: str, receives: bool) -> None:
        original = getattr(stage, method)

        def traced(mb, *args, **kwargs):
            start = perf_counter_ns()
            posted = self.recv_posted.pop((direction, mb), None)
            if receives and posted is not None:
                self.tracer.add_span("recv", posted, start, self.step, tid="comm", mb=mb, stage=self.stage_no,
                                     direction=direction, **self.span_args)
            # on a GPU CUDA events, resolved after the fact (runner/device_spans.py): no wait here
            with self.device_span(name, step=self.step, mb=mb, stage=self.stage_no):
                return original(mb, *args, **kwargs)

        setattr(stage, method, traced)

    def _wrap_recv(self, stage, method: str, direction: str) -> None:
        original = getattr(stage, method)

        def traced(mb, *args, **kwargs):
            self.recv_posted[(direction, mb)] = perf_counter_ns()
            return original(mb, *args, **kwargs)

        setattr(stage, method, traced)

    def _wrap_send(self, stage, method: str, direction: str, sends: bool) -> None:
        original = getattr(stage, method)

        def traced(mb, *args, **kwargs):
            start = perf_counter_ns()
            ops = original(mb, *args, **kwargs)
            if sends:
                # the payload: the activations (or their gradients) the ops carry
                nbytes = sum(op.tensor.numel() * op.tensor.element_size() for op in ops or () if hasattr(op, "tensor"))
                self.tracer.add_span("send", start, perf_counter_ns(), self.step, tid="comm", mb=mb,
                                     stage=self.stage_no, direction=direction, bytes=nbytes, **self.span_args)
            return ops

        setattr(stage, method, traced)


# --- the runner's other questions (runner/strategies/_defaults.py) ------------------------

def data_parallel_width(spec, roles) -> int:
    return 1  # every stage sees the whole batch, in microbatches


def check_model(spec, model, names: list[str], where: str) -> None:
    from ..split import check_splittable

    check_splittable(model, spec.strategy.stages, where)


def check_placement(placement, spec) -> str | None:
    """On GPUs shared over gloo the schedules' messages go through host memory
    (runner/stage_host.py); the run's first line says so."""
    from ..stage_host import COST

    return COST if placement.stage_through_host else None


def sent(spec) -> str:
    return "activations and their gradients"
