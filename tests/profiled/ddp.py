"""DDP on gloo, profiled with tensorboard_trace_handler (plain .json)."""

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from _common import STEPS, finish, init, out_dir, profiler

rank, world = init()
model = DDP(torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 16)))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
with profiler(out_dir(), rank) as prof:
    for _ in range(STEPS + 1):
        model(torch.randn(32, 256)).square().mean().backward()
        opt.step()
        opt.zero_grad()
        prof.step()
finish()
