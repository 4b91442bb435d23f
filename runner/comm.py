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


class _Staged:
    """A Work whose result lands in a host copy; wait() copies it to the device tensor."""

    def __init__(self, work, host, target):
        self.work, self.host, self.target = work, host, target

    def wait(self, *args, **kwargs):
        ok = self.work.wait(*args, **kwargs)
        if self.target is not None:
            self.target.copy_(self.host)
        return ok

    def is_completed(self):
        return self.work.is_completed()

    def source_rank(self):
        return self.work.source_rank()


class Comm:
    """`stage_through_host`: gloo with GPU tensors (ranks sharing GPUs, runner/placement.py):
    gloo's point-to-point ops take host tensors only, so every op goes through a host
    copy (collectives too, to keep one code path)."""

    def __init__(self, metrics, control_group=None, device=None, stage_through_host: bool = False):
        self.metrics = metrics
        self.control_group = control_group
        self.device = device
        self.stage = stage_through_host

    def _host(self, t):
        return t.detach().to("cpu") if self.stage and t.device.type != "cpu" else t

    def _sync_op(self, fn, t, *args, **kwargs):
        """Run a blocking op on a host copy of `t`, then copy the result back."""
        host = self._host(t)
        out = fn(host, *args, **kwargs)
        if host is not t:
            t.copy_(host)
        return out

    # --- point to point --------------------------------------------------------------
    def send(self, t, dst: int, tag: int = 0, group=None) -> None:
        dist.send(self._host(t), dst, group=group, tag=tag)
        self.metrics.sent += nbytes(t)

    def recv(self, t, src: int | None = None, tag: int = 0, group=None) -> int:
        got = self._sync_op(lambda h: dist.recv(h, src, group=group, tag=tag), t)
        self.metrics.recv += nbytes(t)
        return got

    def isend(self, t, dst: int, tag: int = 0, group=None):
        self.metrics.sent += nbytes(t)
        host = self._host(t)
        work = dist.isend(host, dst, group=group, tag=tag)
        return work if host is t else _Staged(work, host, None)  # keeps the host copy alive

    def irecv(self, t, src: int | None = None, tag: int = 0, group=None):
        self.metrics.recv += nbytes(t)
        host = self._host(t)
        work = dist.irecv(host, src, group=group, tag=tag)
        return work if host is t else _Staged(work, host, t)

    def batch_isend_irecv(self, ops, group=None) -> list:
        """ops: [("send"|"recv", tensor, peer) or (kind, tensor, peer, tag)]; returns the works."""
        p2p, staged = [], []
        for op in ops:
            kind, t, peer = op[:3]
            tag = op[3] if len(op) > 3 else 0
            host = self._host(t)
            staged.append((host, t if (kind != "send" and host is not t) else None))
            if kind == "send":
                self.metrics.sent += nbytes(t)
                p2p.append(dist.P2POp(dist.isend, host, peer, group=group, tag=tag))
            else:
                self.metrics.recv += nbytes(t)
                p2p.append(dist.P2POp(dist.irecv, host, peer, group=group, tag=tag))
        works = dist.batch_isend_irecv(p2p) if p2p else []
        if not self.stage:
            return works
        return [_Staged(w, host, target) for w, (host, target) in zip(works, staged)]

    # --- collectives -----------------------------------------------------------------
    def _group_size(self, group) -> int:
        return dist.get_world_size(group)

    def all_reduce(self, t, op: str = "sum", group=None, async_op: bool = False):
        n = self._group_size(group)
        moved = nbytes(t) * 2 * (n - 1) // max(n, 1)
        self.metrics.sent += moved
        self.metrics.recv += moved
        if self.stage and t.device.type != "cpu":
            if async_op:
                host = self._host(t)
                return _Staged(dist.all_reduce(host, op=_OPS[op], group=group, async_op=True), host, t)
            return self._sync_op(lambda h: dist.all_reduce(h, op=_OPS[op], group=group), t)
        return dist.all_reduce(t, op=_OPS[op], group=group, async_op=async_op)

    def reduce(self, t, dst: int, op: str = "sum", group=None):
        n = self._group_size(group)
        moved = nbytes(t) * (n - 1) // max(n, 1)
        self.metrics.sent += moved
        self.metrics.recv += moved
        return self._sync_op(lambda h: dist.reduce(h, dst, op=_OPS[op], group=group), t)

    def broadcast(self, t, src: int, group=None):
        n = self._group_size(group)
        moved = nbytes(t) * (n - 1) // max(n, 1)
        self.metrics.sent += moved
        self.metrics.recv += moved
        return self._sync_op(lambda h: dist.broadcast(h, src, group=group), t)

    def all_gather(self, out: list, t, group=None):
        n = self._group_size(group)
        self.metrics.sent += nbytes(t) * (n - 1)
        self.metrics.recv += nbytes(t) * (n - 1)
        if self.stage and t.device.type != "cpu":
            host_out = [o.detach().to("cpu") for o in out]
            dist.all_gather(host_out, self._host(t), group=group)
            for o, h in zip(out, host_out):
                o.copy_(h)
            return None
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
