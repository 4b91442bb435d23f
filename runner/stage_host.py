"""Pipeline stages on GPUs shared over gloo: torch's pipelining talks through host memory.

torch.distributed.pipelining's stages and schedules send GPU tensors point to point
(activations, their gradients, the warm-up's votes and shape metadata), and gloo's
point-to-point ops take host tensors only. `install()` gives those two modules a
`torch.distributed` of their own (`_HostDist`): everything is torch.distributed's,
except the point-to-point calls, which send a host copy of the tensor and receive into
a host buffer copied to the device tensor when the receive is waited on (every schedule
waits on a microbatch's receives before computing on them). What it costs: per
microbatch and stage boundary, the activation crosses device -> host -> (gloo) -> host
-> device forward, its gradient the same way back: two extra copies each way, the
sender's copy blocking its host until the activation is computed.

The rank is its own process, so the replacement touches only this rank's pipelining.
DTGEN_FORCE_HOST_STAGING=1 installs it on the CPU too (the tests: copies into separate
host buffers, so a receive not copied back would show in the numerics).
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist


FORCE_ENV = "DTGEN_FORCE_HOST_STAGING"
PATCHED = ("torch.distributed.pipelining.stage", "torch.distributed.pipelining.schedules")
COST = ("pipeline stages exchange activations and gradients through host memory (gloo cannot send GPU tensors "
        "point to point): two extra copies per microbatch and stage boundary each way")


def forced() -> bool:
    return os.environ.get(FORCE_ENV) == "1"


def needed(device_type: str, backend: str) -> bool:
    """Whether torch's pipelining must send through host memory here (or is forced to)."""
    return (device_type == "cuda" and backend == "gloo") or forced()


def _host_copy(t):
    """A separate host tensor holding t's values (a new buffer even on the CPU)."""
    return torch.empty_like(t, device="cpu").copy_(t)


def _copy_back(host, target) -> None:
    """Received values into the device tensor: a stage's receive buffers are leaves that
    require grad (the backward starts from them), so the copy is outside autograd."""
    if target is not None:
        with torch.no_grad():
            target.copy_(host)


class _Staged:
    """One op's Work; waiting also copies a received host buffer into its device tensor.
    Holds the host buffer (a send's copy too) until the op is done."""

    def __init__(self, work, host, target):
        self.work, self.host, self.target = work, host, target

    def wait(self, *args, **kwargs):
        ok = self.work.wait(*args, **kwargs)
        _copy_back(self.host, self.target)
        return ok

    def is_completed(self):
        return self.work.is_completed()


class _Batch:
    """Works of one batch whose count differs from its ops' (a coalesced batch): waiting
    waits for all, then copies every received host buffer to its device tensor."""

    def __init__(self, works, staged):
        self.works, self.staged = works, staged

    def wait(self, *args, **kwargs):
        for work in self.works:
            work.wait(*args, **kwargs)
        for host, target in self.staged:
            _copy_back(host, target)
        return True

    def is_completed(self):
        return all(w.is_completed() for w in self.works)


class _HostDist:
    """torch.distributed for the pipelining modules, point to point through host memory."""

    def __getattr__(self, name):
        return getattr(dist, name)

    def isend(self, tensor, dst=None, group=None, tag=0, group_dst=None):
        host = _host_copy(tensor)
        return _Staged(dist.isend(host, dst, group=group, tag=tag, group_dst=group_dst), host, None)

    def irecv(self, tensor, src=None, group=None, tag=0, group_src=None):
        host = torch.empty_like(tensor, device="cpu")
        return _Staged(dist.irecv(host, src, group=group, tag=tag, group_src=group_src), host, tensor)

    def send(self, tensor, dst=None, group=None, tag=0, group_dst=None):
        return dist.send(_host_copy(tensor), dst, group=group, tag=tag, group_dst=group_dst)

    def recv(self, tensor, src=None, group=None, tag=0, group_src=None):
        host = torch.empty_like(tensor, device="cpu")
        got = dist.recv(host, src, group=group, tag=tag, group_src=group_src)
        _copy_back(host, tensor)
        return got

    def send_object_list(self, object_list, dst=None, group=None, device=None, **kwargs):
        return dist.send_object_list(object_list, dst, group=group, device=torch.device("cpu"), **kwargs)

    def recv_object_list(self, object_list, src=None, group=None, device=None, **kwargs):
        return dist.recv_object_list(object_list, src, group=group, device=torch.device("cpu"), **kwargs)

    def batch_isend_irecv(self, p2p_op_list):
        real, staged = [], []
        for op in p2p_op_list:
            sending = op.op in (self.isend, dist.isend)
            host = _host_copy(op.tensor) if sending else torch.empty_like(op.tensor, device="cpu")
            staged.append((host, None if sending else op.tensor))
            real.append(dist.P2POp(dist.isend if sending else dist.irecv, host, op.peer, op.group, op.tag))
        works = dist.batch_isend_irecv(real)
        if len(works) != len(staged):
            return [_Batch(works, staged)]
        return [_Staged(w, host, target) for w, (host, target) in zip(works, staged)]

    def P2POp(self, op, tensor, peer=None, group=None, tag=0, group_peer=None):  # noqa: N802 (torch's name)
        return _P2POp(self, op, tensor, peer, group, tag, group_peer)


class _P2POp:
    """dist.P2POp's fields, its op being _HostDist's isend/irecv (the schedules call
    `op.op(...)` themselves for a batch of sends only or receives only)."""

    def __init__(self, host_dist, op, tensor, peer, group, tag, group_peer):
        real_op = dist.isend if op in (host_dist.isend, dist.isend) else dist.irecv
        real = dist.P2POp(real_op, tensor, peer, group, tag, group_peer)
        self.op = host_dist.isend if real_op is dist.isend else host_dist.irecv
        self.tensor, self.group, self.peer, self.tag, self.group_peer = tensor, real.group, real.peer, tag, real.group_peer

    def __repr__(self):
        return f"P2POp(through host, {'send' if self.op.__name__ == 'isend' else 'recv'}, peer {self.peer})"


_HOST = _HostDist()


def install() -> None:
    """Point torch's pipelining modules at _HostDist (idempotent; this process only)."""
    import importlib

    for name in PATCHED:
        module = importlib.import_module(name)
        if getattr(module, "dist", None) not in (dist, _HOST):
            raise RuntimeError(f"{name} no longer uses torch.distributed as `dist` "
                               f"(torch {torch.__version__}): cannot send its tensors through host memory")
        module.dist = _HOST


def stage_through_host_if_needed(ctx) -> bool:
    """The hook the pipeline strategies call before building their schedule."""
    if needed(torch.device(ctx.device).type, ctx.backend):
        install()
        return True
    return False
