"""The contention layer: what a rank waits for a core where processes share cores.

The cost model (costs.py) knows mechanisms: compute per block and sample, a message's
latency and bytes, a collective's steps. Where a CPU calibration's processes outnumber
its cores, the same mechanisms run slower, and this layer says by how much:

- compute: the processes computing at once share the cores (`share`, its `duty`
  settled by the simulator: simulate.settle_duty);
- a message: a blocking receive waits for its process to get a core back (`p2p_wait`,
  in the message's latency), which on a given link overlaps the bytes' time on the wire
  (`on_wire`); a tree hop waits as the ranks runnable then (`waiting_share`);
- a collective: each step of one the probe measured back to back waits as a run's
  messages do, and every step waits as the crowded run's messages did (`step_wait`);
- the untraced time per step grows as the crowded run's did (`untraced`).

`contention_for` builds the layer of a prediction from its calibration (the numbers:
`wait_scale`, `crowd_wait`, `collective_wait`, `crowd_untraced` below); `Contention.none`
is the layer without contention, whose answers leave the mechanisms' costs as they are.
Must not import torch.
"""

from __future__ import annotations

from .calibration import same_strategy
from .plugin import REGISTRY
from .simulate import roles

# a calibration of more cores than this has a core per rank (the illustrative one's million)
CORE_PER_RANK = 1e6


def wait_ratio(cores: float, now: float, then: float) -> float:
    """A wait for a core measured with `then` processes runnable on `cores` (more than the
    cores), carried to `now`: a message finds its receiver off a core with a chance of about
    1 - cores/k, so the wait scales by (1 - c/now) / (1 - c/then), and is none at or below
    the cores (wait_scale, collective_wait, Contention.waiting_share)."""
    return max(0.0, 1 - cores / now) / (1 - cores / then)


