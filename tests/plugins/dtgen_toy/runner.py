"""How the toy strategy runs: one rank, the whole batch, its gradients times
`strategy.toy_factor` (with plain SGD: the learning rate times the factor)."""

import time

KIND = "toy"


def roles(spec):
    return [("worker", "w1")]


def train(ctx) -> None:
    model = ctx.build_model()
    opt = ctx.build_optimizer(model.parameters())
    factor = ctx.spec.strategy.options["toy_factor"]
    stepper = ctx.stepper(opt, model.parameters())
    for step in range(ctx.start_step, ctx.steps):
        t0 = time.perf_counter()
        loss, samples = ctx.forward_backward(model, step, 0, 1)
        for p in model.parameters():
            p.grad.mul_(factor)
        with ctx.tracer.span("optimizer", step=step) as span:
            stepper.step(step, span)
        ctx.record_memory(model.parameters(), opt)
        ctx.metrics.step_done(step, loss.item(), samples, time.perf_counter() - t0)
    ctx.save_model(model.state_dict())
