"""Figures of sharded data parallelism (FSDP): the workers, each holding 1/N of every unit,
around the collective that all-gathers a unit's parameters before it runs and
reduce-scatters its gradients after its backward; names for a run's measured
figures (its all-gathers and reduce-scatters are all-reduce phases). Must not import torch."""

from __future__ import annotations

import dataclasses

from ...texsafe import render_label
from ...figures.model import Tex
from ...figures.spacing import allreduce_needs
from ...figures.textwidth import split_in_two
from ...figures.topology_fit import fitted
from ...figures.topology_allreduce import allreduce_layout

KIND = "fsdp"
# FSDP's all-gathers and reduce-scatters are traced as all-reduce phases
# (opentikz_dt/strategies/fsdp/strategy.py), drawn in the all-reduce's styles.
TIMELINE_BOXES = ("forward", "backward", "slowdown", "allreduce", "allreduce-b", "allreduce-c", "optimizer", "skipped",
                  "wait")


# ---------------------------------------------------------------- topology


def layout(spec, spacing):
    """The native all-reduce's picture (the worker column, the collective's bar right of it)
    with FSDP's words in the bar: per unit, it all-gathers the parameters and
    reduce-scatters the gradients, and each worker holds 1/N of every unit (said inside
    the bar, where no worker label can run into it)."""
    drawn = allreduce_layout(spec, spacing)
    lines = [render_label(line) for line in bar_lines(spec.topology.workers.count)]
    gather, scatter = f"{lines[1]} (\\weightlabel)", f"{lines[2]} (\\gradlabel)"
    if fitted(spec):  # each collective's name over what it moves: the bar as narrow as its last lines
        gather, scatter = (_two_lines(line, symbol) for line, symbol in zip(bar_lines(spec.topology.workers.count)[1:3],
                                                                             ("\\weightlabel", "\\gradlabel")))
    # the bar names each collective with the symbol of what it moves, as the link does
    bar = Tex(f"\\textbf{{{lines[0]}}}\\\\[1pt]{gather}\\\\{'[1pt]' if fitted(spec) else ''}{scatter}"
              f"\\\\[4pt]{lines[3]}\\\\{lines[4]}")
    # the links' label names both flows, so the bar moves right by the added text's width (a fitted
    # figure's links are as long as their labels need already: spacing.fitted_flow_run and, for a
    # run's bytes, measured.annotate's level links)
    extra = 0.0 if fitted(spec) else CARRIED_EXTRA_CM
    nodes = tuple(dataclasses.replace(node, text=bar, x=node.x + extra) if node.name == "ar" else node
                  for node in drawn.nodes)
    return dataclasses.replace(drawn, nodes=nodes, edges=tuple(_carried(spec, edge) for edge in drawn.edges))


def _two_lines(line: str, symbol: str) -> str:
    """A collective's bar line ("all-gather params") as two: its name over what it moves and its symbol."""
    name, *moved = split_in_two(line)
    return f"{render_label(name)}\\\\{render_label(' '.join(moved))} ({symbol})"


CARRIED_EXTRA_CM = 0.75  # "θ, " before "∇θ" at \footnotesize, and a little air


def _carried(spec, edge):
    """A worker's link to the bar carries parameters in (all-gathered, weight colour) and
    gradients out (reduce-scattered): labelled with both symbols, not the gradient's alone."""
    if str(edge.label) != r"\gradlabel":
        return edge
    weight = spec.figure.colors["weight"]
    return dataclasses.replace(edge, label=Tex(f"{{\\color{{{weight}!85!otink}}\\weightlabel}}, \\gradlabel"),
                               label_pos=0.5)


def bar_lines(workers: int) -> list[str]:
    """The collective's bar, line by line: what it does per unit, and each worker's shard."""
    return ["per unit", "all-gather params", "reduce-scatter grads", "each worker holds",
            f"1/{workers:,} of every unit"]


def spacing_needs(sizes):
    return allreduce_needs(sizes)


def flow_run(spec) -> bool:
    """The collective's bar sits right of the column, as the native all-reduce's."""
    return True


# ---------------------------------------------------------------- measured figures


def run_name(spec) -> str:
    return "sharded data parallel (FSDP)"


def table_name(spec) -> str:
    return "FSDP"
