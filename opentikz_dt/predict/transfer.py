"""What a calibration carries to a spec it was not made on, said in the prediction.

A calibration's costs are costs of mechanisms the simulator composes (costs.py): compute
per block and sample, an optimizer step per tensor and parameter, a message (latency +
bytes x beta), a collective, the untraced time of a step, the spread of a rank's compute.
A prediction of another strategy or worker count composes the same mechanisms in another
schedule. What processes sharing cores wait for a core is the contention layer's
(contention.py: the compute share, a message's and a collective step's wait, computed
there by `wait_scale`, `crowd_wait`, `collective_wait` and `crowd_untraced`).

This module decides which of a calibration's mechanisms' costs are carried: its per-step
untraced time holds that strategy's waits for a core between spans (`untraced_floor`:
another strategy, or a core per rank, gets its floor as the cost per step, the interval's
upper end its median), and a latency solved from a pipeline's step time holds that
schedule's own work (`carried_latency`: another schedule gets the traced one, the
interval the solved one). `caveats` names what is carried, the contention layer's waits
included, for the prediction's run.json and its figures' notes. Must not import torch.
"""

from __future__ import annotations

import statistics

from ..strategies import kinds, strategy
from .calibration import same_strategy
from .contention import (collective_wait, crowd_untraced, crowd_wait, crowded_hop, ring_chain_hop, wait_scale,
                         waits_as_ring_hops)
from .fit import FLOOR_QUANTILE
from .simulate import roles

# collective_wait's caveat, which predict.py drops where the strategy ran no collective
COLLECTIVE_NOTE = "probed collectives wait for a core as the run's messages do"


def describe_strategy(block: dict) -> str:
    """'allreduce ring', 'parameter-server sync', 'pipeline gpipe': the kind and the words of
    the block its strategy chooses between (its descriptor lists more than one value)."""
    kind = str(block.get("kind", "?"))
    words = [kind]
    if kind in kinds():
        desc = strategy(kind)
        chosen = {"algorithm": len(desc.algorithms) > 1, "sync": len(desc.sync_modes) > 1,
                  "schedule": "schedule" in desc.options}
        words += [str(block[k]) for k in ("algorithm", "sync", "schedule") if chosen[k] and block.get(k)]
    return " ".join(words)


def caveats(cal, spec, dedicated: bool) -> list[str]:
    """What this prediction carries from another strategy or size (empty: the calibration was
    made on this spec's strategy and size, or says nothing of what it was made on)."""
    made = cal.data.get("made_for")
    if not isinstance(made, dict):
        return []
    out = []
    theirs, ours = dict(made.get("strategy") or {}), dict(spec.data.get("strategy") or {})
    if not same_strategy(made, spec):
        floor, mean = untraced_floor(cal, spec, dedicated), float(cal.data["compute"]["step_overhead_s"])
        typical = untraced_typical(cal)
        rest = ("none with a core per rank" if dedicated or typical is None else
                f"up to its median ({typical * 1e3:.2f} ms) only in the interval's upper end")
        untraced = ("its untraced time per step as a cost per step" if floor is None else
                    f"of its untraced time per step only the floor ({floor * 1e3:.2f} ms of {mean * 1e3:.2f} ms; "
                    f"the rest, that run's waits for a core between spans, {rest})")
        traced = carried_latency(cal, spec)
        latency = ("its message latency is carried" if traced is None else
                   f"its message latency as its trace showed it ({traced * 1e6:.0f} us; the "
                   f"{float(cal.data['comm']['p2p']['alpha_s']) * 1e6:.0f} us fitted to its step time holds "
                   f"that schedule's own work, only in the interval's upper end) is carried")
        out.append(f"calibrated on {describe_strategy(theirs)}: {latency} to "
                   f"{describe_strategy(ours)} as a cost per message, {untraced}")
    waits = collective_wait(cal, spec, dedicated)
    if waits is not None and waits() > 0:
        out.append(f"{COLLECTIVE_NOTE}: the probe called each collective back to back, so each of its "
                   f"steps carries the calibration run's wait for a core per message ({waits() * 1e6:.0f} us "
                   f"with every rank runnable)")
    shared = gpu_sharing(cal, spec)
    if shared is not None:
        out.append(shared)
    ranks, here = made.get("ranks"), len(roles(spec))
    if ranks and here and ranks != here and not dedicated:
        c = f"{cal.cores:g}"
        crowded = crowd_wait(cal, spec, dedicated)
        if crowded is not None:
            run = cal.data["comm"]["p2p"]["crowding"]
            if ring_chain_hop(cal, spec):
                waits = (f"a ring hop waits {crowded * 1e6:.0f} us for cores (the crowded run's hop, "
                         f"{crowded_hop(run) * 1e6:.0f} us with {run['processes']:g} processes on {run['cores']:g} "
                         f"cores, beyond a message alone, scaled by (1 - {run['cores']:g}/k))")
            else:
                law = (f"(1 - {run['cores']:g}/k), as a ring's hop" if waits_as_ring_hops(spec)
                       else f"(k - {run['cores']:g})/{run['cores']:g}")
                waits = (f"a message waits {crowded * 1e6:.0f} us for a core (the crowded run: "
                         f"{float(run['wait_s']) * 1e6:.0f} us with {run['processes']:g} processes on "
                         f"{run['cores']:g} cores, scaled by {law})")
        elif wait_scale(cal, spec, dedicated) is not None and ranks > cal.cores:
            waits = f"a message's wait for a core is scaled by (1 - {c}/k)"
        else:
            waits = "a message's wait for a core is not (none was measured)"
        grown = crowd_untraced(cal, spec, dedicated)
        if grown is not None:
            run = cal.data["comm"]["p2p"]["crowding"]
            own = float(cal.data["compute"]["step_overhead_s"])
            waits += (f"; its untraced time per step grows as the crowded run's did ({own * 1e3:.2f} ms with "
                      f"{ranks} processes, {float(run['untraced_s']) * 1e3:.2f} ms with {run['processes']:g}; "
                      f"here {own * grown * 1e3:.2f} ms)")
        out.append(f"calibrated with {ranks} processes on {c} cores, predicted with {here}: compute "
                   f"sharing is scaled (max(1, k/{c})), {waits}")
    return out


