"""The expected schedule: a Timeline built from the spec alone ("what to expect").

A small cost model (CostModel: compute rate, link bandwidth and latency) turns the
model size, batch and worker slowdowns into durations; a per-strategy simulation
orders the spans as the runner will (parameter server sync and async, central storage,
all-reduce phases per algorithm, gossip with ring neighbours, GPipe / 1F1B pipelines,
single device). Absolute times are illustrative; relative sizes, waits and bubbles
are the point. The measured timeline (from trace.json) uses the same Timeline model,
so both figures share one template and one ms axis.
Must not import torch.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from dataclasses import dataclass, replace

from ..errors import DtgenError
from ..workload import Workload, workload_of
from .model import elide
from .texts import label_tex, lane_text, more_lanes_text
from .timeline import Box, Lane, Panel, Timeline, limit_boxes, window

STEPS = 2


@dataclass(frozen=True)
class CostModel:
    flops_per_ms: float = 2.0e6  # 2 GFLOP/s per worker (a CPU core running the MLP)
    bytes_per_ms: float = 1.0e5  # 100 MB/s per link (gloo over a network)
    intra_host_factor: float = 10.0  # links inside a host are this much faster
    latency_ms: float = 0.3
    min_ms: float = 0.4  # shortest span (server update, optimizer step)


# A python model's size is known only once the runner builds it: the expected
# timeline then draws a nominal one (the measured timeline shows the real one).
NOMINAL_PARAMS = 100_000


def _model(spec) -> tuple[int, float, Workload | None]:
    """(parameters, forward FLOPs per sample, workload) of the spec's model."""
    workload = workload_of(spec)
    if workload is None:
        return NOMINAL_PARAMS, 2.0 * NOMINAL_PARAMS, None
    return workload.params, workload.flops_per_sample, workload


class _Sim:
    """Boxes per lane id, plus helpers shared by the strategies."""

    def __init__(self, spec, cost: CostModel):
        self.spec, self.cost = spec, cost
        self.boxes: dict[str, list[Box]] = defaultdict(list)
        self.params, self.flops, self.workload = _model(spec)
        self.bytes = 4 * self.params

    def add(self, lane, start, end, kind, label="", phase=""):
        if end - start > 1e-9 * max(1.0, abs(end)):  # not float residue of equal times
            self.boxes[lane].append(Box(start, end, kind, label, phase))
        return end

    def compute(self, worker_id, start, samples=None, flops=None, pace=1.0) -> float:
        """forward, backward and the straggler delay of one step; returns the end time.
        Forward time follows the model's FLOPs per sample (workload.py), backward twice that;
        pace < 1 or > 1 is a worker's own speed (gossip peers do not run in lockstep)."""
        samples = samples or self.spec.training.batch_size
        flops = flops if flops is not None else self.flops
        fwd = samples * flops / self.cost.flops_per_ms * pace
        bwd = 2 * fwd
        t = self.add(worker_id, start, start + fwd, "forward", "fwd")
        t = self.add(worker_id, t, t + bwd, "backward", "bwd")
        extra = (self.spec.topology.workers.slowdown_of(worker_id) - 1.0) * (fwd + bwd)
        return self.add(worker_id, t, t + max(0.0, extra), "slowdown", "slow")

    def link(self, nbytes, share=1.0, factor=1.0) -> float:
        return self.cost.latency_ms + nbytes * share / (self.cost.bytes_per_ms * factor)


# ---------------------------------------------------------------- strategies


def _server_ids(spec):
    return spec.topology.servers.ids


def _ps_link(sim, shards: int) -> float:
    """Fetch or push of the whole model, sync and async alike: the shards' links carry their
    parts in parallel and each worker has its own link (the server side is not the bottleneck)."""
    return sim.link(sim.bytes / shards)


def _ps_sync(spec, cost) -> tuple[_Sim, float]:
    sim = _Sim(spec, cost)
    workers, servers = spec.topology.workers.ids, _server_ids(spec)
    n, s = len(workers), len(servers)
    comm = _ps_link(sim, s)
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


def _ps_async(spec, cost, until: float) -> tuple[_Sim, float]:
    """Async workers never wait for each other: each starts its next iteration as soon as
    its update is applied, until `until` (the sync panel's end). An iteration under way
    then runs to its update, so the panel ends where its last update does (returned) and
    the figure cuts no box: a cut box drew a stray letter above its sliver."""
    sim = _Sim(spec, cost)
    workers, servers = spec.topology.workers.ids, _server_ids(spec)
    s = len(servers)
    comm = _ps_link(sim, s)
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


