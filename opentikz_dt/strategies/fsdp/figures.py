"""Figures of sharded data parallelism (FSDP): the workers, each holding 1/N of every unit,
around the collective that all-gathers a unit's parameters before it runs and
reduce-scatters its gradients after its backward; the expected schedule of those
collectives per unit (runner/strategies/fsdp.py); lanes and names for a run's measured
figures (its all-gathers and reduce-scatters are all-reduce phases). Must not import torch."""

from __future__ import annotations

import dataclasses

from .strategy import ROOT, option, sharded_units
from ...texsafe import render_label
from ...figures.model import Tex, elide
from ...figures.schedule import STEPS, Sim
from ...figures.spacing import allreduce_needs
from ...figures import texts
from ...figures.texts import label_tex, label_text, lane_text
from ...figures.textwidth import split_in_two
from ...figures.timeline import Lane, Panel, Timeline
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


# ---------------------------------------------------------------- expected schedule


def units(spec, sim: Sim, n: int) -> tuple[dict, list]:
    """({unit: bytes gathered}, compute order [(unit, forward FLOPs per sample), ...]) as
    strategies/fsdp.sharded_units finds them: the root (embedding, head) and each block, or
    the spec's strategy.units. A python model (its size known once built): a nominal one,
    two blocks and no root."""
    if sim.workload is None:
        half = 2 * sim.params  # 4 bytes per value, half the values each
        return {"unit 1": half, "unit 2": half}, [("unit 1", sim.flops / 2), ("unit 2", sim.flops / 2)]
    nbytes, order = sharded_units(spec, sim.workload, n)
    parts = sim.workload.units
    return nbytes, [(unit, parts[index].flops * share) for unit, index, share in order]


class _Worker:
    """One worker's two lanes: compute (forward, backward, optimizer, waits for a gather)
    and communication (its collectives, and its waits for the others to join them)."""

    def __init__(self, sim: Sim, ident: str):
        self.sim, self.id, self.comm = sim, ident, f"{ident}-comm"
        self.slow = sim.spec.topology.workers.slowdown_of(ident)
        self.t = 0.0  # compute free from
        self.began = 0.0  # the current compute box's start
        self.comm_t = 0.0  # comm stream free from

    def run(self, kind: str, label: str, duration: float) -> float:
        """A compute box from `began` (the compute free and what it needs there): the time
        before is a wait."""
        self.sim.add(self.id, self.t, self.began, "wait")
        self.t = self.sim.add(self.id, self.began, self.began + duration * self.slow, kind, label)
        return self.t


def _collective(workers: list, issued: list, phase: str, duration: float) -> float:
    """A collective every worker takes part in: it starts once each issued it and its comm
    stream is free (the early ones wait), and ends at once on all."""
    ready = [max(w.comm_t, at) for w, at in zip(workers, issued)]
    begin = max(ready)
    short = "AG" if phase == "all-gather" else "RS"
    for w, at in zip(workers, ready):
        w.sim.add(w.comm, at, begin, "wait")
        w.comm_t = w.sim.add(w.comm, begin, begin + duration, "allreduce", short, phase=phase)
    return begin + duration


