"""Figures of all-reduce: per algorithm (the descriptor's drawer) a topology — native (a
collective bar), ring, tree, hierarchical — and the expected schedule of its phases
(reduce-scatter and all-gather, the tree's levels, intra- and inter-host). Must not
import torch."""

from __future__ import annotations

import math

from .. import strategy
from ...figures.schedule import STEPS, Sim, one_panel
from ...figures.spacing import allreduce_needs, hierarchical_needs, ring_needs, tree_needs
from ...figures.topology_allreduce import allreduce_layout, hierarchical_layout, ring_layout, tree_layout

KIND = "allreduce"
TIMELINE_BOXES = ("forward", "backward", "slowdown", "allreduce", "allreduce-b", "allreduce-c", "optimizer", "skipped",
                  "wait")

# The descriptor's drawer of each algorithm (opentikz_dt/strategies/allreduce/strategy.py): its
# layout and the gaps it needs.
_DRAWERS = {
    "allreduce": (allreduce_layout, allreduce_needs),
    "ring": (ring_layout, ring_needs),
    "tree": (tree_layout, tree_needs),
    "hierarchical": (hierarchical_layout, hierarchical_needs),
}


def _drawer(spec) -> str:
    return strategy(KIND).drawer(spec.strategy.algorithm)


# ---------------------------------------------------------------- topology


def layout(spec, spacing):
    return _DRAWERS[_drawer(spec)][0](spec, spacing)


def spacing_needs(sizes):
    return _DRAWERS[_drawer(sizes.spec)][1](sizes)


def flow_run(spec) -> bool:
    """The collective's bar sits right of the column (native all-reduce), its links as long as their labels."""
    return _drawer(spec) == "allreduce"


# ---------------------------------------------------------------- expected schedule


def expected_timeline(spec, cost):
    sim, end = _schedule(spec, cost)
    return one_panel(spec, sim, end, f"{spec.strategy.algorithm} all-reduce: compute, wait for all, reduce, step")


def _phases(spec, sim) -> list[tuple[str, float, bool]]:
    """(label, duration, who takes part) of each all-reduce phase, per the algorithm: who is
    False (everyone), True (host leaders only), or tree-up / tree-down (one tree level)."""
    n, b, lat = spec.topology.workers.count, sim.bytes, sim.cost.latency_ms
    algorithm = spec.strategy.algorithm
    if algorithm == "ring":
        step = (n - 1) * sim.link(b / n) if n > 1 else 0.0
        return [("reduce-scatter", step, False), ("all-gather", step, False)]
    if algorithm == "tree":
        levels = max(1, math.ceil(math.log2(n)))
        return [("reduce", sim.link(b), "tree-up")] * levels + [("broadcast", sim.link(b), "tree-down")] * levels
    if algorithm == "hierarchical":
        hosts = spec.topology.hosts
        per_host = n // hosts
        intra = math.ceil(math.log2(max(per_host, 2))) * sim.link(b, factor=sim.cost.intra_host_factor)
        inter = 2 * (hosts - 1) * sim.link(b / hosts)
        return [("intra-host reduce", intra, False), ("inter-host all-reduce", inter, True),
                ("intra-host broadcast", intra, False)]
    ring = 2 * (n - 1) / n * b / sim.cost.bytes_per_ms + 2 * math.ceil(math.log2(n)) * lat
    return [("all-reduce", ring, False)]


def _takes_part(index: int, who, level: int, levels: int, per_host: int) -> bool:
    """Whether worker `index` (0-based) sends or receives in this phase. Tree: at reduce level l
    (0-based) the workers at multiples of 2**l pair up, so leaves finish after the first level
    and wait; the broadcast runs the levels backwards."""
    if who == "tree-up" or who == "tree-down":
        l = level if who == "tree-up" else 2 * levels - 1 - level
        return index % (2 ** l) == 0
    if who:  # leaders only
        return index % per_host == 0
    return True


def _schedule(spec, cost) -> tuple[Sim, float]:
    sim = Sim(spec, cost)
    workers = spec.topology.workers.ids
    phases = _phases(spec, sim)
    per_host = len(workers) // spec.topology.hosts
    opt = max(cost.min_ms, 2 * sim.params / cost.flops_per_ms)
    t = 0.0
    for _ in range(STEPS):
        ends = {w: sim.compute(w, t) for w in workers}
        barrier = max(ends.values())
        for w in workers:
            sim.add(w, ends[w], barrier, "wait")
        levels = sum(1 for phase in phases if phase[2] == "tree-up")
        for level, (label, duration, who) in enumerate(phases):
            for w in workers:
                kind = "allreduce" if _takes_part(int(w[1:]) - 1, who, level, levels, per_host) else "wait"
                sim.add(w, barrier, barrier + duration, kind, label if kind == "allreduce" else "",
                        phase=label if kind == "allreduce" else "")
            barrier += duration
        for w in workers:
            sim.add(w, barrier, barrier + opt, "optimizer", "opt")
        t = barrier + opt
    return sim, t


# ---------------------------------------------------------------- measured figures


def run_name(spec) -> str:
    return f"{spec.strategy.algorithm} all-reduce"


def table_name(spec) -> str:
    return f"{spec.strategy.algorithm} all-reduce"