class Contention:
    """Processes sharing cores, as one prediction sees them (contention_for builds it).

    `cores`: the calibration's effective cores, shared by `processes` ranks; `scale`: how
    much of the calibration run's wait per message (its p2p fit's `core_wait_s` beside
    `alpha_floor_s`, the message alone) a message's latency carries, None to keep the
    fitted latency as it is; `crowd_s`: the crowded run's wait per message, added to every
    message and collective step; `collective_wait`: a function of the processes runnable
    that gives a probed collective's wait per step (s); `untraced_growth`: a factor on the
    untraced time per step; `wire`: messages cross a given link (--link); `latency_given`:
    a given latency (--latency-ms) replaces the calibrated one, its waits with it."""

    def __init__(self, cal, processes: int, *, cores: float | None = None, scale: float | None = None,
                 crowd_s: float | None = None, collective_wait=None, untraced_growth: float | None = None,
                 wire: bool = False, latency_given: bool = False, shared: bool = True):
        p2p = cal.data["comm"]["p2p"]
        self.processes = processes
        self.cores = cal.cores if cores is None else cores
        self.shared = shared  # False: the layer without contention (none), compute never shares
        self.core_per_rank = self.cores >= CORE_PER_RANK
        self.duty, self.settled = 1.0, False  # the share of the time a rank computes (share, simulate.py)
        self.wire = wire
        self.scale, self.crowd_s = scale, crowd_s
        self.alone_s = float(p2p["alpha_floor_s"]) if scale is not None else None
        self.core_wait_s = float(p2p["core_wait_s"]) if scale is not None else None
        self.crowd_wait_us = 1e6 * (crowd_s or 0.0) if not latency_given else 0.0
        # what a message's latency holds of a wait for its receiver to get a core back (µs): a
        # receive that wakes its process again pays it again (gossip's several receives)
        self.p2p_wait = 0.0 if latency_given else 1e6 * (
            (1.0 if scale is None else scale) * float(p2p.get("core_wait_s", 0.0)) + (crowd_s or 0.0))
        self.probed = cal.probed
        self.collective_wait = None if latency_given else collective_wait
        self.untraced_growth = untraced_growth

    @classmethod
    def none(cls, cal, processes: int = 0, dedicated: bool = True) -> Contention:
        """No contention: compute never shares a core, no message or collective step waits for
        one, a message's bytes take their time on the wire. A message's latency is the message
        alone: its fitted latency less the calibration run's wait for a core where the fit split
        it (comm.p2p.alpha_floor_s). `dedicated`: a core per rank (--dedicated)."""
        split = isinstance(cal.data.get("made_for"), dict) and {"alpha_floor_s", "core_wait_s"} <= set(
            cal.data["comm"]["p2p"])
        layer = cls(cal, processes, cores=1e9 if dedicated else None, scale=0.0 if split else None, shared=False)
        layer.p2p_wait = 0.0
        return layer

    @classmethod
    def as_measured(cls, cal, spec, wire: bool = False, latency_given: bool = False) -> Contention:
        """The calibration's own layer, nothing carried: its cores, and its fitted message
        latency with the wait its run measured (Costs without a layer: fit.py, tests)."""
        return cls(cal, len(roles(spec)), wire=wire, latency_given=latency_given)

    # ------------------------------------------------------------ compute
    def share(self, active: float) -> float:
        """How much slower compute runs with `active` processes that compute, on the cores:
        a computing process finds 1 + (active - 1) x duty of them computing with it, where
        `duty` is the share of the time each computes (simulate.settle_duty; 1 until settled:
        all at once). Measured on the 2-core box, a computing rank's company: 1.7 in a ring of
        4 and of 8, 1.8 for 8 parameter-server workers, 3.7 for 4 transformer ranks, which
        all compute (mean-field 1 + (k - 1) x duty: 1.3, 1.4, 1.9, 3.7)."""
        if not self.shared:
            return 1.0
        company = 1 + (active - 1) * self.duty if active > 1 else active
        return max(1.0, company / self.cores)

    @property
    def settles(self) -> bool:
        """Whether the simulator settles the duty (simulate.settle_duty): not with a core per rank."""
        return self.shared and not self.core_per_rank

    def set_duty(self, duty: float) -> None:
        self.duty = duty

    # ------------------------------------------------------------ messages
    def latency(self, kind: str, alpha: float) -> float:
        """A message's or a collective step's latency (s) with its waits for a core: the message
        alone plus the `scale` of the calibration run's wait (wait_scale), and the crowded run's
        wait (crowd_wait)."""
        if kind == "p2p" and self.scale is not None:
            # a message alone plus the share of the calibrated wait for a core it carries
            alpha = self.alone_s + self.scale * self.core_wait_s
        if self.crowd_s is not None:
            # every message of a point-to-point exchange or a collective's steps waits for
            # its receiver to get a core back
            alpha += self.crowd_s
        return alpha

    def on_wire(self, wire_us: float, wait_us: float) -> float:
        """A message's bytes' time beyond its latency, which holds `wait_us` of waiting for
        its receiver to get a core back. Through loopback the bytes are copied by a core and
        add to that wait; on a given link (--link) they travel while the processes holding
        the cores run on, so the receiver's wait for a core starts as they arrive and only
        the longer of the two counts. Measured on the emulated 2 hosts x 4 ranks at 200 mbit
        (8 processes on 2 cores): the link made the ring's step no slower than
        on one host (25.9 against 26.3 ms), native's 3% slower; adding wire and wait
        predicted them +20% and +45%."""
        return max(0.0, wire_us - wait_us) if self.wire else wire_us

    def waiting_share(self, runnable: float) -> float:
        """How much of a message's wait for a core (p2p_wait, at every process runnable) is left
        when only a `runnable` share of the processes can run: (1 - c/(share x k)) / (1 - c/k)
        for k processes on c cores, as wait_scale scales it between process counts."""
        k, c = self.processes, self.cores
        if runnable >= 1.0 or not k or k <= c:
            return 1.0
        return wait_ratio(c, runnable * k, k)

    def wait_off(self, runnable: float) -> float:
        """The part of a message's wait for a core (µs) that a `runnable` share of the
        processes spares it (a tree hop's: Costs.tree_hops)."""
        return self.p2p_wait * (1 - self.waiting_share(runnable))

    def probed_wait(self, kind: str, active: int | None) -> float:
        """A probed collective's step's wait for a core (µs) with `active` processes runnable."""
        if self.collective_wait is None or kind not in self.probed:
            return 0.0
        return 1e6 * self.collective_wait(active)

    def step_wait(self, kind: str, active: int | None) -> float:
        """What a collective step's latency holds of a wait for a core (µs): the crowded run's,
        or the probed collective's (Costs.step_alpha)."""
        return self.crowd_wait_us + self.probed_wait(kind, active)

    # ------------------------------------------------------------ untraced time
    def untraced(self, overhead_us: float, overheads: list) -> tuple[float, list]:
        """The untraced time per step and its draws, grown with the processes crowding the
        cores (crowd_untraced)."""
        if self.untraced_growth is None:
            return overhead_us, overheads
        return overhead_us * self.untraced_growth, [g * self.untraced_growth for g in overheads]


