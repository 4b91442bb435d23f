"""All-reduce data parallelism, as runner/strategies/allreduce.py runs it: native DDP
buckets, or dtgen's ring, tree and hierarchical all-reduce.

Native (DDP): gradients go in buckets (the last blocks first, 1 MiB then 25 MiB caps);
a bucket's all-reduce starts once every rank finished its blocks' backward, and the
`backward` span waits for the last bucket, as DDP does. Ring: reduce-scatter then
all-gather, one segment of 1/n per hop; a hop ends when this rank and its predecessor
finished the previous one (per hop for up to RING_EXACT ranks, the closed form beyond).
Tree: pipelined binary tree reduce then broadcast over chunks. Hierarchical: reduce in
the host, all-reduce over host leaders, broadcast in the host.
Must not import torch.
"""

from __future__ import annotations

import math
import statistics
from itertools import accumulate

from ...predict.costs import tree_chunks, tree_levels
from ...predict.fit import after_last_join, latency, mean_durations, per_row, thin

KIND = "allreduce"
SYNTHETIC_RUNS = ("allreduce-ring", "allreduce-tree", "allreduce-native")

RING_EXACT = 64
FIRST_BUCKET, BUCKET = 1 << 20, 25 << 20


def simulate_steps(sim, steps: int) -> None:
    (_native if sim.spec.strategy.algorithm == "native" else _manual)(sim, steps)


def synthetic_strategy(name: str, topology: dict, microbatches: int) -> dict:
    return {"kind": KIND, "algorithm": name[10:]}


def waits_as_ring_hops(spec) -> bool:
    """dtgen's ring, and the native all-reduce on the CPU: gloo's, whose default algorithm
    passes segments around a ring of the ranks (gloo/allreduce.cc) as dtgen's ring passes
    pieces. Their steps' waits for a core grow with the processes as the ring's hops do
    (contention.crowd_wait).

    Measured in three runs of bench_predict_accuracy.py --transfer, the native
    all-reduce calibrated at 2 workers: at 8 workers on one host +16%, +42% and +17% with the
    linear growth, -20%, -4% and -18% with (1 - c/k); on 2 emulated hosts x 4, +20%, +17% and
    +24%, and -16%, -17% and -19%. The tree's and the hierarchical all-reduce's are not
    measured at more processes: they keep the default."""
    return spec.strategy.algorithm in ("ring", "native")


def fit_compute(fit) -> tuple[list, list]:
    """DDP's `backward` span holds the wait for the last bucket's all-reduce: that part is not compute."""
    role, phases = fit.role, fit.phases
    fwd = phases.get((role, "forward"), 0.0)
    bwd = phases.get((role, "backward"), 0.0)
    if fit.spec.strategy.algorithm == "native":
        bwd = max(0.0, bwd - phases.get((role, "allreduce"), 0.0) / max(1, len(_buckets(fit.blocks))))
    return per_row(fit, fwd, bwd)


def fit_message_latency(fit, comm: dict) -> float | None:
    """Ring: from a typical hop; tree and hierarchical: from the whole collective; native:
    sets the all-reduce's own latency from DDP's bucket spans (no message shows alone)."""
    run, spec, n, beta = fit.run, fit.spec, fit.workers, fit.beta
    algorithm = spec.strategy.algorithm
    if algorithm == "ring":
        # the typical hop: a hop that waited for a preempted neighbour holds that neighbour's
        # untraced stall, which the simulator draws itself (Costs.overhead)
        hops = _ring_hops(run)
        return latency([statistics.median(hops)] if hops else [], 4 * fit.params / n, beta)
    if algorithm in ("tree", "hierarchical"):
        return _collective_alpha(run, spec, 4 * fit.params, beta)
    if algorithm == "native":
        d = mean_durations(run, "worker", "allreduce")
        if d:
            a = latency(d, 2 * (n - 1) / n * 4 * fit.params, beta)
            comm["allreduce"]["alpha_s"] = a / (2 * (n - 1))
    return None


