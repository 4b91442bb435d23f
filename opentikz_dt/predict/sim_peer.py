"""All-reduce (native DDP buckets, ring, tree, hierarchical), gossip and single, as the runner does them.

Native (DDP): gradients go in buckets (the last blocks first, 1 MiB then 25 MiB caps);
a bucket's all-reduce starts once every rank finished its blocks' backward, and the
`backward` span waits for the last bucket, as DDP does. Ring: reduce-scatter then
all-gather, one segment of 1/n per hop; a hop ends when this rank and its predecessor
finished the previous one (per hop for up to RING_EXACT ranks, the closed form beyond).
Tree: pipelined binary tree reduce then broadcast over chunks. Hierarchical: reduce in
the host, all-reduce over host leaders, broadcast in the host. Gossip: a worker's
exchange ends when it and every neighbour it talks to have reached their exchange.
Must not import torch.
"""

from __future__ import annotations

import math

from .sim_ps import _compute

RING_EXACT = 64
FIRST_BUCKET, BUCKET = 1 << 20, 25 << 20
TREE_CHUNK, TREE_MAX = (1 << 18) * 4, 64


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


def _start(sim, k: int, step: int, free: list) -> float:
    """Where step's traced work begins: after the untraced per-step time, which the runner's
    step time counts (batch gathering sits inside forward_backward, before `forward`)."""
    return free[k] + sim.costs.overhead(step)


def _optimizer(sim, k, step, t) -> float:
    c = sim.costs
    return sim.rec.span(k, "optimizer", 0, t, t + c.noisy(c.optimizer(sim.params, sim.tensors, sim.n_workers), step),
                        step)


def native(sim, steps: int) -> None:
    c, rec, n = sim.costs, sim.rec, sim.n_workers
    batch = sim.spec.training.batch_size
    buckets = _buckets(sim.blocks)
    free = [0.0] * n
    nb = len(sim.blocks)
    for step in range(steps):
        starts = [_start(sim, k, step, free) for k in range(n)]
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
        for k in range(n):
            done = max(comm_free, ready[k][buckets[-1][0]])
            t = rec.span(k, "backward", 0, fwd_end[k], done, step)
            if sim.slow[k] > 1:
                t = rec.span(k, "slowdown", 0, t, t + (sim.slow[k] - 1) * (t - starts[k]), step, factor=sim.slow[k])
            end = _optimizer(sim, k, step, t)
            rec.moved(k, moved, moved)
            rec.step(sim.ids[k], step, free[k], end)
            free[k] = end


def _ring(sim, step: int, ready: list, ranks: list) -> list:
    """Ring all-reduce over `ranks`; returns each rank's end. Traced per hop."""
    c, rec = sim.costs, sim.rec
    n = len(ranks)
    seg = sim.nbytes / n
    hop = c.p2p(seg) + 1e6 * c.add_s * seg / 4
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
    c, rec = sim.costs, sim.rec
    n = len(ranks)
    chunks = max(1, min(TREE_MAX, math.ceil(sim.nbytes / TREE_CHUNK)))
    levels = math.ceil(math.log2(n))
    per = c.p2p(sim.nbytes / chunks) + c.p2p_bytes(sim.nbytes / chunks)  # two children share the link
    t0 = max(ready)
    up = c.noisy_comm((levels + chunks - 1) * per, step)
    down = c.noisy_comm((levels + chunks - 1) * per, step)
    for i, k in enumerate(ranks):
        rec.span(k, "allreduce", 1, ready[i], t0 + up, step, algorithm="tree", phase="reduce", chunk=0)
        rec.span(k, "allreduce", 1, t0 + up, t0 + up + down, step, algorithm="tree", phase="broadcast", chunk=0)
        rec.moved(k, 2 * sim.nbytes, 2 * sim.nbytes)
    return [t0 + up + down] * n


def _hierarchical(sim, step: int, ready: list, ranks: list) -> list:
    c, rec, spec = sim.costs, sim.rec, sim.spec
    hosts = spec.topology.hosts
    per_host = len(ranks) // hosts
    t0 = max(ready)
    intra = c.noisy(c.reduce(sim.nbytes, per_host), step)
    inter = c.noisy(c.allreduce(sim.nbytes, hosts), step)
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


def manual(sim, steps: int) -> None:
    c, rec, n = sim.costs, sim.rec, sim.n_workers
    batch = sim.spec.training.batch_size
    reduce = {"ring": _ring, "tree": _tree, "hierarchical": _hierarchical}[sim.spec.strategy.algorithm]
    ranks = list(range(n))
    free = [0.0] * n
    for step in range(steps):
        starts = [_start(sim, k, step, free) for k in range(n)]
        ready = [_compute(sim, k, step, starts[k], batch, n) for k in range(n)]
        ends = reduce(sim, step, ready, ranks) if n > 1 else ready
        for k in range(n):
            end = _optimizer(sim, k, step, ends[k])
            rec.step(sim.ids[k], step, free[k], end)
            free[k] = end


def neighbours(rank: int, n: int, peers: int) -> tuple[list[int], list[int]]:
    """(send to, receive from), as runner/strategies/gossip.py: offsets +1, -1, +2, -2, ..."""
    offsets, k = [], 1
    while len(offsets) < peers:
        offsets.append(k)
        if len(offsets) < peers:
            offsets.append(-k)
        k += 1
    return [(rank + o) % n for o in offsets], [(rank - o) % n for o in offsets]


def gossip(sim, steps: int) -> None:
    c, rec, n = sim.costs, sim.rec, sim.n_workers
    batch, peers = sim.spec.training.batch_size, sim.spec.strategy.peers
    links = [neighbours(k, n, peers) for k in range(n)]
    free = [0.0] * n
    for step in range(steps):
        starts = [_start(sim, k, step, free) for k in range(n)]
        ready = [_optimizer(sim, k, step, _compute(sim, k, step, starts[k], batch, n)) for k in range(n)]
        for k in range(n):
            to, frm = links[k]
            begin = max([ready[k]] + [ready[p] for p in to + frm])
            exchange = c.p2p(sim.nbytes) + (len(to) - 1) * c.p2p_bytes(sim.nbytes)
            end = begin + c.noisy_exchange(exchange + 1e6 * c.add_s * sim.params * len(frm), step)
            rec.span(k, "gossip", 1, ready[k], end, step, peers=[sim.ids[p] for p in frm])
            rec.moved(k, len(to) * sim.nbytes, len(frm) * sim.nbytes)
            rec.step(sim.ids[k], step, free[k], end)
            free[k] = end


def single(sim, steps: int) -> None:
    rec = sim.rec
    batch = sim.spec.training.batch_size
    t = 0.0
    for step in range(steps):
        start = t + sim.costs.overhead(step)
        end = _optimizer(sim, 0, step, _compute(sim, 0, step, start, batch, 1))
        rec.step(sim.ids[0], step, t, end)
        t = end
