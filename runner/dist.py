"""The one place that sets up torch.distributed for a rank: backend, device, timeout.

Device and backend follow runner/placement.py: NCCL with one GPU per local rank, gloo
with ranks sharing GPUs round-robin, gloo on CPU. On NCCL a gloo side group over all ranks carries the
control plane (object messages, any-source receives, health checks such as
monitored_barrier), which NCCL cannot.
"""

from __future__ import annotations

import datetime
import os

import torch
import torch.distributed as dist

from .placement import Placement, choose_placement


def placement_for(spec, ranks_per_node: int | None = None) -> Placement:
    """This node's Placement (runner/placement.py) for the spec; inside a rank the
    launcher's LOCAL_WORLD_SIZE gives the ranks per node."""
    if ranks_per_node is None:
        ranks_per_node = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return choose_placement(spec.runtime.device, spec.runtime.backend, ranks_per_node, gpus)


def resolve_backend(spec) -> tuple[str, str]:
    """(backend, device kind) for a spec on this machine."""
    placement = placement_for(spec)
    return placement.backend, placement.device


def setup_process_group(spec, rank: int, world_size: int, local_rank: int):
    """init_process_group from the launcher's env; returns (backend, torch.device, control group)."""
    placement = placement_for(spec)
    backend = placement.backend
    timeout = datetime.timedelta(seconds=spec.runtime.timeout_s)
    if placement.device == "cuda":
        device = torch.device("cuda", placement.gpu_of(local_rank))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if backend == "nccl":
        dist.init_process_group(backend, rank=rank, world_size=world_size, timeout=timeout, device_id=device)
        control = dist.new_group(backend="gloo", timeout=timeout)
    else:  # gloo, on CPU or on GPUs shared round-robin (tensors staged through host memory)
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
