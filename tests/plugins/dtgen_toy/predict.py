"""How the toy strategy is simulated: one worker, no communication."""

KIND = "toy"


def simulate_steps(sim, steps: int) -> None:
    t = 0.0
    for step in range(steps):
        start = t + sim.costs.overhead(step)
        end = sim.optimizer(0, step, sim.compute(0, step, start, sim.spec.training.batch_size, 1))
        sim.rec.step(sim.ids[0], step, t, end)
        t = end
