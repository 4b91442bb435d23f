"""What every profiled script shares: torchrun's environment in, one Kineto trace per rank out.

These scripts are plain torchrun scripts (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT in
the environment) that profile a few training steps with torch.profiler, as a user's
own script would. No dtgen code is imported: the traces are torch's own.
"""

import os

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

STEPS = 3  # profiled steps, after one warm-up step


def init():
    torch.manual_seed(0)
    dist.init_process_group("gloo")
    return dist.get_rank(), dist.get_world_size()


def profiler(out: str, rank: int, gzip: bool = False):
    """torch.profiler as the tutorials write it: a schedule, tensorboard_trace_handler."""
    return profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                   schedule=schedule(wait=0, warmup=1, active=STEPS),
                   on_trace_ready=tensorboard_trace_handler(out, worker_name=f"rank{rank}", use_gzip=gzip))


def finish():
    dist.barrier()
    dist.destroy_process_group()


def out_dir() -> str:
    return os.environ["PROFILE_OUT"]
