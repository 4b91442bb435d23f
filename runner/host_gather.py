"""Gathering a sharded tensor (DTensor.full_tensor) where gloo must do it on host memory.

Ranks sharing one GPU talk over gloo (runner/placement.py). DTensor's own gather of GPU
shards over gloo (a functional all-gather of GPU tensors) killed rank 0 with SIGSEGV on
one H100 (torch 2.11), after every training step had run. So there the gather goes
through host memory: each rank copies its local shard to the CPU, the shards are
wrapped as a DTensor of the same layout on a CPU view of the same mesh (the same gloo
groups, DeviceMesh.from_group: no new group, nothing collective to set up), gathered
there as on a CPU run, and the whole tensor is copied back to the device. Its cost:
one device-to-host copy of the shard and one host-to-device copy of the whole tensor
per parameter, once, at the end of training.

On the CPU (or with NCCL) `full_tensor` is DTensor's own, unless DTGEN_FORCE_HOST_STAGING=1
(runner/stage_host.py) forces the host path there too (the tests).
"""

from __future__ import annotations

import torch


def gather_through_host(device_type: str, backend: str) -> bool:
    """Whether a gather of tensors on `device_type` over `backend` must go through host
    memory: GPU tensors over gloo."""
    return device_type == "cuda" and backend == "gloo"


class FullTensors:
    """`full(value)`: a DTensor's whole tensor (other values as they are); every rank of
    its mesh must call it, in the same order. `via_host`: as gather_through_host says
    (tests force it on the CPU, where it must give exactly DTensor's own result)."""

    def __init__(self, via_host: bool):
        self.via_host = via_host
        self._cpu_meshes: dict = {}

    def full(self, value):
        from torch.distributed.tensor import DTensor

        if not isinstance(value, DTensor):
            return value
        if not self.via_host:
            return value.full_tensor()
        host = DTensor.from_local(value.to_local().detach().to("cpu"), self._cpu_mesh(value.device_mesh),
                                  value.placements, run_check=False, shape=value.shape, stride=value.stride())
        return host.full_tensor().to(value.device)

    def _cpu_mesh(self, mesh):
        """The same ranks and gloo groups as `mesh`, with device type cpu."""
        from torch.distributed.device_mesh import DeviceMesh

        key = (tuple(mesh.mesh.flatten().tolist()), tuple(mesh.mesh.shape), mesh.mesh_dim_names)
        if key not in self._cpu_meshes:
            groups = [mesh.get_group(dim) for dim in range(mesh.ndim)]
            self._cpu_meshes[key] = DeviceMesh.from_group(
                groups if mesh.ndim > 1 else groups[0], "cpu", mesh=mesh.mesh.to("cpu"),
                mesh_dim_names=mesh.mesh_dim_names)
        return self._cpu_meshes[key]


def full_tensors(ctx, force_host: bool = False) -> FullTensors:
    """The gatherer for this rank's device and backend."""
    from .stage_host import forced

    return FullTensors(force_host or forced() or gather_through_host(torch.device(ctx.device).type, ctx.backend))
