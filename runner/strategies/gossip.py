"""`gossip`: every worker takes a local step, then averages its parameters with its
ring neighbours (strategy.peers of them: +1, -1, +2, -2, ...). No global barrier; the
final model is the average over all workers (one all-reduce at the end).
"""

from __future__ import annotations

import torch

from ...strategies.gossip.strategy import neighbours
from ..loop import StepHooks, train_steps

KIND = "gossip"  # the strategy.kind this module runs (opentikz_dt/plugins.py)


def roles(spec):
    return [("worker", w) for w in spec.topology.workers.ids]


def train(ctx) -> None:
    model = ctx.build_model()
    opt = ctx.build_optimizer(model.parameters())
    ctx.resume(model, opt)
    params = list(model.parameters())
    stepper = ctx.stepper(opt, params)  # a local step on local gradients
    n = ctx.world_size
    to, frm = neighbours(ctx.rank, n, ctx.spec.strategy.peers)
    flat = torch.empty(sum(p.numel() for p in params), device=ctx.device)
    inbox = [torch.empty_like(flat) for _ in frm]

    def mix_with_neighbours(step):  # after the local update: average the parameters with the peers'
        with ctx.tracer.span("gossip", tid="comm", step=step, peers=[ctx.roles[r][1] for r in frm]):
            with torch.no_grad():
                torch.cat([p.reshape(-1) for p in params], out=flat)
                works = [ctx.comm.irecv(buf, src, tag=i) for i, (buf, src) in enumerate(zip(inbox, frm))]
                works += [ctx.comm.isend(flat, dst, tag=i) for i, dst in enumerate(to)]
                for w in works:
                    w.wait()
                mixed = flat.clone()
                for buf in inbox:
                    mixed.add_(buf)
                mixed.div_(len(inbox) + 1)
                _unflatten_into(params, mixed)

    train_steps(ctx, StepHooks(
        forward_backward=lambda step: ctx.forward_backward(model, step, ctx.rank),
        stepper=stepper,
        after_update=mix_with_neighbours,
        memory_params=params, memory_optimizer=opt,
        checkpoint_state=lambda: {"model": model.state_dict(), "opt": opt.state_dict()},
    ))
    with torch.no_grad():
        torch.cat([p.reshape(-1) for p in params], out=flat)
        ctx.comm.all_reduce(flat)
        _unflatten_into(params, flat.div_(n))
    if ctx.rank == 0:
        ctx.save_model(model.state_dict())


def _unflatten_into(params, flat) -> None:
    offset = 0
    for p in params:
        p.copy_(flat[offset:offset + p.numel()].view_as(p))
        offset += p.numel()


# --- the runner's other questions (runner/strategies/interface.py) ------------------------

def sent(spec) -> str:
    return "weights"
