"""FSDP2 (fully_shard) on a CPU device mesh over gloo, traces gzipped (.json.gz)."""

import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from _common import STEPS, finish, init, out_dir, profiler

rank, world = init()
mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("data",))
model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                            torch.nn.ReLU(), torch.nn.Linear(256, 16))
for layer in (model[0], model[2], model[4]):
    fully_shard(layer, mesh=mesh)
fully_shard(model, mesh=mesh)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
with profiler(out_dir(), rank, gzip=True) as prof:
    for _ in range(STEPS + 1):
        model(torch.randn(32, 256)).square().mean().backward()
        opt.step()
        opt.zero_grad()
        prof.step()
finish()
