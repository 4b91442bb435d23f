"""`allreduce`: data-parallel workers that average gradients every step.

algorithm native = DDP (PyTorch's collective); ring / tree / hierarchical = ours
(collectives.py). On NCCL, ring and tree run NCCL's own Ring / Tree algorithm
(NCCL_ALGO, set in worker.py before the communicator exists): NCCL's kernels beat
point-to-point emulation on GPUs, and the spans then cover the whole collective.
"""

from __future__ import annotations

from time import perf_counter_ns

import torch

from ..loop import StepHooks, train_steps
from ..trace import TIDS
from . import collectives

KIND = "allreduce"  # the strategy.kind this module runs (opentikz_dt/plugins.py)


def roles(spec):
    return [("worker", w) for w in spec.topology.workers.ids]


def train(ctx) -> None:
    algorithm = ctx.spec.strategy.algorithm
    if algorithm == "native":
        _train_ddp(ctx)
    else:
        _train_manual(ctx, algorithm)


def _grad_bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def _train_manual(ctx, algorithm: str) -> None:
    model = ctx.build_model()
    opt = ctx.build_optimizer(model.parameters())
    ctx.resume(model, opt)
    params = list(model.parameters())
    workers = list(range(ctx.world_size))
    n = len(workers)
    # Gradients live as views of one flat buffer, so the all-reduce needs no copies.
    flat = torch.zeros(sum(p.numel() for p in params), device=ctx.device)
    offset = 0
    for p in params:
        p.grad = flat[offset:offset + p.numel()].view_as(p)
        offset += p.numel()
    reduce = _reducer(ctx, algorithm, workers)
    # Every rank holds the same summed gradients, so the same (possibly fp16-scaled)
    # values are clipped, checked and stepped identically everywhere.
    stepper = ctx.stepper(opt, params)

    def average(step):
        reduce(flat, step)
        flat.div_(n)

    train_steps(ctx, StepHooks(
        forward_backward=lambda step: ctx.forward_backward(model, step, ctx.rank, zero_grad=flat.zero_),
        after_backward=average,
        stepper=stepper,
        memory_params=params, memory_optimizer=opt,
        checkpoint_state=lambda: {"model": model.state_dict(), "opt": opt.state_dict()},
    ))
    if ctx.rank == 0:
        ctx.save_model(model.state_dict())


def _reducer(ctx, algorithm: str, workers: list[int]):
    if ctx.backend == "nccl" and algorithm in ("ring", "tree"):
        def nccl(flat, step):  # NCCL_ALGO selects NCCL's own ring or tree
            with ctx.tracer.span("allreduce", tid="comm", step=step, algorithm=algorithm, phase="nccl", chunk=0):
                ctx.comm.all_reduce(flat)
        return nccl
    if algorithm == "ring":
        return lambda flat, step: collectives.ring_all_reduce(ctx, flat, workers, step)
    if algorithm == "tree":
        return lambda flat, step: collectives.tree_all_reduce(ctx, flat, workers, step)
    groups = collectives.host_groups(ctx, workers)
    return lambda flat, step: collectives.hierarchical_all_reduce(ctx, flat, groups, step)


def _train_ddp(ctx) -> None:
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = ctx.build_model()
    opt = ctx.build_optimizer(model.parameters())
    ctx.resume(model, opt)
    ddp = DDP(model, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None)
    stepper = ctx.stepper(opt, model.parameters())  # DDP's averaged gradients: the same on every rank
    state = {"step": 0}
    if ctx.spec.runtime.trace.get("enabled", True):
        ddp.register_comm_hook(state, _traced_allreduce_hook(ctx))
    n = ctx.world_size
    moved = _grad_bytes(model) * 2 * (n - 1) // n

    def at_step(step):  # the comm hook's spans name the step
        state["step"] = step

    def count_bytes(step):  # DDP averaged the gradients during backward: only their traffic is left
        ctx.metrics.add_bytes(sent=moved, recv=moved)

    train_steps(ctx, StepHooks(
        before_step=at_step,
        # DDP overlaps its bucket all-reduces with backward: they show on the comm thread.
        forward_backward=lambda step: ctx.forward_backward(ddp, step, ctx.rank),
        after_backward=count_bytes,
        stepper=stepper,
        memory_params=list(model.parameters()), memory_optimizer=opt,
        checkpoint_state=lambda: {"model": model.state_dict(), "opt": opt.state_dict()},
    ))
    if ctx.rank == 0:
        ctx.save_model(model.state_dict())


def _first(fut):
    return fut.value()[0]


def _traced_allreduce_hook(ctx):
    """DDP comm hook: the default all-reduce (divide, then sum), plus one `bucket` span per
    bucket on sampled steps. gloo has no cheaper way to see when a bucket's all-reduce
    starts and ends (ProcessGroup completion hooks are NCCL-only), so the hook itself is
    Python; on unsampled steps (`trace.sample_every`) it records nothing."""
    import torch.distributed as dist

    n = ctx.world_size
    tracer = ctx.tracer
    record, comm_tid = tracer._record, TIDS["comm"]

    def hook(state, bucket):
        step, t0 = state["step"], perf_counter_ns()
        buf = bucket.buffer().div_(n)
        fut = dist.all_reduce(buf, async_op=True).get_future()
        if not tracer.enabled_for(step):
            return fut.then(_first)
        args = {"algorithm": "native", "phase": "bucket", "chunk": bucket.index()}

        def done(f):
            record("allreduce", comm_tid, t0, perf_counter_ns(), step, args)
            return f.value()[0]

        return fut.then(done)

    return hook


# --- the runner's other questions (runner/strategies/interface.py) ------------------------

def process_environment(spec, backend: str) -> dict:
    # On NCCL, ring and tree are NCCL's own algorithms (module docstring, _reducer).
    if backend == "nccl" and spec.strategy.algorithm in ("ring", "tree"):
        return {"NCCL_ALGO": spec.strategy.algorithm.capitalize()}
    return {}


def summary_variant(spec) -> str:
    return f" ({spec.strategy.algorithm})"