def finish_fit(cal, run):
    """The ring's hop latency solved so that the simulated step time equals the run's mean
    (bisection; the step time grows with it), no lower than a message alone.

    Why not the typical hop: a hop's span holds its wait for the predecessor's stalls
    between spans, which the simulator draws itself (Costs.overhead); fitted from the
    typical hop, the ring's prediction of the very runs it was fitted on ran +12%, +16% and
    +19% over them (three 100-step runs of examples/allreduce-ring.yaml here, its all-reduce
    +52..+62%). Solved only where the hop's split is fitted (comm.p2p.alpha_floor_s and
    core_wait_s, kept as fitted): every other strategy and process count carries the split
    instead of alpha_s (contention.wait_scale), so the solved latency is the calibrated ring's
    alone."""
    from ...predict.fit import solved_message_latency, with_message_latency

    p2p = cal.data["comm"]["p2p"]
    if run.spec.strategy.algorithm != "ring" or "alpha_floor_s" not in p2p or "core_wait_s" not in p2p:
        return cal
    floor = float(p2p["alpha_floor_s"])
    alpha = solved_message_latency(cal, run, floor, max(2 * float(p2p["alpha_s"]), floor))
    return cal if alpha is None else with_message_latency(cal, alpha)


def message_samples(fit) -> list:
    """Ring: each hop after a step's first, as one message of a segment's bytes."""
    if fit.spec.strategy.algorithm != "ring":
        return []
    return [(d, 4 * fit.params / fit.workers) for d in _ring_hops(fit.run)]


def _buckets(blocks) -> list[tuple[int, int]]:
    """(first block, bytes) of each DDP bucket, in the order the buckets become ready."""
    out, cap, size, first = [], FIRST_BUCKET, 0, None
    for i in range(len(blocks) - 1, -1, -1):
        size += 4 * blocks[i].params
        first = i
        if size >= cap:
            out.append((first, size))
            cap, size = BUCKET, 0
    if size:
        out.append((first, size))
    return out


def _native(sim, steps: int, update=None) -> None:
    """DDP's steps. `update(step, ready)`: every rank's update once each is `ready` (its
    backward done), returning where each ends (fsdp's ZeRO-1: the sharded update and the
    broadcasts, a collective); default each rank's update of the whole model."""
    c, rec, n = sim.costs, sim.rec, sim.n_workers
    batch = sim.spec.training.batch_size
    buckets = _buckets(sim.blocks)
    free = [0.0] * n
    nb = len(sim.blocks)
    for step in range(steps):
        starts = [sim.start(k, step, free) for k in range(n)]
        fwd_end, ready = [], []
        for k in range(n):
            f = c.noisy(c.forward(batch, active=n), step)
            fwd_end.append(rec.span(k, "forward", 0, starts[k], starts[k] + f, step))
            # backward runs the blocks last to first: a bucket is ready when its first block is done
            ready.append({first: fwd_end[k] + c.noisy(c.backward(batch, first, nb, active=n), step)
                          for first, _ in buckets})
        comm_free = 0.0
        for index, (first, nbytes) in enumerate(buckets):
            begin = max(max(r[first] for r in ready), comm_free)
            comm_free = begin + c.noisy_comm(c.allreduce(nbytes, n), step)
            for k in range(n):
                rec.span(k, "allreduce", 1, ready[k][first], comm_free, step, algorithm="native", phase="bucket",
                         chunk=index)
        moved = sum(b for _, b in buckets) * 2 * (n - 1) // max(n, 1)
        ends = []
        for k in range(n):
            done = max(comm_free, ready[k][buckets[-1][0]])
            t = rec.span(k, "backward", 0, fwd_end[k], done, step, busy=ready[k][buckets[-1][0]] - fwd_end[k])
            if sim.slow[k] > 1:
                t = rec.span(k, "slowdown", 0, t, t + (sim.slow[k] - 1) * (t - starts[k]), step, factor=sim.slow[k])
            ends.append(t if update else sim.optimizer(k, step, t))
        if update:
            ends = update(step, ends)
        for k in range(n):
            rec.moved(k, moved, moved)
            rec.step(sim.ids[k], step, free[k], ends[k])
            free[k] = ends[k]


def _ring(sim, step: int, ready: list, ranks: list) -> list:
    """Ring all-reduce over `ranks`; returns each rank's end. Traced per hop."""
    c, rec = sim.costs, sim.rec
    n = len(ranks)
    seg = sim.nbytes / n
    hop = c.ring_hop(sim.nbytes, n)
    for k in ranks:
        rec.moved(k, 2 * (n - 1) * seg, 2 * (n - 1) * seg)
    if n > RING_EXACT:  # closed form: every rank in step from the last arrival
        t0 = max(ready)
        ends = []
        for i, k in enumerate(ranks):
            rec.span(k, "allreduce", 1, ready[i], t0 + (n - 1) * hop, step, algorithm="ring", phase="reduce-scatter",
                     chunk=0)
            rec.span(k, "allreduce", 1, t0 + (n - 1) * hop, t0 + 2 * (n - 1) * hop, step, algorithm="ring",
                     phase="all-gather", chunk=0)
            ends.append(t0 + 2 * (n - 1) * hop)
        return ends
    t = list(ready)
    for phase in ("reduce-scatter", "all-gather"):
        for h in range(n - 1):
            nxt = [max(t[i], t[i - 1]) + c.noisy_comm(hop, step) for i in range(n)]
            for i, k in enumerate(ranks):
                rec.span(k, "allreduce", 1, t[i], nxt[i], step, algorithm="ring", phase=phase, chunk=h)
            t = nxt
    return t


