"""How the toy strategy runs: one rank, the whole batch, its gradients times
`strategy.toy_factor` (with plain SGD: the learning rate times the factor), on the
runner's shared training loop (runner/loop.py)."""

from opentikz_dt.runner.loop import StepHooks, train_steps

KIND = "toy"


def roles(spec):
    return [("worker", "w1")]


def train(ctx) -> None:
    model = ctx.build_model()
    opt = ctx.build_optimizer(model.parameters())
    factor = ctx.spec.strategy.options["toy_factor"]

    def scale_gradients(step):
        for p in model.parameters():
            p.grad.mul_(factor)

    train_steps(ctx, StepHooks(
        forward_backward=lambda step: ctx.forward_backward(model, step, 0, 1),
        after_backward=scale_gradients,
        stepper=ctx.stepper(opt, model.parameters()),
        memory_params=list(model.parameters()), memory_optimizer=opt,
        checkpoint_state=lambda: {"model": model.state_dict(), "opt": opt.state_dict()},
    ))
    ctx.save_model(model.state_dict())
