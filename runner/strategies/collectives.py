"""Our all-reduce algorithms over point-to-point ops, traced per chunk.

Each function sums `flat` (a contiguous 1-D tensor) in place over the global ranks in
`ranks`, the calling rank being one of them. Spans go on the comm thread as
`allreduce` with args algorithm, phase and chunk (runner-interface.md), and any
`span_args` the caller adds (a mesh's data groups: dim=data); with `payload`, each hop's
or chunk's span also carries the bytes of the segment or chunk it moved (a mesh's
measured topology sums them per dimension).
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


def ring_all_reduce(ctx, flat: torch.Tensor, ranks: list[int], step: int, payload: bool = False,
                    **span_args) -> None:
    """Reduce-scatter then all-gather around the ring (one segment of 1/n per hop).

    Each hop's segment travels in pieces (contiguous views, no copies), and a piece is
    forwarded as soon as it has been added (reduce-scatter) or received (all-gather), so
    the transfers of consecutive hops overlap with each other and with the additions, as
    in gloo's own chunked ring. Every receive is posted before its data can arrive (gloo
    sends a piece only once the matching receive is posted): reduce-scatter receives one
    hop ahead into two scratch buffers, all-gather receives all at once, straight into
    place, as soon as reduce-scatter is over. One span per hop, from raw stamps; the
    first hop's wait for the previous rank's first piece (that rank may still be in its
    backward pass) is a `wait` span of its own before it, so the reduce-scatter span covers
    only the transfer and additions from the first piece's arrival on. That wait includes
    the first piece's own transfer (at most PIECE_ELEMS elements), which this rank cannot
    tell apart from the peer not having sent yet.
    """
    n = len(ranks)
    if n == 1:
        return
    me = ranks.index(ctx.rank)
    nxt, prv = ranks[(me + 1) % n], ranks[(me - 1) % n]
    segs = torch.tensor_split(flat, n)
    moved = {"bytes": segs[0].numel() * flat.element_size()} if payload else {}
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
            if hop == 0 and k == 0 and traced:
                # The first piece comes only once the previous rank finished its backward:
                # until then this rank waits for a peer, it does not reduce.
                t1 = perf_counter_ns()
                record("wait", comm_tid, t0, t1, step, dict(span_args))
                t0 = t1
            mine[k].add_(buf[k][:mine[k].numel()])
            sends.append(isend(mine[k], nxt, tag=tag(phase, nhop, k)))
        recvs = ahead
        if traced:
            record("allreduce", comm_tid, t0, perf_counter_ns(), step,
                   {"algorithm": "ring", "phase": "reduce-scatter", "chunk": hop, **moved, **span_args})
    # All-gather receives overwrite segments this rank sent during reduce-scatter: those
    # sends are complete once the next rank has them (it receives one hop ahead), so wait
    # for them, keeping only the sends of the segment just reduced, then post every receive.
    # Traced as `wait` (blocked on a peer), not left untraced: predictions fit a rank's
    # untraced time as its own per-step work.
    keep = npieces
    t0 = perf_counter_ns()
    for w in sends[:-keep]:
        w.wait()
    if traced:
        record("wait", comm_tid, t0, perf_counter_ns(), step, dict(span_args))
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
                   {"algorithm": "ring", "phase": "all-gather", "chunk": hop, **moved, **span_args})
    t0 = perf_counter_ns()
    for w in sends:  # the next rank receiving the last segments
        w.wait()
    if traced:
        record("wait", comm_tid, t0, perf_counter_ns(), step, dict(span_args))


TREE_CHUNK_ELEMS = 1 << 19  # tree pipelining granularity: 2 MiB of float32
TREE_MAX_CHUNKS = 16  # per tree
TREE_LAG = 2  # chunks between reducing a chunk and forwarding its broadcast (interior ranks)


CHUNK_ELEMS = 1 << 18  # tree pipelining granularity: 1 MiB of float32
MAX_CHUNKS = 64


def tree_all_reduce(ctx, flat: torch.Tensor, ranks: list[int], step: int, payload: bool = False,
                    **span_args) -> None:
    """Binary-tree reduce to ranks[0], then broadcast back, pipelined over chunks.

    The wait for the children's first chunk (a child may still be in its backward pass, or
    waiting for its own children) is a `wait` span of its own (algorithm tree, phase reduce)
    before the first reduce span, so that span covers only the transfer and additions from
    the chunk's arrival on; as the ring's first hop, the wait includes that chunk's own
    transfer, which this rank cannot tell apart from the child not having sent yet. Likewise
    the wait for the parent's first broadcast chunk (the root reducing the rest of the tree).

    A double binary tree (NCCL's, each half of the buffer on its own rotated tree) was
    tried and measured no faster on gloo/CPU
    (benchmarks/results/allreduce-algorithms_cpu2core_2026-11.md), so the simple tree stays.
    """
    n = len(ranks)
    if n == 1:
        return
    me = ranks.index(ctx.rank)
    parent = ranks[(me - 1) // 2] if me else None
    children = [ranks[c] for c in (2 * me + 1, 2 * me + 2) if c < n]
    nchunks = max(1, min(MAX_CHUNKS, -(-flat.numel() // CHUNK_ELEMS)))
    chunks = list(torch.tensor_split(flat, nchunks))
    moved = {"bytes": chunks[0].numel() * flat.element_size()} if payload else {}
    comm, tracer = ctx.comm, ctx.tracer
    # Reduce: all receives from the children up front, then add and forward chunk by chunk.
    bufs = {c: _scratch(f"tree{i}", flat.numel(), flat) for i, c in enumerate(children)}
    parts = {c: list(torch.tensor_split(bufs[c], nchunks)) for c in children}
    recvs = {c: [comm.irecv(parts[c][k], c, tag=k) for k in range(nchunks)] for c in children}
    sends = []
    traced = tracer.enabled_for(step)
    record, comm_tid = tracer._record, TIDS["comm"]

    def first_arrival(works: list, phase: str) -> int:
        """Wait for a peer's first chunk (waiting for a peer, not reducing: a `wait` span);
        returns when it arrived (ns), where the chunk's own span starts (raw stamps: no gap)."""
        t0 = perf_counter_ns()
        for w in works:
            w.wait()
        t1 = perf_counter_ns()
        if traced and works:
            record("wait", comm_tid, t0, t1, step, {"algorithm": "tree", "phase": phase, **span_args})
        return t1

    arrived = first_arrival([recvs[c][0] for c in children], "reduce")
    for k in range(nchunks):
        t0 = arrived if k == 0 else perf_counter_ns()
        for c in children:
            if k:  # the first chunk arrived in first_arrival
                recvs[c][k].wait()
            chunks[k].add_(parts[c][k])
        if parent is not None:
            sends.append(comm.isend(chunks[k], parent, tag=k))
        if traced:
            record("allreduce", comm_tid, t0, perf_counter_ns(), step,
                   {"algorithm": "tree", "phase": "reduce", "chunk": k, **moved, **span_args})
    # Broadcast: receive each chunk from the parent and pass it down at once.
    down = [comm.irecv(chunks[k], parent, tag=_BCAST_TAG + k) for k in range(nchunks)] if parent is not None else []
    arrived = first_arrival(down[:1], "broadcast")
    for k in range(nchunks):
        t0 = arrived if k == 0 else perf_counter_ns()
        if down and k:
            down[k].wait()
        sends += [comm.isend(chunks[k], c, tag=_BCAST_TAG + k) for c in children]
        if traced:
            record("allreduce", comm_tid, t0, perf_counter_ns(), step,
                   {"algorithm": "tree", "phase": "broadcast", "chunk": k, **moved, **span_args})
    with tracer.span("wait", tid="comm", step=step, **span_args):  # the children receiving the last chunks
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
