"""One entry point: simulate(spec, costs) runs the strategy's schedule and returns a Result.

Each strategy's schedule lives in its predict plugin (strategies/<kind>/predict.py,
`simulate_steps`), which mirrors the runner's module of that kind (runner/strategies/).
`Simulation` holds what every schedule shares: ranks, ids, model sizes, stragglers, and
the pieces of a step most strategies have (untraced start, compute, optimizer step).
Must not import torch.
"""

from __future__ import annotations

from .blocks import model_blocks
from .engine import Recorder, Result
from .plugin import REGISTRY


def roles(spec) -> list[tuple[str, str]]:
    """(role, id) per rank, as the runner's strategies number them."""
    return REGISTRY.get(spec.strategy.kind).roles(spec)


class Simulation:
    def __init__(self, spec, costs, record: bool = True):
        self.spec, self.costs = spec, costs
        r = roles(spec)
        self.ids = [i for _, i in r]
        self.rec = Recorder(self.ids, [role for role, _ in r], record)
        self.n_workers = spec.topology.workers.count
        self.slow = [spec.topology.workers.slowdown_of(i) if i.startswith("w") else 1.0 for i in self.ids]
        self.blocks = model_blocks(spec)
        self.params = sum(b.params for b in self.blocks)
        self.tensors = sum(b.tensors for b in self.blocks)
        self.nbytes = 4 * self.params

    def start(self, k: int, step: int, free: list) -> float:
        """Where step's traced work begins: after the untraced per-step time, which the runner's
        step time counts (batch gathering sits inside forward_backward, before `forward`)."""
        return free[k] + self.costs.overhead(step)

    def compute(self, k: int, step: int, t: float, samples: int, active: int) -> float:
        """forward, backward, straggler sleep of worker rank k from t; returns the end."""
        c, rec = self.costs, self.rec
        f = c.noisy(c.forward(samples, active=active), step)
        b = c.noisy(c.backward(samples, active=active), step)
        t = rec.span(k, "forward", 0, t, t + f, step)
        t = rec.span(k, "backward", 0, t, t + b, step)
        slow = self.slow[k]
        if slow > 1:
            t = rec.span(k, "slowdown", 0, t, t + (slow - 1) * (f + b), step, factor=slow)
        return t

    def optimizer(self, k: int, step: int, t: float) -> float:
        """Worker rank k's optimizer step over the whole model from t; returns the end."""
        c = self.costs
        return self.rec.span(k, "optimizer", 0, t,
                             t + c.noisy(c.optimizer(self.params, self.tensors, self.n_workers), step), step)


SETTLE_STEPS, SETTLE_ROUNDS = 10, 4


def settle_duty(spec, costs) -> None:
    """Find the share of the time a rank computes (Contention.share), once per contention
    layer: simulate with every rank computing at once, measure the duty, simulate with it,
    until it moves by under 0.02 (at most SETTLE_ROUNDS short simulations). On shared cores
    a rank that waits for a message leaves its core to another's compute, so compute slows
    by the processes computing at the same time, not by every process there is. A core per
    rank (or an illustrative calibration's million cores), or no contention, never shares:
    nothing to settle."""
    layer = costs.contention
    if layer.settled:
        return
    layer.settled = True
    if not layer.settles:
        return
    # the settling simulations must not move the prediction's own draws
    states = [(r, r.getstate()) for r in (costs.draw, costs.rng) if r is not None]
    for _ in range(SETTLE_ROUNDS):
        sim = Simulation(spec, costs, record=False)
        REGISTRY.get(spec.strategy.kind).simulate_steps(sim, SETTLE_STEPS)
        duty = sim.rec.duty()
        moved = abs(duty - layer.duty)
        costs.set_duty(duty)
        if moved < 0.02:
            break
    for r, state in states:
        r.setstate(state)


def simulate(spec, costs, steps: int | None = None, record: bool = True) -> Result:
    """Simulate `steps` (default: the spec's) steps of the spec's strategy."""
    steps = spec.training.steps if steps is None else steps
    settle_duty(spec, costs)
    sim = Simulation(spec, costs, record)
    REGISTRY.get(spec.strategy.kind).simulate_steps(sim, steps)
    return sim.rec.result