def _allreduce_phases(spec, sim) -> list[tuple[str, float, bool]]:
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


def _allreduce(spec, cost) -> tuple[_Sim, float]:
    sim = _Sim(spec, cost)
    workers = spec.topology.workers.ids
    phases = _allreduce_phases(spec, sim)
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


def _gossip(spec, cost) -> tuple[_Sim, float]:
    sim = _Sim(spec, cost)
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


def _pipeline_ops(schedule: str, stage: int, stages: int, micro: int) -> list[tuple[str, int]]:
    """The op order of one stage (0-based): GPipe all forwards then all backwards, or 1F1B."""
    if schedule == "gpipe":
        return [("F", m) for m in range(micro)] + [("B", m) for m in range(micro)]
    warmup = min(stages - stage - 1, micro)
    ops = [("F", m) for m in range(warmup)]
    for i in range(micro - warmup):
        ops += [("F", warmup + i), ("B", i)]
    ops += [("B", m) for m in range(micro - warmup, micro)]
    return ops


def _pipeline(spec, cost) -> tuple[_Sim, float]:
    sim = _Sim(spec, cost)
    s, workers = spec.strategy, spec.topology.workers
    stages, micro = s.stages, s.microbatches
    samples = spec.training.batch_size // micro
    # The ideal pipeline the caption's (p-1)/(m+p-1) describes: balanced stages (each a
    # p-th of the model's FLOPs) and activation transfers hidden behind compute. A straggler
    # stage (topology.workers.slowdown) still stretches its own boxes.
    even = samples * sim.flops / stages / cost.flops_per_ms
    fwd = [even * workers.slowdown_of(f"w{k + 1}") for k in range(stages)]
    comm = [0.0] * stages
    ops = [_pipeline_ops(s.schedule, k, stages, micro) for k in range(stages)]
    done: dict[tuple, float] = {}
    free = [0.0] * stages
    nxt = [0] * stages
    remaining = sum(len(o) for o in ops)
    while remaining:
        progressed = False
        for k in range(stages):
            if nxt[k] >= len(ops[k]):
                continue
            op, m = ops[k][nxt[k]]
            if op == "F":
                deps = [done.get(("F", k - 1, m), None) if k else 0.0]
                deps = [d + comm[k - 1] if (d is not None and k) else d for d in deps]
            else:
                deps = [done.get(("F", k, m))]
                if k < stages - 1:
                    d = done.get(("B", k + 1, m))
                    deps.append(None if d is None else d + comm[k])
            if any(d is None for d in deps):
                continue
            begin = max([free[k]] + deps)
            length = fwd[k] if op == "F" else 2 * fwd[k]
            lane = f"w{k + 1}"
            sim.add(lane, free[k], begin, "wait", "bubble" if free[k] == 0.0 else "")
            free[k] = sim.add(lane, begin, begin + length, "forward" if op == "F" else "backward", str(m + 1))
            done[(op, k, m)] = free[k]
            nxt[k] += 1
            remaining -= 1
            progressed = True
        if not progressed:  # cannot happen for GPipe/1F1B; guards against an endless loop
            raise DtgenError(f"pipeline schedule '{s.schedule}' deadlocked")
    end = max(free)
    opt = max(cost.min_ms, 2 * sim.params / stages / cost.flops_per_ms)
    for k in range(stages):
        lane = f"w{k + 1}"
        sim.add(lane, free[k], end, "wait", "bubble")
        sim.add(lane, end, end + opt, "optimizer", "opt")
    sim.flush_ms = end
    return sim, end + opt


def bubble_fraction(stages: int, microbatches: int) -> float:
    """The ideal pipeline bubble (GPipe and 1F1B alike): (p-1)/(m+p-1) of each stage's step is idle."""
    return (stages - 1) / (microbatches + stages - 1)


SCHEDULE_NAMES = {"gpipe": "GPipe", "1f1b": "1F1B"}


def drawn_bubble(sim: _Sim, stages: int, end: float) -> float:
    """The idle share of the stages' lanes up to `end` (the flush), from the drawn boxes."""
    idle = sum(b.end_ms - b.start_ms for k in range(stages) for b in sim.boxes[f"w{k + 1}"]
               if b.kind == "wait" and b.end_ms <= end + 1e-9)
    return idle / (stages * end) if end > 0 else 0.0


