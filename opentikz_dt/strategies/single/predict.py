"""One worker, no communication: forward, backward, optimizer step (runner/strategies/single.py).
Must not import torch.
"""

from __future__ import annotations

KIND = "single"


def simulate_steps(sim, steps: int) -> None:
    rec = sim.rec
    batch = sim.spec.training.batch_size
    t = 0.0
    for step in range(steps):
        start = t + sim.costs.overhead(step)
        end = sim.optimizer(0, step, sim.compute(0, step, start, batch, 1))
        rec.step(sim.ids[0], step, t, end)
        t = end


def cluster_layout(spec) -> tuple[int, int, int, str, str, bool]:
    """One worker: no parallel dimension."""
    return 1, 1, 1, "native", "", False
