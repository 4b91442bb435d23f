"""The one place that sets up torch.distributed for a rank: backend, device, timeout.

`runtime.backend`/`runtime.device` auto: NCCL with one GPU per local rank when CUDA is
available, else gloo on CPU. On NCCL a gloo side group over all ranks carries the
control plane (object messages, any-source receives, health checks such as
monitored_barrier), which NCCL cannot.
"""

from __future__ import annotations

import datetime

import torch
import torch.distributed as dist

from ..errors import RunError


def resolve_backend(spec) -> tuple[str, str]:
    """(backend, device kind) for a spec on this machine."""
    backend, device = spec.runtime.backend, spec.runtime.device
    cuda = torch.cuda.is_available()
    if device == "auto":
        device = "cuda" if cuda and backend != "gloo" else "cpu"
    if backend == "auto":
        backend = "nccl" if device == "cuda" else "gloo"
    if device == "cuda" and not cuda:
        raise RunError("runtime.device is cuda but CUDA is not available on this machine")
    if backend == "nccl" and device != "cuda":
        raise RunError("runtime.backend nccl needs runtime.device cuda (NCCL runs on GPUs only)")
    return backend, device


def setup_process_group(spec, rank: int, world_size: int, local_rank: int):
    """init_process_group from the launcher's env; returns (backend, torch.device, control group)."""
    backend, kind = resolve_backend(spec)
    timeout = datetime.timedelta(seconds=spec.runtime.timeout_s)
    if kind == "cuda":
        if local_rank >= torch.cuda.device_count():
            raise RunError(f"rank {rank} needs GPU {local_rank} but this node has {torch.cuda.device_count()}:"
                           " NCCL runs one GPU per local rank")
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        dist.init_process_group(backend, rank=rank, world_size=world_size, timeout=timeout, device_id=device)
        control = dist.new_group(backend="gloo", timeout=timeout)
    else:
        device = torch.device("cpu")
        dist.init_process_group(backend, rank=rank, world_size=world_size, timeout=timeout)
        control = dist.group.WORLD
    return backend, device, control


def new_group(ranks, spec, backend: str | None = None):
    return dist.new_group(ranks=list(ranks), timeout=datetime.timedelta(seconds=spec.runtime.timeout_s), backend=backend)


def teardown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def settle(device) -> None:
    """On GPU, wait for queued kernels so the host timestamp closing a span is real."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
