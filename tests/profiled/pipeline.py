"""Two pipeline stages with torch.distributed.pipelining's 1F1B schedule over gloo."""

import torch
from torch.distributed.pipelining import PipelineStage, Schedule1F1B

from _common import STEPS, finish, init, out_dir, profiler

rank, world = init()
torch.manual_seed(rank)
stage_module = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU())
stage = PipelineStage(stage_module, rank, world, torch.device("cpu"))
loss_fn = torch.nn.functional.mse_loss
schedule = Schedule1F1B(stage, n_microbatches=4, loss_fn=loss_fn)
opt = torch.optim.SGD(stage_module.parameters(), lr=0.01)
with profiler(out_dir(), rank) as prof:
    for _ in range(STEPS + 1):
        x, target = torch.randn(32, 256), torch.randn(32, 256)
        if rank == 0:
            schedule.step(x)
        else:
            schedule.step(target=target, losses=[])
        opt.step()
        opt.zero_grad()
        prof.step()
finish()