def ranks_per_gpu(ranks: int, hosts: int, gpus: int) -> int:
    """The most ranks on one GPU: each host's ranks round-robin on its GPUs (runner/placement.py)."""
    per_host = -(-ranks // max(1, hosts))  # ceiling divisions
    return -(-per_host // max(1, gpus))


def gpu_sharing(cal, spec) -> str | None:
    """The caveat of a prediction with another number of ranks per GPU than its GPU
    calibration had, where either shares a GPU; None otherwise.

    Ranks sharing a GPU wait for it: their kernels and their messages' copies through host
    memory queue behind the other processes' work. A calibration holds that wait as it was
    at its own ranks per GPU, and nothing scales it: measured on one H100
    (benchmarks/results/predict-transfer_h100_2026-11.md),
    calibrations at 2 ranks predicted 4 ranks sharing the GPU 22% (native all-reduce) and
    39% (ring) low, the ring's hops taking twice as long (0.70 ms against 0.35 predicted),
    its compute as predicted. One pair of sizes is too little to model it from, so it is
    said instead."""
    device, made = cal.data.get("device") or {}, cal.data.get("made_for")
    # (a spec that asks for the CPU is refused a GPU calibration: calibration.py)
    if device.get("kind") != "cuda" or not isinstance(made, dict) or not made.get("ranks"):
        return None
    gpus = int(device.get("count") or 1)
    theirs = ranks_per_gpu(int(made["ranks"]), int(made.get("hosts") or 1), gpus)
    ours = ranks_per_gpu(len(roles(spec)), spec.topology.hosts, gpus)
    if theirs == ours:
        return None
    return (f"calibrated with {theirs} rank{'s' if theirs > 1 else ''} per GPU, predicted with {ours}: what a rank "
            f"waits for a shared GPU (its kernels, its messages' copies through host memory) is carried as "
            f"measured with {theirs}, not scaled (on one H100, 2 to 4 ranks per GPU ran 22-39% slower than "
            f"predicted)")



def untraced_floor(cal, spec, dedicated: bool = False) -> float | None:
    """The untraced time per step (s) carried to another strategy, or to a core per rank:
    the low quantile of the calibration run's untraced gaps (its `noise.overhead_s`), the
    runner's own work between spans. The rest of its mean is what that run's ranks waited
    for a core between spans, which depends on how that strategy's ranks block and wake
    (measured on the 2-core box, 4 processes: allreduce ring 1.75 ms a step, of which
    0.35 ms the floor; tree 0.68 ms; parameter server 0.13 ms), so it is not carried to
    another strategy (the interval's upper end carries the median: untraced_typical), and a core
    per rank has none. None: carry it whole (the calibrated strategy on shared cores, or
    no gaps recorded)."""
    made = cal.data.get("made_for")
    if not isinstance(made, dict):
        return None
    gaps = cal.untraced_gaps
    if (same_strategy(made, spec) and not dedicated) or len(gaps) < 5:
        return None
    return gaps[int(FLOOR_QUANTILE * (len(gaps) - 1))]


def untraced_typical(cal) -> float | None:
    """The calibration run's median untraced time per step (s), which the interval's upper
    end carries to another strategy (predict.py), or None where it recorded no gaps.

    Not its mean: the mean holds that strategy's long waits for a core, which come from how
    often its ranks block and wake (the ring: 10.7 untraced stretches a step, the others
    3 to 6, measured here), and a ring calibration's mean put the upper end of a parameter
    server's prediction 2.5x its step time. Measured on the 2-core box (4 processes),
    every other strategy's mean untraced time per step was at or below the ring's median
    (ring: floor 0.68-0.73 ms, median 1.0-1.16 ms, mean 2.2-2.6 ms; tree 0.88-1.09, central
    storage 0.55-0.72, hierarchical 0.49-0.51, parameter servers 0.27-0.44, native
    0.24-0.34, gossip 0.27-0.28)."""
    gaps = cal.untraced_gaps
    return statistics.median(gaps) if len(gaps) >= 5 else None








def carried_latency(cal, spec) -> float | None:
    """The message latency (s) carried to another strategy where the calibrated one was
    solved from its step time (comm.p2p.alpha_traced_s, a pipeline's fit): the latency its
    trace showed directly. The solved one also holds that schedule's own work on its
    critical path (GPipe calibrations here: 502-673 us solved, 151-182 us traced; their 1F1B
    predictions +29..+45% with the solved one), so it is kept for the calibrated strategy and
    the interval's upper end. None: carry the fitted latency."""
    made, p2p = cal.data.get("made_for"), cal.data["comm"]["p2p"]
    if not isinstance(made, dict) or "alpha_traced_s" not in p2p or same_strategy(made, spec):
        return None
    return float(p2p["alpha_traced_s"])



def short(notes: list[str]) -> str:
    """The caveats for a figure's note: each one's first clause ('calibrated on allreduce ring')."""
    return "; ".join(n.split(":")[0] for n in notes) + " (run.json: predicted.transfer says what is carried)"
