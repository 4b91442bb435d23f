"""`pipeline`: the model cut into stages over the workers, one stage per rank (runner/split.py:
the MLP's layers, the transformer's or cnn's blocks with the embedding on the first and the
head on the last stage, an nn.Sequential's children), run by torch.distributed.pipelining
(PipelineStage + the schedule class strategy.schedule names:
opentikz_dt/strategies/pipeline_schedules.py). Under a multi-stage schedule (interleaved
1F1B, looped BFS, zero bubble, DualPipeV) the model is cut into p·v virtual stages and
each rank holds v of them (`rank_stages`: r, r+p, ... or a V's r and 2p-1-r), one
PipelineStage each, all given to the one schedule object.

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

from time import perf_counter_ns

import torch

from ... import workload
from ...errors import InputError
from ..precision import autocast_forward
from ..loop import StepHooks, train_steps
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
    from torch.distributed.pipelining import PipelineStage

    from ...strategies.pipeline_schedules import SCHEDULES, rank_stages, stages_per_rank
    from ..schedule_order import schedule_class

    spec, rank, ranks = ctx.spec, ctx.rank, ctx.world_size
    microbatches, name = spec.strategy.microbatches, spec.strategy.schedule
    schedule_cls = schedule_class(name)
    if schedule_cls is None:  # the spec was validated where torch has it; this rank's torch lacks it
        raise InputError(f"strategy.schedule: {_refused(name)}")
    stage_through_host_if_needed(ctx)  # GPUs shared over gloo: the schedules' messages via host memory
    v = stages_per_rank(spec.strategy)
    total = ranks * v  # virtual stages; rank `rank` holds rank_stages(...), its chunk 0 first
    indices = rank_stages(name, rank, ranks, v)
    whole = ctx.build_model()
    parts = [stage_module(whole, i, total) for i in indices]
    for part in parts:
        autocast_forward(part, ctx.precision, ctx.device)
    holds_first, holds_last = 0 in indices, total - 1 in indices
    tied = _tied_parameters(ctx, parts, name, ranks, total)
    if tied is None and holds_first and holds_last and total > 1:  # a V's first worker: both ends here
        tied = _local_tie(ctx, parts[0], parts[-1])
    params = _unique_parameters(parts)
    opt = ctx.build_optimizer(params)
    copy_part = parts[-1] if tied is not None and holds_last else None  # its tied weight is the copy
    stepper = _stage_stepper(ctx, opt, parts, params, copy_part)
    state = ctx.load_checkpoint()
    if state:
        for part in parts:
            part.load_state_dict({k: t for k, t in state["model"].items() if k in part.state_dict()})
        opt.load_state_dict(state["opt"])
    stages = [PipelineStage(part, i, total, ctx.device, group=ctx.group) for part, i in zip(parts, indices)]
    chunked = SCHEDULES[name].placement != "one"  # spans name the rank's chunk under a multi-stage schedule
    traces = [_StageTrace(ctx, stage, i, chunk=c if chunked else None) for c, (stage, i) in enumerate(zip(stages, indices))]
    if SCHEDULES[name].placement == "one":
        schedule = schedule_cls(stages[0], microbatches, loss_fn=_stage_loss(ctx))
    else:
        schedule = schedule_cls(stages, microbatches, loss_fn=_stage_loss(ctx))
    # The schedule talks to its neighbours itself, so its traffic is counted here: per
    # step every microbatch's activation crosses each stage boundary once forward and
    # its gradient once back (sizes measured on the stage's own forward); a boundary
    # between two stages of this rank (a V's turn) moves nothing over the network.
    boundaries = [_BoundaryBytes(part, first=i == 0 or (i - 1) in indices, last=i == total - 1 or (i + 1) in indices)
                  for part, i in zip(parts, indices)]

    def forward_backward(step):  # the schedule runs every microbatch's forward and backward
        x, y = ctx.batch(step, 0, 1)
        for trace in traces:
            trace.step = step
        opt.zero_grad(set_to_none=True)
        losses: list = []
        args = (x,) if holds_first else ()
        kwargs = {"target": y, "losses": losses} if holds_last else {}
        schedule.step(*args, **kwargs)
        moved = sum(b.per_step(microbatches) for b in boundaries)
        ctx.metrics.add_bytes(sent=moved, recv=moved)
        return _mean_loss(ctx, losses), len(x)

    train_steps(ctx, StepHooks(
        forward_backward=forward_backward,
        after_backward=tied,
        stepper=stepper,
        memory_params=params, memory_optimizer=opt,
        checkpoint_state=lambda: {"model": _state_dict(parts), "opt": opt.state_dict()},
    ))
    ctx.save_model(_state_dict(parts))


def _mean_loss(ctx, losses: list):
    """The last stage's loss over the step's microbatches, unscaled (None on the other
    stages); left on the device for ctx.step_done, which reads it a step later."""
    if not losses:
        return None
    scale = ctx.scaler.scale if ctx.scaler is not None else 1.0
    return torch.stack([v.detach() for v in losses]).mean() / scale


def _refused(name: str) -> str:
    from ...strategies.pipeline_schedules import SCHEDULES

    from ..schedule_order import MULTI_STAGE_SINCE

    since = ".".join(map(str, MULTI_STAGE_SINCE))
    return (f"{name} runs through torch.distributed.pipelining.{SCHEDULES[name].torch_class} from torch "
            f"{since} on; this is torch {torch.__version__} (use gpipe or 1f1b, or torch {since} or newer)")


def _unique_parameters(parts) -> list:
    seen, out = set(), []
    for part in parts:
        for p in part.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                out.append(p)
    return out


def _state_dict(parts) -> dict:
    """The rank's parameters under the whole model's names (its parts' state dicts joined)."""
    out: dict = {}
    for part in parts:
        out.update(part.state_dict())
    return out


def _stage_loss(ctx):
    """The last stage's loss per microbatch: under autocast, scaled in fp16 (every stage's
    gradients then carry the same scale, which each stage's Stepper removes)."""
    def loss_fn(output, target):
        with ctx.autocast():
            loss = ctx.loss_fn(output, target)
        return loss if ctx.scaler is None else ctx.scaler.scale_loss(loss)

    return loss_fn


def _stage_stepper(ctx, opt, parts, params, copy_part):
    """Each stage holds part of the model: the clip norm and fp16's skip decision use the
    squared norm summed over all stages (an all-reduce, only when clipping or in fp16),
    the tied weight counted once (by the first stage; `copy_part`: the last stage's part
    where this rank holds the copy, else None)."""
    kind = ctx.spec.training.model.get("kind", "mlp")
    skip = set(TIED.get(kind, ()))
    skipped = set() if copy_part is None else {id(p) for n, p in copy_part.named_parameters() if n in skip}
    counted = [p for p in params if id(p) not in skipped]

    def reduce_sq(sq):
        ctx.comm.all_reduce(sq, group=ctx.group)
        return sq

    return ctx.stepper(opt, params, norm_params=counted, reduce_sq=reduce_sq)


def _local_tie(ctx, first, last):
    """A V's first worker holds the first and the last stage. The two stages must not share
    the tied Parameter object: shared, the run ended 3.4e-2 off `single` after 3 steps (ZB-V
    and DualPipeV with the transformer; torch's stages keep per-stage gradient state that
    one Parameter under two stages defeats). So the last stage gets its own copy
    of the tied module, and after the schedule the two gradients are summed into both, as
    two workers' all-reduce would; the copies then stay equal. None for an untied model."""
    import copy

    kind = ctx.spec.training.model.get("kind", "mlp")
    names = TIED.get(kind, ())
    if not names:
        return None
    for module in {name.rsplit(".", 1)[0] for name in names}:
        setattr(last, module, copy.deepcopy(getattr(first, module)))
    a, b = dict(first.named_parameters()), dict(last.named_parameters())
    pairs = [(a[name], b[name]) for name in names]

    def add(step: int) -> None:
        for p, q in pairs:
            if p.grad is None or q.grad is None:
                grad = p.grad if q.grad is None else q.grad
            else:
                grad = p.grad + q.grad
            if grad is not None:
                p.grad, q.grad = grad, grad.clone()

    return add


def _tied_parameters(ctx, parts, schedule: str, ranks: int, stages: int):
    """For a model whose first and last stage share a parameter (the transformer's token
    embedding, reused as its output layer): a function summing the two copies'
    gradients, traced as an `allreduce`; None otherwise, and None where one rank holds
    both stages (a V: its two parts hold the one parameter). Every rank creates the group."""
    from ...strategies.pipeline_schedules import stage_rank

    kind = ctx.spec.training.model.get("kind", "mlp")
    names = TIED.get(kind, ())
    first, last = stage_rank(schedule, 0, ranks), stage_rank(schedule, stages - 1, ranks)
    if not names or stages < 2 or first == last:
        return None
    group = ctx.new_group([first, last])
    if ctx.rank not in (first, last):
        return None
    params = {name: p for part in parts for name, p in part.named_parameters()}
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
    `span_args` go on every span (a rank's chunk: chunk=0, 1 under a multi-stage schedule;
    a mesh names its dimension on send and recv: dim=pipeline). A backward is split where
    the schedule splits it (zero bubble): `backward` with grad=input (I), then later
    `backward` with grad=weight (W, backward_weight_one_chunk); a full one has grad=both."""

    def __init__(self, ctx, stage, index: int, chunk: int | None = None, **span_args):
        missing = [m for m in _WRAPPED if not callable(getattr(stage, m, None))]
        if missing:  # private API (checked on torch 2.13): train on, without per-microbatch spans
            ctx.log(f"dtgen: torch {torch.__version__} PipelineStage lacks {missing}; no per-microbatch spans")
            return
        self.tracer, self.stage_no, self.step, self.span_args = ctx.tracer, index + 1, 0, span_args
        self.compute_args = {} if chunk is None else {"chunk": chunk}
        self.device_span = ctx.device_span
        self.recv_posted: dict[tuple[str, int], int] = {}
        self._wrap_compute(stage, "forward_one_chunk", "forward", "fwd", not stage.is_first)
        self._wrap_compute(stage, "backward_one_chunk", "backward", "bwd", not stage.is_last)
        if callable(getattr(stage, "backward_weight_one_chunk", None)):
            self._wrap_compute(stage, "backward_weight_one_chunk", "backward", "", False)
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
                                     direction=direction, **self.span_args, **self.compute_args)
            extra = dict(self.compute_args)
            if name == "backward":
                extra["grad"] = "weight" if not direction else ("both" if kwargs.get("full_backward", True) else "input")
            # on a GPU CUDA events, resolved after the fact (runner/device_spans.py): no wait here
            with self.device_span(name, step=self.step, mb=mb, stage=self.stage_no, **extra):
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
                                     stage=self.stage_no, direction=direction, bytes=nbytes, **self.span_args,
                                     **self.compute_args)
            return ops

        setattr(stage, method, traced)


# --- the runner's other questions (runner/strategies/interface.py) ------------------------

def data_parallel_width(spec, roles) -> int:
    return 1  # every stage sees the whole batch, in microbatches


def check_model(spec, model, names: list[str], where: str) -> None:
    """The schedule's class in this torch (one located line where it is missing: the
    oldest supported torch may lack a newer schedule), and a model long enough for
    stages x stages_per_rank stages."""
    from ..entry import spec_location
    from ..schedule_order import schedule_class
    from ..split import check_splittable

    if schedule_class(spec.strategy.schedule) is None:
        raise InputError(f"{spec_location(spec, ('strategy', 'schedule'))}: {_refused(spec.strategy.schedule)}")

    from ...strategies.pipeline_schedules import stages_per_rank

    check_splittable(model, spec.strategy.stages * stages_per_rank(spec.strategy), where)


def check_placement(placement, spec) -> str | None:
    """On GPUs shared over gloo the schedules' messages go through host memory
    (runner/stage_host.py); the run's first line says so."""
    from ..stage_host import COST

    return COST if placement.stage_through_host else None


def sent(spec) -> str:
    return "activations and their gradients"
