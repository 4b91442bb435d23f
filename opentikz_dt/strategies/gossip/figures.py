"""Figures of decentralized gossip: a ring of peers, and the expected schedule of workers
at their own pace, each waiting only for the neighbours it averages with. Must not import
torch."""

from __future__ import annotations

from ...figures.schedule import STEPS, Sim, one_panel
from ...figures.spacing import gossip_needs
from ...figures.topology_peer import gossip_layout

KIND = "gossip"
TIMELINE_BOXES = ("forward", "backward", "slowdown", "gossip", "optimizer", "skipped", "wait")


def layout(spec, spacing):
    return gossip_layout(spec, spacing)


def spacing_needs(sizes):
    return gossip_needs(sizes)


def expected_timeline(spec, cost):
    sim, end = _schedule(spec, cost)
    return one_panel(spec, sim, end, f"gossip: average with {spec.strategy.peers} ring neighbours; no global barrier, "
                                     "each waits only for its neighbours")


def _schedule(spec, cost) -> tuple[Sim, float]:
    sim = Sim(spec, cost)
    workers = spec.topology.workers.ids
    n, peers = len(workers), spec.strategy.peers
    offsets = []
    for hop in range(1, n):
        for sign in (1, -1):
            if len(offsets) < peers and (sign * hop) % n not in [o % n for o in offsets]:
                offsets.append(sign * hop)
    exchange = sim.link(sim.bytes * len(offsets))
    opt = max(cost.min_ms, 2 * sim.params / cost.flops_per_ms)
    # No global barrier: each worker runs at its own pace (a deterministic spread of +-12 %)
    # and from its own start, and waits only for the neighbours it averages with.
    pace = {w: 1.0 + 0.12 * ((3 * k) % 5 - 2) / 2 for k, w in enumerate(workers)}
    start = {w: 0.25 * ((2 * k) % 3) for k, w in enumerate(workers)}
    for _ in range(STEPS):
        ready = {}
        for w in workers:
            end = sim.compute(w, start[w], pace=pace[w])
            ready[w] = sim.add(w, end, end + opt, "optimizer", "opt")
        for k, w in enumerate(workers):
            begin = max([ready[w]] + [ready[workers[(k + o) % n]] for o in offsets])
            sim.add(w, ready[w], begin, "wait")
            start[w] = sim.add(w, begin, begin + exchange, "gossip", "gossip")
    return sim, max(start.values())


def table_name(spec) -> str:
    return "gossip"
