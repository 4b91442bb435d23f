"""What a calibration carries to a spec it was not made on, said in the prediction.

A calibration's costs are costs of mechanisms the simulator composes: compute per block
and sample, an optimizer step per tensor and parameter, a message (latency + bytes x
beta), a collective, the untraced time of a step, the spread of a rank's compute, and
compute slowing down by the processes computing at once on the cores (Costs.share, its
duty settled by the simulator). A prediction of another strategy or worker count composes
the same mechanisms in another schedule.

Some of what a short run measures is tied to the run it came from: its message latency
holds what a blocking receive waits for its process to be scheduled again at that
process count (`wait_scale` carries it to another count; beyond the calibration's own
count, `crowd_wait` carries the wait measured by `dtgen calibrate`'s crowded run
instead; `collective_wait` adds it to the steps of collectives the probe measured back to
back), its per-step untraced time holds that strategy's waits for a core between spans
(`untraced_floor`: another strategy gets its floor, the interval's upper end its median), and a
latency solved from a pipeline's step time holds that schedule's own work
(`carried_latency`: another schedule gets the traced one, the interval the solved one).
`caveats` names what is carried, for the prediction's run.json and its figures' notes.
Must not import torch.
"""

from __future__ import annotations

import statistics

from ..strategies import kinds, strategy
from .costs import wait_ratio
from .fit import FLOOR_QUANTILE
from .simulate import roles
from .plugin import REGISTRY

STRATEGY_WORDS = ("kind", "algorithm", "sync", "schedule")
# collective_wait's caveat, which predict.py drops where the strategy ran no collective
COLLECTIVE_NOTE = "probed collectives wait for a core as the run's messages do"


def same_strategy(made: dict, spec) -> bool:
    """The spec runs the strategy the calibration was made on (`made_for`): the same words of
    its strategy block (kind, algorithm, sync, schedule)."""
    theirs, ours = dict(made.get("strategy") or {}), dict(spec.data.get("strategy") or {})
    return all(theirs.get(k) == ours.get(k) for k in STRATEGY_WORDS)


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


def wait_scale(cal, spec, dedicated: bool) -> float | None:
    """How much of the calibrated wait for a core per message (fit.message_split) this
    prediction carries, or None to keep the fitted message latency as it is (the calibrated
    strategy and process count, or a calibration without the split).

    With k processes runnable on c cores, a message finds its receiver off a core with a
    chance of about 1 - c/k: the wait measured at the calibration's k scales by that ratio,
    and a cluster (a core per rank) has none."""
    made, p2p = cal.data.get("made_for"), cal.data["comm"]["p2p"]
    if not isinstance(made, dict) or "alpha_floor_s" not in p2p or "core_wait_s" not in p2p:
        return None
    if dedicated or crowd_wait(cal, spec, dedicated) is not None:
        return 0.0  # a core per rank waits for none; the crowded run's wait replaces this run's own
    k, measured, c = len(roles(spec)), made.get("ranks") or 0, cal.cores
    if k == measured and same_strategy(made, spec):
        return None
    if measured <= c:
        return 1.0  # measured without waiting for a core: nothing to scale
    return wait_ratio(c, k, measured)


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


