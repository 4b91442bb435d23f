"""The hand-written baseline for bench_workloads.py: what a user would write without dtgen.

    torchrun --nproc-per-node 2 benchmarks/plain_ddp_transformer.py --steps 60 --batch 8

A DDP training loop on the same transformer module dtgen builds (the nn.Module only:
the loop, data, launcher and process group here are plain PyTorch), gloo, one thread
per process. Prints one JSON line from rank 0 with the samples/s after warm-up.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.distributed as dist
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from opentikz_dt.runner.model import Transformer


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--samples", type=int, default=4096)
    args = ap.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DDP(Transformer(args.layers, args.d_model, args.heads, args.seq_len, args.vocab))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(args.vocab, (args.samples, args.seq_len + 1), generator=gen)
    ends = []
    for _ in range(args.steps):
        idx = torch.randint(0, args.samples, (args.batch * world,), generator=gen)[rank * args.batch:(rank + 1) * args.batch]
        x, y = tokens[idx, :-1], tokens[idx, 1:]
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss.item()  # read the loss every step, as dtgen's metrics do
        ends.append(time.perf_counter())
    dist.barrier()
    if rank == 0:
        rate = args.batch * world * (len(ends) - 1) / (ends[-1] - ends[0])
        print(json.dumps({"samples_per_s": rate}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
