"""Tensor parallel (ColwiseParallel then RowwiseParallel) on a 1-D "tensor" device mesh over gloo,
written with prof.export_chrome_trace instead of a trace handler."""

import os

import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from torch.profiler import ProfilerActivity, profile, schedule

from _common import STEPS, finish, init, out_dir

rank, world = init()
mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("tensor",))
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256))
parallelize_module(model, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
opt = torch.optim.SGD(model.parameters(), lr=0.01)
model(torch.randn(32, 256)).square().mean().backward()  # warm-up, outside the profile
opt.step()
opt.zero_grad()


def export(prof):
    prof.export_chrome_trace(os.path.join(out_dir(), f"rank{rank}.pt.trace.json"))


with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
             schedule=schedule(wait=0, warmup=1, active=STEPS, repeat=1), on_trace_ready=export) as prof:
    for _ in range(STEPS + 1):
        model(torch.randn(32, 256)).square().mean().backward()
        opt.step()
        opt.zero_grad()
        prof.step()
finish()