def crowd_wait(cal, spec, dedicated: bool) -> float | None:
    """Seconds a message waits for its receiver to get a core back at this spec's process
    count, from the calibration's crowded run (comm.p2p.crowding, runner/crowding.py), or
    None where that does not apply: a core per rank, no more processes than cores or than
    the calibration's own run had (its fitted wait is carried by wait_scale then), or no
    crowded run. Where it applies it replaces the calibration run's own wait (predict.py).

    Measured at 2c processes on c cores; carried as growing with the processes beyond the
    cores, (k - c) / c times the measured one (a quiet-machine probe here: 4 -> 6
    processes on 2 cores, 2.2x the wait, where (k - c) / c says 2x).

    The ring, the strategy the crowded run ran, carries that run's whole hop instead
    (ring_chain_hop): at 2c processes even its fastest hop waited for a predecessor that
    had waited for a core. The native all-reduce, also a ring (waits_as_ring_hops), carries
    the wait growing as the ring's hop does."""
    crowding = cal.data["comm"]["p2p"].get("crowding")
    if dedicated or not isinstance(crowding, dict):
        return None
    made = cal.data.get("made_for")
    measured = int((made.get("ranks") if isinstance(made, dict) else None) or cal.data.get("ranks") or 0)
    c, probe, k = float(crowding["cores"]), float(crowding["processes"]), len(roles(spec))
    if k <= max(c, measured):
        return None
    growth = off_core(c, k) / off_core(c, probe) if waits_as_ring_hops(spec) else (k - c) / (probe - c)
    if ring_chain_hop(cal, spec):  # the crowded run's own strategy, a ring: its whole hop
        floor = float(cal.data["comm"]["p2p"].get("alpha_floor_s", 0.0))
        return max(0.0, crowded_hop(crowding) - floor) * growth
    return float(crowding["wait_s"]) * growth


def crowded_hop(crowding: dict) -> float:
    """The crowded ring run's hop latency (s): as its fit solved it from its step time
    (`hop_s`, strategies/allreduce/predict.py: finish_fit), else, in calibrations made before
    it was recorded, its message alone and its wait."""
    if "hop_s" in crowding:
        return float(crowding["hop_s"])
    return float(crowding["wait_s"]) + float(crowding["alone_s"])


def off_core(c: float, k: float) -> float:
    """The chance that a process finds the one it wakes off a core, k runnable on c cores."""
    return max(0.0, 1 - c / k)


def ring_chain_hop(cal, spec) -> bool:
    """Whether this prediction is of the ring the crowded run ran (its strategy, defaults
    included), which carries the crowded run's whole hop beyond a message alone, growing
    as off_core (crowd_wait).

    The crowded run's hops split into a message alone and a wait as any ring's do, but at
    2c processes even its fastest hop waited for a predecessor that had waited for a core
    (a hop "alone" 0.54 ms there, 25 us with 2 processes on 2 cores): carrying only the
    wait put a ring's hop at 4 processes at half the crowded run's own. The hop carried is
    the one the crowded run's fit solved from its step time (crowded_hop), as the
    calibrated ring's own is (allreduce.finish_fit). A hop of the ring's chain then grows
    more slowly than a lone message's wait: fitted from real runs of
    examples/allreduce-ring.yaml on 2 cores in three runs of the benchmark, a hop took
    0.96-1.19 ms at 4 processes and 1.49-1.58 ms at 8 (x1.3-1.6; off_core says x1.5,
    (k - c) / c x3). The other strategies' waits, lone
    messages and collective steps, keep (k - c) / c: with off_core the 8-worker gossip
    rows of the same runs went from -12..-17% to -39..-42%."""
    crowding = cal.data["comm"]["p2p"].get("crowding")
    return (isinstance(crowding, dict) and "alone_s" in crowding
            and same_strategy({"strategy": crowding.get("strategy") or {}}, spec))


def waits_as_ring_hops(spec) -> bool:
    """Whether the spec's messages wait for a core as a ring's hops do (its plugin says:
    dtgen's ring, and the native all-reduce, gloo's ring), so that the crowded run's wait
    grows as (1 - c/k) (crowd_wait). Gossip's and the parameter servers' lone messages keep
    (k - c)/c: with (1 - c/k) gossip 2 -> 8 went to -39% and -43% in two runs of
    the transfer benchmark."""
    return REGISTRY.get(spec.strategy.kind).waits_as_ring_hops(spec)


