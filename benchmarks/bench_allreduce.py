"""Bandwidth of dtgen's ring and tree all-reduce vs torch.distributed.all_reduce.

    OMP_NUM_THREADS=1 python benchmarks/bench_allreduce.py [--world 4] [--sizes 1,10,50] [--iters 10]

Spawns --world gloo processes on this machine; each size is all-reduced --iters times
per algorithm (after 2 warm-ups), algorithms interleaved so background load hits all
alike. Prints median ms, algorithm bandwidth (size / time) and throughput relative to
the built-in collective. Tracing is on for ring/tree (as in a run); `ring-untraced`
shows its cost.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

ALGOS = ["builtin", "ring", "tree", "ring-untraced"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank, world, port, sizes, iters, out_dir):
    import torch
    import torch.distributed as dist

    from opentikz_dt.runner.comm import Comm
    from opentikz_dt.runner.metrics import Metrics
    from opentikz_dt.runner.strategies import collectives
    from opentikz_dt.runner.strategies.collectives import ring_all_reduce, tree_all_reduce

    if os.environ.get("RING_PIECE_KB"):  # experiments with the ring's pipelining granularity
        collectives.PIECE_ELEMS = int(os.environ["RING_PIECE_KB"]) * 256
        collectives.MAX_PIECES = int(os.environ.get("RING_MAX_PIECES", collectives.MAX_PIECES))
    from opentikz_dt.runner.trace import Tracer

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    metrics = Metrics(Path(out_dir), rank, f"w{rank + 1}", "worker", clock=time.perf_counter)
    traced = Tracer(Path(out_dir) / f"rank{rank}.jsonl", rank, f"w{rank + 1}", max_events=10_000_000)
    untraced = Tracer(Path(out_dir) / f"off{rank}.jsonl", rank, f"w{rank + 1}", enabled=False)
    ranks = list(range(world))
    results = {}
    for mb in sizes:
        flat = torch.ones(int(mb * 1e6) // 4)
        fns = {
            "builtin": lambda s: dist.all_reduce(flat),
            "ring": lambda s: ring_all_reduce(SimpleNamespace(rank=rank, comm=Comm(metrics), tracer=traced), flat, ranks, s),
            "tree": lambda s: tree_all_reduce(SimpleNamespace(rank=rank, comm=Comm(metrics), tracer=traced), flat, ranks, s),
            "ring-untraced": lambda s: ring_all_reduce(SimpleNamespace(rank=rank, comm=Comm(metrics), tracer=untraced), flat, ranks, s),
        }
        times = {a: [] for a in ALGOS}
        for i in range(iters + 2):
            for a in ALGOS:
                flat.fill_(1.0)
                dist.barrier()
                t0 = time.perf_counter()
                fns[a](i)
                dist.barrier()  # time until every rank has the result
                if i >= 2:
                    times[a].append(time.perf_counter() - t0)
                assert abs(flat[0].item() - world) < 1e-3 and abs(flat[-1].item() - world) < 1e-3, a
        results[mb] = {a: statistics.median(v) for a, v in times.items()}
        traced.flush()
    if rank == 0:
        import json

        (Path(out_dir) / "results.json").write_text(json.dumps(results))
    dist.destroy_process_group()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", type=int, default=4)
    ap.add_argument("--sizes", default="1,10,50", help="MB, comma-separated")
    ap.add_argument("--iters", type=int, default=10)
    args = ap.parse_args(argv)
    os.environ["OMP_NUM_THREADS"] = "1"
    import json

    import torch.multiprocessing as mp

    sizes = [float(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as out:
        mp.spawn(_worker, args=(args.world, _free_port(), sizes, args.iters, out), nprocs=args.world, join=True)
        results = json.loads((Path(out) / "results.json").read_text())
    print(f"all-reduce, gloo, {args.world} processes on {os.cpu_count()} cores, median of {args.iters}")
    print(f"{'size':>6} | {'algorithm':<14} | {'ms':>8} | {'GB/s':>6} | {'vs built-in':>11}")
    print("-" * 58)
    for mb, row in results.items():
        base = row["builtin"]
        for a in ALGOS:
            t = row[a]
            print(f"{float(mb):>4g}MB | {a:<14} | {t * 1e3:8.2f} | {float(mb) / 1e3 / t:6.2f} | {base / t:10.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