def contention_for(cal, spec, dedicated: bool = False, link: float | None = None,
                   latency_s: float | None = None) -> Contention:
    """The contention layer of a prediction of `spec` from `cal`.

    It applies only when a CPU calibration's ranks outnumber its cores, with two exceptions
    that keep what a calibration measured: a calibration whose fit split its message latency
    into a message alone and a wait for a core (fit.message_split) carries that wait to a
    prediction at or below the cores too (its run's own, as measured, where that run had a
    core per process; none where it had more processes than cores), and a GPU calibration
    counts its host's CPU cores (fit.py), whose processes wait for them as a CPU
    calibration's do. So the layer is `Contention.none` exactly when:

    - `dedicated` (--dedicated, sweeps): a core per rank, a message alone; unless the
      calibration holds a wait per message it cannot take out of its latency (`core_wait_s`
      without `alpha_floor_s` or `made_for`, which no fit writes): that is carried as it is;
    - or the prediction's processes fit the calibration's cores, the calibration split no
      wait for a core out of its message latency (an illustrative, synthetic, profiled or
      probe-only calibration) and no crowded run's wait applies (crowd_wait).

    Otherwise it carries: the compute share beyond the cores; the calibration run's wait
    per message scaled to this process count (wait_scale); beyond the cores and the
    calibration run's processes, the crowded run's wait (crowd_wait) and untraced growth
    (crowd_untraced); the probed collectives' step waits (collective_wait). A given latency
    (`latency_s`) replaces the calibrated one with its waits; a given link (`link`) lets a
    message's wait overlap its bytes (Contention.on_wire)."""
    p2p, k = cal.data["comm"]["p2p"], len(roles(spec))
    measured_wait = "core_wait_s" in p2p
    split = isinstance(cal.data.get("made_for"), dict) and measured_wait and "alpha_floor_s" in p2p
    if dedicated and (split or not measured_wait):
        return Contention.none(cal, k, dedicated=True)
    if not dedicated and k <= cal.cores and not measured_wait and crowd_wait(cal, spec, dedicated) is None:
        return Contention.none(cal, k, dedicated=False)
    return Contention(cal, k, cores=1e9 if dedicated else None, scale=wait_scale(cal, spec, dedicated),
                      crowd_s=crowd_wait(cal, spec, dedicated), collective_wait=collective_wait(cal, spec, dedicated),
                      untraced_growth=crowd_untraced(cal, spec, dedicated), wire=link is not None,
                      latency_given=latency_s is not None)


# ---------------------------------------------------------------- the waits a calibration carries


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


def crowd_wait(cal, spec, dedicated: bool) -> float | None:
    """Seconds a message waits for its receiver to get a core back at this spec's process
    count, from the calibration's crowded run (comm.p2p.crowding, runner/crowding.py), or
    None where that does not apply: a core per rank, no more processes than cores or than
    the calibration's own run had (its fitted wait is carried by wait_scale then), or no
    crowded run. Where it applies it replaces the calibration run's own wait (contention_for).

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