def _tree(sim, step: int, ready: list, ranks: list) -> list:
    """dtgen's pipelined binary tree over `ranks` (a heap: position p's children are 2p + 1
    and 2p + 2), starting when the last rank is ready; returns each rank's end.

    Each pass takes its sum of chunk hops (Costs.tree_hops, drawn as a whole for its
    spread), and each rank works where in it the tree puts it: up, a rank whose subtree is h
    levels high has its children's first chunk after h hops and has sent its last one after
    h + chunks; down, a rank at depth d has its parent's first chunk after d hops, and is
    done when it has passed its last chunk on (a leaf: received it), so the deepest leaf
    ends the collective and the ranks above it leave before. Before and between those it
    waits, drawn as `wait` spans as the runner traces them (runner/strategies/collectives.py
    tree_all_reduce)."""
    c, rec = sim.costs, sim.rec
    n = len(ranks)
    t0 = max(ready)
    up_hops, down_hops = c.tree_hops(sim.nbytes, n), c.tree_hops(sim.nbytes, n, down=True)
    up = c.noisy_comm(sum(up_hops), step)
    down = c.noisy_comm(sum(down_hops), step)
    chunks = tree_chunks(sim.nbytes)
    rising, falling = _elapsed(up_hops, up), _elapsed(down_hops, down)
    top, ends = t0 + up, []
    for p, k in enumerate(ranks):  # a rank's height and depth are at most the heap's levels, fewer than the hops
        high, deep, leaf = _height(p, n), _depth(p), 2 * p + 1 >= n
        first_up = t0 + rising[high]
        sent_up = t0 + rising[min(high + chunks, len(up_hops))]  # the root: the last chunk, the pass's end
        first_down = top + falling[deep]
        passed_down = top + falling[min(deep + chunks - (1 if leaf else 0), len(down_hops))]
        rec.span(k, "wait", 1, ready[p], first_up, step, algorithm="tree", phase="reduce")
        rec.span(k, "allreduce", 1, first_up, sent_up, step, algorithm="tree", phase="reduce", chunk=0)
        rec.span(k, "wait", 1, sent_up, first_down, step, algorithm="tree", phase="broadcast")
        rec.span(k, "allreduce", 1, first_down, passed_down, step, algorithm="tree", phase="broadcast", chunk=0)
        rec.moved(k, 2 * sim.nbytes, 2 * sim.nbytes)
        ends.append(passed_down)
    return ends


def _elapsed(hops: list, total: float) -> list:
    """Time after each number of `hops` (0, the first, the first two, ...), scaled so that all
    of them take `total` (the pass as drawn with its spread)."""
    scale = total / sum(hops) if sum(hops) > 0 else 0.0
    return list(accumulate((h * scale for h in hops), initial=0.0))


def _depth(p: int) -> int:
    """Levels above heap position p (the root: 0)."""
    return (p + 1).bit_length() - 1


def _height(p: int, n: int) -> int:
    """Levels below heap position p in a heap of n: its leftmost path is its deepest."""
    high = 0
    while 2 * p + 1 < n:
        p, high = 2 * p + 1, high + 1
    return high


def _hierarchical(sim, step: int, ready: list, ranks: list) -> list:
    c, rec, spec = sim.costs, sim.rec, sim.spec
    hosts = spec.topology.hosts
    per_host = len(ranks) // hosts
    t0 = max(ready)
    intra = c.noisy(c.reduce(sim.nbytes, per_host), step)
    inter = c.noisy(c.allreduce(sim.nbytes, hosts, active=hosts), step)  # the leaders alone: the rest wait
    bcast = c.noisy(c.broadcast(sim.nbytes, per_host), step)
    ends = []
    for i, k in enumerate(ranks):
        t = t0
        if per_host > 1:
            t = rec.span(k, "allreduce", 1, ready[i], t0 + intra, step, algorithm="hierarchical", phase="intra",
                         chunk=0)
        t_inter = t0 + intra + inter
        if hosts > 1 and i % per_host == 0:
            rec.span(k, "allreduce", 1, t0 + intra, t_inter, step, algorithm="hierarchical", phase="inter", chunk=0)
        end = t_inter + bcast
        if per_host > 1:
            rec.span(k, "allreduce", 1, t_inter, end, step, algorithm="hierarchical", phase="broadcast", chunk=0)
        rec.moved(k, 2 * sim.nbytes, 2 * sim.nbytes)
        ends.append(end)
    return ends


