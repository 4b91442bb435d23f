"""Byte-counting wrappers over torch.distributed for strategies (`ctx.comm`).

Peers are global ranks. Collectives count the bytes a bandwidth-optimal ring moves
(2(n-1)/n of the buffer for all-reduce, (n-1)/n for reduce and broadcast): an estimate
of traffic, since the backend's actual algorithm is not observable. Point-to-point ops
count exactly what they send and receive. No tracing here: strategies wrap calls in
`ctx.tracer.span(...)` with the trace vocabulary names.
"""

from __future__ import annotations

import pickle

import torch
import torch.distributed as dist

_OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}


def nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


class Comm:
    def __init__(self, metrics, control_group=None, device=None):
        self.metrics = metrics
        self.control_group = control_group
        self.device = device

    # --- point to point --------------------------------------------------------------
    def send(self, t, dst: int, tag: int = 0, group=None) -> None:
        dist.send(t, dst, group=group, tag=tag)
        self.metrics.sent += nbytes(t)

    def recv(self, t, src: int | None = None, tag: int = 0, group=None) -> int:
        got = dist.recv(t, src, group=group, tag=tag)
        self.metrics.recv += nbytes(t)
        return got

    def isend(self, t, dst: int, tag: int = 0, group=None):
        self.metrics.sent += nbytes(t)
        return dist.isend(t, dst, group=group, tag=tag)

    def irecv(self, t, src: int | None = None, tag: int = 0, group=None):
        self.metrics.recv += nbytes(t)
        return dist.irecv(t, src, group=group, tag=tag)

    def batch_isend_irecv(self, ops, group=None) -> list:
        """ops: [("send"|"recv", tensor, peer) or (kind, tensor, peer, tag)]; returns the works."""
        p2p = []
        for op in ops:
            kind, t, peer = op[:3]
            tag = op[3] if len(op) > 3 else 0
            if kind == "send":
                self.metrics.sent += nbytes(t)
                p2p.append(dist.P2POp(dist.isend, t, peer, group=group, tag=tag))
            else:
                self.metrics.recv += nbytes(t)
                p2p.append(dist.P2POp(dist.irecv, t, peer, group=group, tag=tag))
        return dist.batch_isend_irecv(p2p) if p2p else []

    # --- collectives -----------------------------------------------------------------
    def _group_size(self, group) -> int:
        return dist.get_world_size(group)

    def all_reduce(self, t, op: str = "sum", group=None, async_op: bool = False):
        n = self._group_size(group)
        moved = nbytes(t) * 2 * (n - 1) // max(n, 1)
        self.metrics.sent += moved
        self.metrics.recv += moved
        return dist.all_reduce(t, op=_OPS[op], group=group, async_op=async_op)

    def reduce(self, t, dst: int, op: str = "sum", group=None):
        n = self._group_size(group)
        moved = nbytes(t) * (n - 1) // max(n, 1)
        self.metrics.sent += moved
        self.metrics.recv += moved
        return dist.reduce(t, dst, op=_OPS[op], group=group)

    def broadcast(self, t, src: int, group=None):
        n = self._group_size(group)
        moved = nbytes(t) * (n - 1) // max(n, 1)
        self.metrics.sent += moved
        self.metrics.recv += moved
        return dist.broadcast(t, src, group=group)

    def all_gather(self, out: list, t, group=None):
        n = self._group_size(group)
        self.metrics.sent += nbytes(t) * (n - 1)
        self.metrics.recv += nbytes(t) * (n - 1)
        return dist.all_gather(out, t, group=group)

    def barrier(self, group=None) -> None:
        dist.barrier(group=group)

    # --- control plane (pickled objects over the gloo control group) --------------------
    def send_object(self, obj, dst: int, tag: int = 0) -> None:
        payload = torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8)
        size = torch.tensor([payload.numel()], dtype=torch.int64)
        self.send(size, dst, tag=tag, group=self.control_group)
        self.send(payload, dst, tag=tag, group=self.control_group)

    def recv_object(self, src: int | None = None, tag: int = 0):
        """Returns (obj, src). With src=None any sender (gloo control group only)."""
        size = torch.empty(1, dtype=torch.int64)
        src = self.recv(size, src, tag=tag, group=self.control_group)
        payload = torch.empty(int(size.item()), dtype=torch.uint8)
        self.recv(payload, src, tag=tag, group=self.control_group)
        return pickle.loads(payload.numpy().tobytes()), src
