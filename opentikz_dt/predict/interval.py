"""A prediction's interval: how far the run it predicts may land, from what was measured.

Two sources, both measured, neither invented (and a third where a calibration is
carried to another strategy: the simulation with that strategy's untraced waits whole):
- the simulator's sampling: the calibrated spread (each rank's compute over its step's
  mean, untraced stalls, exchanges) is drawn with a seed; the same prediction with other
  seeds gives other step times. SEEDS simulations (no trace kept) give their range.
- the calibration run's own repeat (`noise.block_ratios`, fit.py): its steady steps cut
  into consecutive blocks, each block's mean over the whole. On a machine whose load
  changes, a run of the same spec lands that far from another.
The interval is the sampling range widened by the block ratios' range. A calibration that
holds no spread (the illustrative cost model) gives a point: the interval says so
(`sources` is empty). Must not import torch.
"""

from __future__ import annotations

import copy
import random
import statistics

from .rundir import metrics_of
from .simulate import simulate

SEEDS = 4  # simulations besides the prediction's own (seed 0)


def mean_step_s(metrics: dict) -> float:
    times = list(metrics["step_time_s"].values())
    return statistics.fmean(times) if times else 0.0


def reseeded(costs, seed: int):
    """The same costs drawing their spread from another seed."""
    other = copy.copy(costs)
    other.draw = random.Random(seed)
    return other


def interval(spec, costs, steps: int, metrics: dict, seeds: int = SEEDS) -> dict:
    """Metrics keys for the prediction's interval: step_time_interval_s (the mean step time
    over workers), samples_per_s_interval, and interval_sources (what it holds)."""
    steps_s, rates, sources = [mean_step_s(metrics)], [metrics["samples_per_s"]], []
    if costs.draw is not None and seeds > 0:
        for seed in range(1, seeds + 1):
            m = metrics_of(simulate(spec, reseeded(costs, seed), steps, record=False), spec, steps)
            steps_s.append(mean_step_s(m))
            rates.append(m["samples_per_s"])
        sources.append(f"{seeds + 1} simulator seeds")
    upper = costs.upper
    if upper is not None:  # costs carried from another strategy whose whole untraced time may apply (transfer.py)
        m = metrics_of(simulate(spec, upper, steps, record=False), spec, steps)
        steps_s.append(mean_step_s(m))
        rates.append(m["samples_per_s"])
        sources.append(f"{costs.upper_holds} (upper end)")
    blocks = [float(r) for r in (costs.cal.data.get("noise") or {}).get("block_ratios", []) if r > 0]
    low, high = (min(1.0, min(blocks)), max(1.0, max(blocks))) if blocks else (1.0, 1.0)
    if blocks:
        sources.append("the calibration run's drift, " + (f"{1 - low:.0%} below to {high - 1:.0%} above"
                                                          if max(1 - low, high - 1) >= 0.005 else "under 1%"))
    return {"step_time_interval_s": [round(min(steps_s) * low, 6), round(max(steps_s) * high, 6)],
            "samples_per_s_interval": [round(min(rates) / high, 2), round(max(rates) / low, 2)],
            "interval_sources": sources}

