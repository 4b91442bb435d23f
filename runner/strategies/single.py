"""`single`: one process trains on the whole batch (the reference for numerics)."""

from __future__ import annotations

import time

KIND = "single"  # the strategy.kind this module runs (opentikz_dt/plugins.py)


def roles(spec):
    return [("worker", "w1")]


def train(ctx) -> None:
    model = ctx.build_model()
    opt = ctx.build_optimizer(model.parameters())
    ctx.resume(model, opt)
    stepper = ctx.stepper(opt, model.parameters())
    for step in range(ctx.start_step, ctx.steps):
        ctx.fault_check(step)
        t0 = time.perf_counter()
        loss, samples = ctx.forward_backward(model, step, 0, 1)
        with ctx.tracer.span("optimizer", step=step) as span:
            stepper.step(step, span)
        ctx.record_memory(model.parameters(), opt)
        ctx.step_done(step, loss, samples, time.perf_counter() - t0)
        ctx.maybe_checkpoint(step, lambda: {"model": model.state_dict(), "opt": opt.state_dict()})
    ctx.save_model(model.state_dict())


# --- the runner's other questions (runner/strategies/interface.py) ------------------------

def sent(spec) -> str:
    return ""