def _manual(sim, steps: int) -> None:
    c, rec, n = sim.costs, sim.rec, sim.n_workers
    batch = sim.spec.training.batch_size
    reduce = {"ring": _ring, "tree": _tree, "hierarchical": _hierarchical}[sim.spec.strategy.algorithm]
    ranks = list(range(n))
    free = [0.0] * n
    for step in range(steps):
        starts = [sim.start(k, step, free) for k in range(n)]
        ready = [sim.compute(k, step, starts[k], batch, n) for k in range(n)]
        ends = reduce(sim, step, ready, ranks) if n > 1 else ready
        for k in range(n):
            end = sim.optimizer(k, step, ends[k])
            rec.step(sim.ids[k], step, free[k], end)
            free[k] = end


def _collective_alpha(run, spec, nbytes: float, beta: float) -> float | None:
    """Latency of the tree / hierarchical all-reduce: per step, the time from the last rank
    joining to the last rank done (T), solved from T = alpha * A + beta * B of the
    simulator's cost form (_tree, _hierarchical)."""
    # a tree rank's wait for its children's (its parent's) first chunk is part of the collective
    totals = after_last_join(run, {"worker": ("allreduce", "wait")},
                             lambda e: e["name"] != "wait" or e["args"].get("algorithm") == "tree")
    if not totals:
        return None
    n = spec.topology.workers.count
    if spec.strategy.algorithm == "tree":
        chunks = tree_chunks(nbytes)
        hops = 2 * (tree_levels(n) + chunks - 1)
        a, b = hops, hops * min(2, n - 1) * nbytes / chunks  # as _tree: a parent's children share its link
    else:
        hosts = spec.topology.hosts
        levels = math.ceil(math.log2(n // hosts)) if n // hosts > 1 else 0
        a = 2 * levels + 2 * (hosts - 1)
        b = 2 * levels * nbytes + (2 * (hosts - 1) / hosts * nbytes if hosts > 1 else 0)
    t = statistics.median(totals) / 1e6  # typical: the simulator adds preemptions itself (Costs.overhead)
    return max(0.0, (t - beta * b) / a) if a else None


def fit_noise(fit) -> dict:
    """Ring: each hop's time over the hops' mean (`message_ratios`), the spread of one
    message on these cores. The ring's own prediction does not draw from it (its hop cost is
    the typical hop, the neighbours' stalls drawn apart: Costs.overhead); a gossip prediction
    carried from this calibration draws each of its receives from it (Costs.noisy_exchange)."""
    if fit.spec.strategy.algorithm != "ring":
        return {}
    hops = [d for spans in _hop_spans(fit.run) for d in spans]
    mean = statistics.fmean(hops) if len(hops) >= 5 else 0.0
    return {"message_ratios": thin([round(d / mean, 4) for d in hops])} if mean > 0 else {}


def _hop_spans(run) -> list:
    """Per rank and steady step, the durations (µs) of its ring hops after the first, which
    alone absorbs the wait for the predecessor to be ready (the simulator adds that wait)."""
    first = run.trace.steps[0]
    hops: dict = {}
    for e in run.trace.events:
        a = e["args"]
        if e["name"] == "allreduce" and a["step"] != first:
            hops.setdefault((e["pid"], a["step"]), []).append((e["ts"], e["dur"]))
    return [[d for _, d in sorted(spans)[1:]] for spans in hops.values() if len(spans) > 1]


def _ring_hops(run) -> list:
    """One ring hop's time (µs) per rank and step: the mean of its hops after the first."""
    return [sum(spans) / len(spans) for spans in _hop_spans(run)]


def cluster_layout(spec) -> tuple[int, int, int, str, str, bool]:
    """Every worker data-parallel; its algorithm's all-reduce, bucketed under the backward."""
    return 1, spec.topology.workers.count, 1, spec.strategy.algorithm or "native", "", True
