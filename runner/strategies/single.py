"""`single`: one process trains on the whole batch (the reference for numerics)."""

from __future__ import annotations

from ..loop import StepHooks, train_steps

KIND = "single"  # the strategy.kind this module runs (opentikz_dt/plugins.py)


def roles(spec):
    return [("worker", "w1")]


def train(ctx) -> None:
    model = ctx.build_model()
    opt = ctx.build_optimizer(model.parameters())
    ctx.resume(model, opt)
    stepper = ctx.stepper(opt, model.parameters())
    train_steps(ctx, StepHooks(
        forward_backward=lambda step: ctx.forward_backward(model, step, 0, 1),
        stepper=stepper,
        memory_params=list(model.parameters()), memory_optimizer=opt,
        checkpoint_state=lambda: {"model": model.state_dict(), "opt": opt.state_dict()},
    ))
    ctx.save_model(model.state_dict())


# --- the runner's other questions (runner/strategies/interface.py) ------------------------

def sent(spec) -> str:
    return ""
