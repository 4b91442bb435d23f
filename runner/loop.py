"""The training loop of every strategy whose step is the shared one (`train_steps`).

One step, on every rank:

  fault check -> before_step -> forward and backward -> after_backward
  -> `optimizer` span: the Stepper's update -> after_update -> memory (first step)
  -> step_done (the loss read a step later) -> checkpoint (every N steps) -> trace flush

A strategy builds its model, optimizer and Stepper, wraps the model as it needs (DDP,
FSDP, a tensor split, a pipeline schedule), then hands `train_steps` a `StepHooks` saying
what differs: how a step's forward and backward run, and what comes between them and
the update. It saves its model after the loop itself. Strategies that do not take this
step (the parameter server and central storage, whose workers update nothing and whose
servers train on no batch) keep their own loops and say why
(tests/test_strategy_plugins.py lists them).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

StepFn = Callable[[int], None]


@dataclass(frozen=True, kw_only=True)
class StepHooks:
    """What one strategy's step does, for `train_steps`.

    forward_backward(step) -> (loss, samples): this rank's forward and backward (the loss
        left on the device, or None on a rank without one; samples: this rank's share of
        the step's samples, as Metrics counts them);
    stepper: the optimizer's update (runner/optim.py), run inside the `optimizer` span;
    memory_params, memory_optimizer: what `ctx.record_memory` measures after the update;
    checkpoint_state() -> dict: this rank's checkpoint (`ctx.maybe_checkpoint`);
    before_step(step): before the step's clock starts (per-step state of comm hooks);
    after_backward(step): between backward and the update (the gradients' all-reduce,
        the tied embedding's sum, traffic counted);
    after_update(step): after the update (gossip's parameter averaging)."""

    forward_backward: Callable[[int], tuple[Any, int]]
    stepper: Any  # runner/optim.py's Stepper
    memory_params: list
    memory_optimizer: Any
    checkpoint_state: Callable[[], dict]
    before_step: Optional[StepFn] = None
    after_backward: Optional[StepFn] = None
    after_update: Optional[StepFn] = None


def train_steps(ctx, hooks: StepHooks) -> None:
    """Steps ctx.start_step .. ctx.steps - 1 (a restart resumes at its checkpoint)."""
    for step in range(ctx.start_step, ctx.steps):
        _one_step(ctx, hooks, step)


def _one_step(ctx, hooks: StepHooks, step: int) -> None:
    ctx.fault_check(step)
    _call(hooks.before_step, step)
    t0 = time.perf_counter()
    loss, samples = hooks.forward_backward(step)
    _call(hooks.after_backward, step)
    with ctx.tracer.span("optimizer", step=step) as span:
        hooks.stepper.step(step, span)
    _call(hooks.after_update, step)
    ctx.record_memory(hooks.memory_params, hooks.memory_optimizer)
    ctx.step_done(step, loss, samples, time.perf_counter() - t0)
    ctx.maybe_checkpoint(step, hooks.checkpoint_state)
    ctx.tracer.maybe_flush()


def _call(hook: Optional[StepFn], step: int) -> None:
    if hook is not None:
        hook(step)