def schedule(spec, cost) -> tuple[Sim, float]:
    """Per step, as opentikz_dt/strategies/fsdp/predict.py plays it: each unit's all-gather, prefetched
    while the unit before it computes, then its forward (the root's embedding first, its
    head last); the backward in reverse, each block gathered again first when
    reshard_after_forward freed it (prefetched under the backward of the unit after it),
    its gradients reduce-scattered after its backward, the root's last; then the
    optimizer on this worker's 1/N shard, once the last gradients are scattered."""
    sim = Sim(spec, cost)
    workers = [_Worker(sim, w) for w in spec.topology.workers.ids]
    n = len(workers)
    nbytes, order = units(spec, sim, n)
    samples = spec.training.batch_size
    blocks = list(dict.fromkeys(u for u, _ in order if u != ROOT))
    forward_gathers = ([ROOT] if ROOT in nbytes else []) + blocks
    backward_gathers = blocks[::-1] if option(spec, "reshard_after_forward") else []

    def moved(unit):  # a ring all-gather or reduce-scatter moves (N-1)/N of the unit's bytes
        return sim.link(nbytes[unit] * (n - 1) / n) if n > 1 else 0.0

    def play(segments, factor, kind, label, gathers, scatter):
        ready = {}
        if gathers:
            ready[gathers[0]] = _collective(workers, [w.t for w in workers], "all-gather", moved(gathers[0]))
        last = {unit: i for i, (unit, _) in enumerate(segments)}
        started = set()
        for i, (unit, flops) in enumerate(segments):
            for w in workers:
                w.began = max(w.t, ready.get(unit, 0.0))
            if unit not in started and unit in gathers:
                started.add(unit)
                after = gathers.index(unit) + 1
                if after < len(gathers):  # the next unit's gather, prefetched under this one
                    ready[gathers[after]] = _collective(workers, [w.began for w in workers], "all-gather",
                                                        moved(gathers[after]))
            for w in workers:
                w.run(kind, label, factor * samples * flops / cost.flops_per_ms)
            if scatter and last[unit] == i:
                _collective(workers, [w.t for w in workers], "reduce-scatter", moved(unit))

    opt = max(cost.min_ms, 2 * sim.params / n / cost.flops_per_ms)
    for _ in range(STEPS):
        play(order, 1.0, "forward", "fwd", forward_gathers, scatter=False)
        # the root stays gathered from its forward to its backward; the blocks are gathered again
        play(order[::-1], 2.0, "backward", "bwd", backward_gathers, scatter=True)
        for w in workers:
            w.began = max(w.t, w.comm_t)
            w.run("optimizer", "opt", opt)
        for w in workers:
            w.comm_t = max(w.comm_t, w.t)
    return sim, max(w.t for w in workers)


def expected_timeline(spec, cost):
    if option(spec, "shard") == "optimizer":
        return _zero1_timeline(spec, cost)
    sim, end = schedule(spec, cost)
    gathers = "forward and backward" if option(spec, "reshard_after_forward") else "forward"
    title = spec.figure.labels.get("panel") or (f"FSDP, per unit: all-gather before its {gathers}, reduce-scatter "
                                                "after its backward; step on the 1/N shard")
    panel = Panel("main", title, _lanes(spec, sim))
    return Timeline(spec.title, (panel,), 0.0, end, label_tex(spec, "timeline_note"), label_tex(spec, "time_axis"))


def _zero1_timeline(spec, cost):
    """shard: optimizer (ZeRO-1) runs DDP's all-reduce of the whole gradients, as kind
    allreduce's native algorithm draws it; the update's broadcasts of each rank's
    parameters are not played (the panel title says so)."""
    from ..allreduce import figures as allreduce

    drawn = allreduce.expected_timeline(spec, cost)
    title = spec.figure.labels.get("panel") or ("ZeRO-1 (DDP): compute, all-reduce the gradients, step; "
                                                "the parameter broadcasts after the step not drawn")
    return dataclasses.replace(drawn, panels=tuple(dataclasses.replace(p, title=title) for p in drawn.panels))


def _lanes(spec, sim: Sim) -> tuple:
    """Each drawn worker's compute lane and, under it, its communication lane (the first
    workers, a row standing for the elided ones, the last)."""
    workers = spec.topology.workers
    drawn = elide(workers.count, spec.figure.max_workers_drawn)
    out = []
    for k, index in enumerate(drawn):
        if index is None:
            hidden = workers.count - (len(drawn) - 1)
            out.append(Lane(f"w{drawn[k - 1] + 1}-more", texts.more_lanes_text(spec, hidden), (), role="gap",
                            hidden=hidden))
            continue
        w = f"w{index}"
        label = lane_text(spec, w)
        out.append(Lane(w, label, tuple(sim.boxes[w])))
        out.append(Lane(f"{w}-comm", label_text(spec, "comm_lane", lane=label), tuple(sim.boxes[f"{w}-comm"])))
    return tuple(out)


# ---------------------------------------------------------------- measured figures


def run_name(spec) -> str:
    return "sharded data parallel (FSDP)"


def table_name(spec) -> str:
    return "FSDP"
