"""Our all-reduce algorithms over point-to-point ops, traced per chunk.

Each function sums `flat` (a contiguous 1-D tensor) in place over the global ranks in
`ranks`, the calling rank being one of them. Spans go on the comm thread as
`allreduce` with args algorithm, phase and chunk (runner-interface.md).
Receives are always posted before sends are waited on (gloo sends block until the
matching receive exists).
"""

from __future__ import annotations

from time import perf_counter_ns

import torch

from ..trace import TIDS

_BCAST_TAG = 1 << 20


_SCRATCH: dict = {}


def _scratch(name: str, numel: int, like: torch.Tensor) -> torch.Tensor:
    """A reused receive buffer: fresh multi-MB allocations cost page faults every call."""
    key = (name, like.dtype, like.device)
    buf = _SCRATCH.get(key)
    if buf is None or buf.numel() < numel:
        buf = _SCRATCH[key] = torch.empty(numel, dtype=like.dtype, device=like.device)
    return buf[:numel]


PIECE_ELEMS = 1 << 20  # ring pipelining granularity within a hop: 4 MiB of float32 (smaller measured slower)
MAX_PIECES = 4


def ring_all_reduce(ctx, flat: torch.Tensor, ranks: list[int], step: int) -> None:
    """Reduce-scatter then all-gather around the ring (one segment of 1/n per hop).

    Each hop's segment travels in pieces (contiguous views, no copies), and a piece is
    forwarded as soon as it has been added (reduce-scatter) or received (all-gather), so
    the transfers of consecutive hops overlap with each other and with the additions, as
    in gloo's own chunked ring. Every receive is posted before its data can arrive (gloo
    sends a piece only once the matching receive is posted): reduce-scatter receives one
    hop ahead into two scratch buffers, all-gather receives all at once, straight into
    place, as soon as reduce-scatter is over. One span per hop, from raw stamps.
    """
    n = len(ranks)
    if n == 1:
        return
    me = ranks.index(ctx.rank)
    nxt, prv = ranks[(me + 1) % n], ranks[(me - 1) % n]
    segs = torch.tensor_split(flat, n)
    npieces = max(1, min(MAX_PIECES, segs[0].numel() // PIECE_ELEMS))
    pieces = [torch.tensor_split(seg, npieces) for seg in segs]
    tmp = [[t[:p.numel()] for t, p in zip(torch.tensor_split(_scratch(f"ring{i}", segs[0].numel(), flat), npieces),
                                          pieces[0])] for i in range(2)]
    isend, irecv = ctx.comm.isend, ctx.comm.irecv
    tracer = ctx.tracer
    traced = tracer.enabled_for(step)
    record, comm_tid = tracer._record, TIDS["comm"]
    sends = []

    def tag(phase, hop, k):
        return (phase * n + hop) * npieces + k

    def post_rs_recv(hop):
        j = (me - hop - 1) % n
        return [irecv(tmp[hop % 2][k][:pieces[j][k].numel()], prv, tag=tag(0, hop, k)) for k in range(npieces)]

    sends += [isend(pieces[me][k], nxt, tag=tag(0, 0, k)) for k in range(npieces)]
    recvs = post_rs_recv(0)
    for hop in range(n - 1):
        t0 = perf_counter_ns()
        j = (me - hop - 1) % n
        last = hop == n - 2
        ahead = None if last else post_rs_recv(hop + 1)
        # forward at once: the next reduce-scatter hop, or the first all-gather hop
        phase, nhop = (1, 0) if last else (0, hop + 1)
        buf, mine = tmp[hop % 2], pieces[j]
        for k in range(npieces):
            recvs[k].wait()
            mine[k].add_(buf[k][:mine[k].numel()])
            sends.append(isend(mine[k], nxt, tag=tag(phase, nhop, k)))
        recvs = ahead
        if traced:
            record("allreduce", comm_tid, t0, perf_counter_ns(), step,
                   {"algorithm": "ring", "phase": "reduce-scatter", "chunk": hop})
    # All-gather receives overwrite segments this rank sent during reduce-scatter: those
    # sends are complete once the next rank has them (it receives one hop ahead), so wait
    # for them, keeping only the sends of the segment just reduced, then post every receive.
    keep = npieces
    for w in sends[:-keep]:
        w.wait()
    sends = sends[-keep:]
    gathers = [[irecv(pieces[(me - hop) % n][k], prv, tag=tag(1, hop, k)) for k in range(npieces)]
               for hop in range(n - 1)]
    for hop in range(n - 1):
        t0 = perf_counter_ns()
        mine = pieces[(me - hop) % n]
        forward = hop + 1 < n - 1
        for k in range(npieces):
            gathers[hop][k].wait()
            if forward:
                sends.append(isend(mine[k], nxt, tag=tag(1, hop + 1, k)))
        if traced:
            record("allreduce", comm_tid, t0, perf_counter_ns(), step,
                   {"algorithm": "ring", "phase": "all-gather", "chunk": hop})
    for w in sends:
        w.wait()


TREE_CHUNK_ELEMS = 1 << 19  # tree pipelining granularity: 2 MiB of float32
TREE_MAX_CHUNKS = 16  # per tree
TREE_LAG = 2  # chunks between reducing a chunk and forwarding its broadcast (interior ranks)


def _tree_links(ranks: list[int], me_rank: int, shift: int):
    """(parent or None, [children]) of me_rank in the heap-ordered binary tree over ranks rotated by shift."""
    n = len(ranks)
    order = [ranks[(i + shift) % n] for i in range(n)]
    i = order.index(me_rank)
    parent = order[(i - 1) // 2] if i else None
    return parent, [order[c] for c in (2 * i + 1, 2 * i + 2) if c < n]


def tree_all_reduce(ctx, flat: torch.Tensor, ranks: list[int], step: int) -> None:
    """Double binary tree (as NCCL's): each half of the buffer is reduced up one binary tree
    and broadcast back down it; the second tree is the first rotated by n/2 ranks, so a rank
    that is an inner node in one tree is a leaf in the other and the work is balanced.

    Both trees are pipelined over chunks (contiguous views of `flat`). All receives are
    posted up front: the children's chunks into scratch buffers, the parent's broadcast
    straight into place (it cannot arrive before this rank has sent that chunk up). Chunk
    k is reduced and sent up; a root then sends it down at once, an inner rank forwards
    the broadcast of chunk k - TREE_LAG, so reduction and broadcast overlap. Spans:
    `reduce` and `broadcast` per chunk; `chunk` numbers the chunks of both trees
    (even: first tree, odd: second).
    """
    n = len(ranks)
    if n == 1:
        return
    isend, irecv = ctx.comm.isend, ctx.comm.irecv
    tracer = ctx.tracer
    traced = tracer.enabled_for(step)
    record, comm_tid = tracer._record, TIDS["comm"]
    halves = torch.tensor_split(flat, 2)
    per_tree = max(1, min(TREE_MAX_CHUNKS, halves[0].numel() // TREE_CHUNK_ELEMS))
    trees = []
    for t, half in enumerate(halves):
        parent, children = _tree_links(ranks, ctx.rank, t * (n // 2))
        chunks = torch.tensor_split(half, per_tree)
        bufs = [torch.tensor_split(_scratch(f"tree{t}.{i}", half.numel(), flat), per_tree)
                for i in range(len(children))]
        ups = [[irecv(b[k][:chunks[k].numel()], c, tag=2 * k + t) for k in range(per_tree)]
               for c, b in zip(children, bufs)]
        downs = [irecv(chunks[k], parent, tag=_BCAST_TAG + 2 * k + t) for k in range(per_tree)] if parent is not None else None
        trees.append((t, parent, children, chunks, bufs, ups, downs))
    sends = []
    lag = TREE_LAG
    for i in range(per_tree + lag):
        for t, parent, children, chunks, bufs, ups, downs in trees:
            if i < per_tree:  # reduce chunk i
                t0 = perf_counter_ns()
                chunk = chunks[i]
                for up, b in zip(ups, bufs):
                    up[i].wait()
                    chunk.add_(b[i][:chunk.numel()])
                if parent is not None:
                    sends.append(isend(chunk, parent, tag=2 * i + t))
                else:
                    sends += [isend(chunk, c, tag=_BCAST_TAG + 2 * i + t) for c in children]
                if traced:
                    record("allreduce", comm_tid, t0, perf_counter_ns(), step,
                           {"algorithm": "tree", "phase": "reduce", "chunk": 2 * i + t})
        for t, parent, children, chunks, bufs, ups, downs in trees:
            k = i - lag if parent is not None else i
            if 0 <= k < per_tree and (parent is not None or traced):
                t0 = perf_counter_ns()
                if downs is not None:
                    downs[k].wait()
                    sends += [isend(chunks[k], c, tag=_BCAST_TAG + 2 * k + t) for c in children]
                if traced:  # a root's broadcast was posted with its reduce: a zero-length mark
                    record("allreduce", comm_tid, t0, perf_counter_ns(), step,
                           {"algorithm": "tree", "phase": "broadcast", "chunk": 2 * k + t})
    for w in sends:
        w.wait()


def hierarchical_all_reduce(ctx, flat: torch.Tensor, groups, step: int) -> None:
    """Reduce within the host to its leader, all-reduce across leaders, broadcast back."""
    intra, leaders, leader = groups["intra"], groups["leaders"], groups["leader"]
    comm, tracer = ctx.comm, ctx.tracer
    if intra is not None:
        with tracer.span("allreduce", tid="comm", step=step, algorithm="hierarchical", phase="intra", chunk=0):
            comm.reduce(flat, leader, group=intra)
    if ctx.rank == leader and leaders is not None:
        with tracer.span("allreduce", tid="comm", step=step, algorithm="hierarchical", phase="inter", chunk=0):
            comm.all_reduce(flat, group=leaders)
    if intra is not None:
        with tracer.span("allreduce", tid="comm", step=step, algorithm="hierarchical", phase="broadcast", chunk=0):
            comm.broadcast(flat, leader, group=intra)


def host_groups(ctx, workers: list[int]) -> dict:
    """Subgroups for hierarchical all-reduce, from topology.hosts (every rank creates every group)."""
    topo = ctx.spec.topology
    by_host: dict[int, list[int]] = {}
    for r in workers:
        by_host.setdefault(topo.host_of(ctx.roles[r][1]), []).append(r)
    intra = None
    for host in sorted(by_host):
        members = by_host[host]
        group = ctx.new_group(members) if len(members) > 1 else None
        if ctx.rank in members:
            intra, leader = group, members[0]
    heads = [by_host[h][0] for h in sorted(by_host)]
    leaders = ctx.new_group(heads) if len(heads) > 1 else None
    return {"intra": intra, "leaders": leaders if ctx.rank in heads else None, "leader": leader}
