"""Bandwidth of dtgen's ring and tree all-reduce vs torch.distributed.all_reduce.

    OMP_NUM_THREADS=1 python benchmarks/bench_allreduce.py [--world 4] [--sizes 1,10,50] [--iters 10]

Spawns --world gloo processes on this machine; each size is all-reduced --iters times
per algorithm (after 2 warm-ups), algorithms interleaved (rotating order) so background
load hits all alike. Prints median ms, algorithm bandwidth (size / time) and throughput
relative to the built-in collective: the median over iterations of the per-iteration
ratio built-in time / algorithm time (paired: both ran within ~100 ms of each other),
with its interquartile range. Tracing is on for ring/tree (as in a run); `ring-untraced`
and `tree-untraced` show its cost. `--compare FILE` adds `*-ref` rows running the ring
and tree of another copy of collectives.py (before/after measurements in one run).
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

ALGOS = ["builtin", "ring", "tree", "ring-untraced", "tree-untraced"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cpu() -> float:
    """CPU seconds of this process, all threads (gloo's I/O threads included)."""
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _load_ref(path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("opentikz_dt.runner.strategies._collectives_ref", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _worker(rank, world, port, sizes, iters, out_dir, algos, ref):
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
    ref_mod = _load_ref(ref) if ref else None
    on = SimpleNamespace(rank=rank, comm=Comm(metrics), tracer=traced)
    off = SimpleNamespace(rank=rank, comm=Comm(metrics), tracer=untraced)
    results = {}
    for mb in sizes:
        flat = torch.empty(int(mb * 1e6) // 4)
        fns = {
            "builtin": lambda s: dist.all_reduce(flat),
            "ring": lambda s: ring_all_reduce(on, flat, ranks, s),
            "tree": lambda s: tree_all_reduce(on, flat, ranks, s),
            "ring-untraced": lambda s: ring_all_reduce(off, flat, ranks, s),
            "tree-untraced": lambda s: tree_all_reduce(off, flat, ranks, s),
        }
        if ref_mod is not None:
            fns["ring-ref"] = lambda s: ref_mod.ring_all_reduce(on, flat, ranks, s)
            fns["tree-ref"] = lambda s: ref_mod.tree_all_reduce(on, flat, ranks, s)
        # distinct integer-valued inputs per rank: the sum is exact, so every element is checked
        src = torch.arange(flat.numel(), dtype=torch.float32).remainder_(1000).add_(rank)
        want = torch.arange(flat.numel(), dtype=torch.float32).remainder_(1000).mul_(world).add_(world * (world - 1) // 2)
        times = {a: [] for a in algos}
        cpu = {a: 0.0 for a in algos}
        for i in range(iters + 2):
            for j in range(len(algos)):
                a = algos[(i + j) % len(algos)]
                flat.copy_(src)
                dist.barrier()
                t0, c0 = time.perf_counter(), _cpu()
                fns[a](i)
                dist.barrier()  # time until every rank has the result
                if i >= 2:
                    times[a].append(time.perf_counter() - t0)
                    cpu[a] += _cpu() - c0
                assert torch.equal(flat, want), a
        cpus = [None] * world
        dist.all_gather_object(cpus, cpu)
        results[mb] = {"times": times, "cpu": {a: sum(c[a] for c in cpus) / iters for a in algos}}
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
    ap.add_argument("--algos", default=",".join(ALGOS), help="comma-separated; builtin is always run")
    ap.add_argument("--compare", default="", help="another collectives.py: adds ring-ref and tree-ref")
    args = ap.parse_args(argv)
    algos = ["builtin"] + [a for a in args.algos.split(",") if a and a != "builtin"]
    if args.compare:
        algos += ["ring-ref", "tree-ref"]
    os.environ["OMP_NUM_THREADS"] = "1"
    import json

    import torch.multiprocessing as mp

    sizes = [float(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as out:
        mp.spawn(_worker, args=(args.world, _free_port(), sizes, args.iters, out, algos, args.compare),
                 nprocs=args.world, join=True)
        results = json.loads((Path(out) / "results.json").read_text())
    load = os.getloadavg()[0]
    print(f"all-reduce, gloo, {args.world} processes on {os.cpu_count()} cores, {args.iters} interleaved repeats, "
          f"load average {load:.1f} at the end")
    print(f"{'size':>6} | {'algorithm':<14} | {'median ms':>9} | {'GB/s':>6} | {'vs built-in (paired)':>20} | "
          f"{'IQR':>9} | {'CPU ms (all ranks)':>18}")
    print("-" * 103)
    for mb, res in results.items():
        row, cpu = res["times"], res["cpu"]
        base = row["builtin"]
        for a in algos:
            t = statistics.median(row[a])
            ratios = sorted(b / x for b, x in zip(base, row[a]))
            q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
            print(f"{float(mb):>4g}MB | {a:<14} | {t * 1e3:9.2f} | {float(mb) / 1e3 / t:6.2f} | "
                  f"{statistics.median(ratios):19.2f}x | {q[0]:.2f}-{q[2]:.2f} | {cpu[a] * 1e3:18.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
