"""A prediction's interval: how far the run it predicts may land, from what was measured.

Four sources, all measured, none invented (and a fifth where a calibration is carried to
another strategy: the simulation with that strategy's median untraced time):
- the simulator's sampling: the calibrated spread (each rank's compute over its step's
  mean, untraced stalls, exchanges) is drawn with a seed; the same prediction with other
  seeds gives other step times. SEEDS simulations (no trace kept) give their range.
- the calibration run's own drift (`noise.block_ratios`, fit.py): its steady steps cut
  into consecutive blocks, each block's mean over the whole. On a machine whose load
  changes, a run of the same spec lands that far from another.
- the calibration's repeated runs (`noise.repeats`, runner/calibrate.py): the calibrated
  spec runs three times, fitted from the median run, the other two each a ratio to it (and
  the crowded run, where it is made, runs again). What persists through one run
  and changes between runs (the processes' placement on the cores, the machine's load)
  shows only there: two runs of one spec here land up to 43% apart, while the blocks of
  one run stay within 10%. A run may land as far on either side.
- the probe's rounds (`comm.<collective>.rounds`, runner/calibrate.py): a collective
  that only the probe measured (a ring calibration predicting the native all-reduce) is
  timed in rounds spread over the probe; the prediction simulated with each collective's
  fastest and with its slowest round. One block of calls measured one spec's all-reduce
  latency 751 to 1353 us in three calibrations here, while the run's repeat stayed 0.04%.
The interval is the sampling range (with the upper end and the probe's rounds) widened by
the block ratios' and the repeats' range. A calibration that holds no spread (the
illustrative cost model) gives a point: it says so (`sources` is empty). Must not import torch.
"""

from __future__ import annotations

import copy
import random
import statistics

from .calibration import Calibration
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


def probe_rounds(cal) -> int:
    return max((len(cal.data["comm"][k].get("rounds") or []) for k in cal.probed), default=0)


def probe_round_ends(cal: Calibration) -> list[Calibration]:
    """The calibration with each probed collective's fastest round of the probe, and with its
    slowest (runner/calibrate.py times them in rounds spread over the probe), or [] where it
    recorded no rounds. A round's speed: its fit's time summed over the sizes it measured."""
    sizes = sorted({n for points in ((cal.data.get("measured") or {}).get("collectives") or {}).values()
                    for n, _ in points}) or [1024, 4 << 20]
    ends = []
    for pick in (min, max):
        data = copy.deepcopy(cal.data)
        changed = False
        for kind in cal.probed:
            block = data["comm"][kind]
            rounds = block.get("rounds") or []
            if len(rounds) < 2:
                continue
            a, b = pick(rounds, key=lambda r: sum(r[0] + r[1] * n for n in sizes))
            block["alpha_s"], block["beta_s_per_byte"], changed = a, b, True
        if changed:
            ends.append(Calibration(data, cal.path, cal.warnings))
    return ends


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
    if costs.probed_used and costs.probe_ends:  # a collective only the probe measured, in rounds
        for end in costs.probe_ends:
            m = metrics_of(simulate(spec, end, steps, record=False), spec, steps)
            steps_s.append(mean_step_s(m))
            rates.append(m["samples_per_s"])
        sources.append(f"the probe's collectives at their fastest and slowest of {probe_rounds(costs.cal)} rounds")
    noise = costs.cal.data.get("noise") or {}
    blocks = [float(r) for r in noise.get("block_ratios", []) if r > 0]
    low, high = (min(1.0, min(blocks)), max(1.0, max(blocks))) if blocks else (1.0, 1.0)
    if blocks:
        sources.append("the calibration run's drift, " + (f"{1 - low:.0%} below to {high - 1:.0%} above"
                                                          if max(1 - low, high - 1) >= 0.005 else "under 1%"))
    repeats = [float(r["ratio"]) for r in noise.get("repeats", []) if float(r["ratio"]) > 0]
    if repeats:
        # which of two runs is the usual one is not known: the run may land as far on either side
        apart = max(max(r, 1 / r) for r in repeats)
        low, high = min(low, 1 / apart), max(high, apart)
        sources.append(f"the calibration's repeated run{'s' if len(repeats) > 1 else ''}, "
                       f"up to {apart - 1:.0%} apart")
    return {"step_time_interval_s": [round(min(steps_s) * low, 6), round(max(steps_s) * high, 6)],
            "samples_per_s_interval": [round(min(rates) / high, 2), round(max(rates) / low, 2)],
            "interval_sources": sources}