def crowd_untraced(cal, spec, dedicated: bool) -> float | None:
    """How much longer the untraced time per step runs at this spec's process count than in
    the calibration's run (a factor on each of its gaps), from the crowded run's own
    untraced time, or None where that does not apply: crowd_wait does not (a core per rank,
    no more processes than cores or than the calibration run had, no crowded run), the
    crowded run was of another strategy than this spec's or the calibration's (it runs
    dtgen's ring: what a ring does between spans is not what a parameter server does), or it
    recorded none.

    Between its spans a ring rank posts its receives and sends, and a rank that does so
    while the others wake for their messages waits for a core: measured here, a ring's
    untraced time per step 0.96 ms at 2 processes on 2 cores, 2.4 ms at 4 and 4.7 ms at 8,
    while the calibration carried 0.96 ms to all (its 4- and 8-worker predictions -33% and
    -23%). Carried through the calibration run's and the crowded run's as growing with
    the chance of finding a core taken, as the ring's hop does (off_core, ring_chain_hop):
    in three later passes the 8-process ring runs' untraced time was 4.1-4.5 ms, where
    growing linearly with the processes put it at 4.2-6.7 ms (their predictions +10% to
    +65%) and off_core at 2.9-3.9 ms. The evidence is mixed: the first measurement above
    fits the line (off_core says 3.1 ms at 8)."""
    if crowd_wait(cal, spec, dedicated) is None:
        return None
    crowding, made = cal.data["comm"]["p2p"]["crowding"], cal.data.get("made_for")
    theirs = {"strategy": crowding.get("strategy") or {}}
    if ("untraced_s" not in crowding or not isinstance(made, dict) or not same_strategy(theirs, spec)
            or not same_strategy(made, spec)):
        return None
    own, crowded = float(cal.data["compute"]["step_overhead_s"]), float(crowding["untraced_s"])
    c, probe, k = float(crowding["cores"]), float(crowding["processes"]), len(roles(spec))
    start = max(c, float(made.get("ranks") or 0))
    if own <= 0 or probe <= start:
        return None
    # more processes never make a step's own work faster: a crowded run that measured less is noise
    grown = (off_core(c, k) - off_core(c, start)) / (off_core(c, probe) - off_core(c, start))
    return max(1.0, (own + (crowded - own) * grown) / own)


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


def collective_wait(cal, spec, dedicated: bool):
    """What each step of a collective the probe measured waits for a core in a run: a
    function of the processes runnable during it (default: every rank of the spec) that
    gives seconds, or None where nothing is added (a core per rank; the crowded run's wait,
    which crowd_wait adds to every collective step already; a calibration without a fitted
    message wait, or whose collectives do not say where they were measured; the calibrated
    strategy at its own process count, whose run measured the collectives it uses).

    The probe calls a collective back to back with nothing computing between, so no call
    finds a process off its core; in a run each of its steps is a message that wakes a
    process that another one's compute may hold the core from. So a probed collective's
    step carries what a message of the calibration's run waited (comm.p2p.core_wait_s),
    scaled as wait_scale scales it to the processes runnable then: (1 - c/k) / (1 - c/m)
    for k of them on c cores, m in the calibration's run. Measured here (a ring calibration,
    4 processes on 2 cores): the native all-reduce -32% and central storage -30% without it;
    the hierarchical all-reduce's step between hosts runs 2 leaders alone, so none waits."""
    made, p2p = cal.data.get("made_for"), cal.data["comm"]["p2p"]
    if dedicated or not isinstance(made, dict) or "core_wait_s" not in p2p or not cal.probed:
        return None
    if crowd_wait(cal, spec, dedicated) is not None:
        return None
    wait, measured, c, k = float(p2p["core_wait_s"]), int(made.get("ranks") or 0), cal.cores, len(roles(spec))
    if k == measured and same_strategy(made, spec):
        return None  # the calibrated spec: a collective it runs, its run measured (fit.py)

    def per_step(active: int | None = None) -> float:
        if measured <= c:  # the run had a core per process: its (small) wait is carried as it is
            return wait
        return wait * wait_ratio(c, k if active is None else active, measured)

    return per_step


def short(notes: list[str]) -> str:
    """The caveats for a figure's note: each one's first clause ('calibrated on allreduce ring')."""
    return "; ".join(n.split(":")[0] for n in notes) + " (run.json: predicted.transfer says what is carried)"