def _pipeline_title(spec, drawn: float) -> str:
    s = spec.strategy
    bubble = bubble_fraction(s.stages, s.microbatches)
    head = f"{SCHEDULE_NAMES.get(s.schedule, s.schedule)}: {s.microbatches} microbatches, {s.stages} stages"
    if abs(drawn - bubble) < 0.005:
        return f"{head}, bubble {bubble:.0%} = $(p-1)/(m+p-1)$"
    return f"{head}, bubble {drawn:.0%} (balanced stages: $(p-1)/(m+p-1)$ = {bubble:.0%})"


def _single(spec, cost) -> tuple[_Sim, float]:
    sim = _Sim(spec, cost)
    opt = max(cost.min_ms, 2 * sim.params / cost.flops_per_ms)
    t = 0.0
    for _ in range(STEPS + 1):
        t = sim.compute("w1", t)
        t = sim.add("w1", t, t + opt, "optimizer", "opt")
    return sim, t


# ---------------------------------------------------------------- assembling lanes


def _lanes(spec, sim: _Sim, with_servers: bool, prefix_label: str = "") -> tuple:
    lanes = []
    if with_servers:
        for ps in spec.topology.servers.ids:
            lanes.append(Lane(ps, spec.topology.servers.label_of(ps), tuple(sim.boxes[ps]), role="server"))
    workers = spec.topology.workers
    drawn = elide(workers.count, spec.figure.max_workers_drawn)
    for k, index in enumerate(drawn):
        if index is None:
            hidden = workers.count - (len(drawn) - 1)
            lanes.append(Lane(f"w{drawn[k - 1] + 1}-more", more_lanes_text(spec, hidden), (), role="gap", hidden=hidden))
            continue
        w = f"w{index}"
        lanes.append(Lane(w, lane_text(spec, w), tuple(sim.boxes[w]),
                          role="stage" if spec.strategy.kind == "pipeline" else "worker"))
    return tuple(lanes)


def expected_timeline(spec, cost: CostModel | None = None) -> Timeline:
    """What each worker (and server) is expected to do over the first steps, from the spec alone.
    Panel titles, axis title and note are the spec's words (figure.labels; English by default)."""
    cost = cost or CostModel()
    kind = spec.strategy.kind
    words = spec.figure.labels
    note, axis = label_tex(spec, "timeline_note"), label_tex(spec, "time_axis")
    if kind == "parameter-server":
        sync_sim, sync_end = _ps_sync(spec, cost)
        async_sim, async_end = _ps_async(spec, cost, until=sync_end)
        end = max(sync_end, async_end)  # both panels whole: neither is cut at the other's end
        mine = spec.strategy.sync
        panels = (
            Panel("sync", words["sync_panel"], _lanes(spec, sync_sim, True),
                  note=words["this_spec"] if mine == "sync" else ""),
            Panel("async", words["async_panel"], _lanes(spec, async_sim, True),
                  note=words["this_spec"] if mine == "async" else ""),
        )
        timeline = Timeline(spec.title, panels, 0.0, end, note, axis)
        timeline = window(timeline, 0.0, end, note)
    elif kind == "central-storage":
        sim, end = _ps_sync(spec, cost)
        title = words.get("panel") or "synchronous: variables on the central storage"
        timeline = Timeline(spec.title, (Panel("sync", title, _lanes(spec, sim, True)),), 0.0, end, note, axis)
    else:
        builder, title = {
            "allreduce": (_allreduce, f"{spec.strategy.algorithm} all-reduce: compute, wait for all, reduce, step"),
            "gossip": (_gossip, f"gossip: average with {spec.strategy.peers} ring neighbours; no global barrier, "
                                "each waits only for its neighbours"),
            "pipeline": (_pipeline, ""),
            "single": (_single, "single device: forward, backward, optimizer step"),
        }[kind]
        sim, end = builder(spec, cost)
        if kind == "pipeline":
            title = _pipeline_title(spec, drawn_bubble(sim, spec.strategy.stages, sim.flush_ms))
        title = words.get("panel") or title
        timeline = Timeline(spec.title, (Panel("main", title, _lanes(spec, sim, False)),), 0.0, end, note, axis)
    return replace(limit_boxes(timeline), widen_events=True)
