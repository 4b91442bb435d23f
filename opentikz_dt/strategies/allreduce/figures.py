"""Figures of all-reduce: per algorithm (the descriptor's drawer) a topology — native (a
collective bar), ring, tree, hierarchical — and the expected schedule of its phases
(reduce-scatter and all-gather, the tree's levels, intra- and inter-host). Must not
import torch."""

from __future__ import annotations

from .. import strategy
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


# ---------------------------------------------------------------- measured figures


def run_name(spec) -> str:
    return f"{spec.strategy.algorithm} all-reduce"


def table_name(spec) -> str:
    return f"{spec.strategy.algorithm} all-reduce"
