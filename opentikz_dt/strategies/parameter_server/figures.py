"""Figures of the parameter server: the server (or its shards) right of the worker column,
a note under a single server (a sync one is a barrier), and the expected schedule of both modes
side by side (sync and async), the spec's own marked. Must not import torch."""

from __future__ import annotations

import heapq

from ...figures.model import Node, Tex
from ...figures.schedule import STEPS, Sim, lanes
from ...figures.spacing import parameter_server_needs
from ...figures.texts import FLOW_MACROS, label_lines_tex, label_tex
from ...figures.timeline import Panel, Timeline, window
from ...figures.topology_common import count_text
from ...figures.topology_fit import fitted
from ...figures.topology_ps import parameter_server_layout

KIND = "parameter-server"
TIMELINE_BOXES = ("fetch", "forward", "backward", "slowdown", "push", "update", "skipped", "wait")


# ---------------------------------------------------------------- topology


def layout(spec, spacing):
    return parameter_server_layout(spec, spacing, _sync_or_async)


def spacing_needs(sizes):
    return parameter_server_needs(sizes)


def flow_run(spec) -> bool:
    return True


def flow_labels_once(spec) -> bool:
    return True


def _sync_note(spec, count: str) -> Tex:
    """The note under a single server: figure.labels.sync_note or async_note on the lines the
    spec breaks it into; unset, dtgen's English on lines about as wide as the server's label
    (narrower in a fitted figure)."""
    key = f"{spec.strategy.sync}_note"
    if spec.figure.labels.get(key):
        return label_lines_tex(spec, key, tex=FLOW_MACROS, n=count)
    if spec.strategy.sync == "sync":
        lines = [f"sync: a barrier waits for all {count}", "\\gradlabel{}, then one update"]
        if fitted(spec):
            lines = ["sync: a barrier waits", f"for all {count} \\gradlabel{{}}, then", "one update"]
    else:
        lines = ["async: each worker pushes and", "pulls at its own pace, no barrier"]
        if fitted(spec):
            lines = ["async: each worker", "pushes and pulls at its", "own pace, no barrier"]
    return Tex("\\\\".join(lines))


def _sync_or_async(spec, server_x, nodes, edges):
    """A single server. Sync: the note says it is a barrier, waiting for every worker's
    gradient; async: each worker pushes and pulls at its own pace (the seed's distinction).
    The barrier is said, not drawn: a bar in front of the server crossed every arrow into
    it and no legend said what it was. Sharded servers: nothing more."""
    if spec.topology.servers.count != 1:
        return nodes, edges
    count = count_text(spec.topology.workers.count)
    return nodes + [Node("note", kind="text", rel="below=1pt of ps-label.south west, anchor=north west",
                         text=_sync_note(spec, count))], edges


# ---------------------------------------------------------------- expected schedule


def expected_timeline(spec, cost) -> Timeline:
    """Both modes on one axis, sync above async; the spec's own mode says so."""
    sync_sim, sync_end = sync_schedule(spec, cost)
    async_sim, async_end = _async_schedule(spec, cost, until=sync_end)
    end = max(sync_end, async_end)  # both panels whole: neither is cut at the other's end
    words, mine = spec.figure.labels, spec.strategy.sync
    panels = (
        Panel("sync", words["sync_panel"], lanes(spec, sync_sim, True),
              note=words["this_spec"] if mine == "sync" else ""),
        Panel("async", words["async_panel"], lanes(spec, async_sim, True),
              note=words["this_spec"] if mine == "async" else ""),
    )
    note = label_tex(spec, "timeline_note")
    timeline = Timeline(spec.title, panels, 0.0, end, note, label_tex(spec, "time_axis"))
    return window(timeline, 0.0, end, note)


def _link(sim, shards: int) -> float:
    """Fetch or push of the whole model, sync and async alike: the shards' links carry their
    parts in parallel and each worker has its own link (the server side is not the bottleneck)."""
    return sim.link(sim.bytes / shards)


def sync_schedule(spec, cost) -> tuple[Sim, float]:
    """Every worker fetches, computes and pushes; the servers update once all have pushed."""
    sim = Sim(spec, cost)
    workers, servers = spec.topology.workers.ids, spec.topology.servers.ids
    n, s = len(workers), len(servers)
    comm = _link(sim, s)
    update = max(cost.min_ms, (n + 1) * sim.params / s / cost.flops_per_ms)
    t = 0.0
    for _ in range(STEPS):
        ends = {}
        for w in workers:
            end = sim.add(w, t, t + comm, "fetch", "F")
            end = sim.compute(w, end)
            ends[w] = sim.add(w, end, end + comm, "push", "P")
        start = max(ends.values())
        for ps in servers:
            sim.add(ps, start, start + update, "update", "Update")
        for w in workers:
            sim.add(w, ends[w], start + update, "wait")
        t = start + update
    return sim, t


def _async_schedule(spec, cost, until: float) -> tuple[Sim, float]:
    """Async workers never wait for each other: each starts its next iteration as soon as
    its update is applied, until `until` (the sync panel's end). An iteration under way
    then runs to its update, so the panel ends where its last update does (returned) and
    the figure cuts no box: a cut box drew a stray letter above its sliver."""
    sim = Sim(spec, cost)
    workers, servers = spec.topology.workers.ids, spec.topology.servers.ids
    s = len(servers)
    comm = _link(sim, s)
    update = max(cost.min_ms, 2 * sim.params / s / cost.flops_per_ms)
    heap = []

    def iteration(w, t):
        end = sim.add(w, t, t + comm, "fetch", "F")
        end = sim.compute(w, end)
        end = sim.add(w, end, end + comm, "push", "P")
        heapq.heappush(heap, (end, int(w[1:]), w))

    for w in workers:
        iteration(w, 0.0)
    server_free = 0.0
    while heap:
        arrived, _, w = heapq.heappop(heap)
        start = max(arrived, server_free)
        for ps in servers:
            sim.add(ps, start, start + update, "update", "U")
        server_free = start + update
        sim.add(w, arrived, server_free, "wait")
        if server_free < until:
            iteration(w, server_free)
    return sim, server_free


# ---------------------------------------------------------------- measured figures


def asynchronous(spec) -> bool:
    return spec.strategy.sync == "async"


def run_name(spec) -> str:
    return f"{spec.strategy.sync}hronous parameter server"


def table_name(spec) -> str:
    return f"PS {spec.strategy.sync}"
