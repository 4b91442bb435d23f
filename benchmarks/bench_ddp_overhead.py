"""dtgen's all-reduce run vs a plain hand-written DDP script; tracing on vs off.

    OMP_NUM_THREADS=1 python benchmarks/bench_ddp_overhead.py [--workers 3] [--steps 300] [--rounds 3] [--algorithm native]

Same model (the spec default MLP 32-128-128-10), batch (256 per worker), steps and
launcher (torch's elastic launcher, gloo, one thread per process) for all three. The
throughput is measured from the end of warm-up step WARMUP to the last step, so process
start-up is excluded. Configurations are interleaved over --rounds and the median is
reported, because this machine's cores are shared.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

WARMUP = 10


def plain_ddp(steps: int, batch: int, layers: list, out: str) -> None:
    """The hand-written baseline: what a user would write without dtgen."""
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    mods = []
    for i, (a, b) in enumerate(zip(layers[:-1], layers[1:])):
        mods.append(nn.Linear(a, b))
        if i < len(layers) - 2:
            mods.append(nn.ReLU())
    model = DDP(nn.Sequential(*mods))
    if os.environ.get("PLAIN_HOOK"):  # experiment: cost of any Python comm hook
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        model.register_comm_hook(None, allreduce_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(16384, layers[0], generator=gen)
    y = (x @ torch.randn(layers[0], layers[-1], generator=gen)).argmax(1)
    ends = []
    for step in range(steps):
        idx = torch.randint(0, x.shape[0], (batch * world,), generator=gen)[rank * batch:(rank + 1) * batch]
        loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss.item()
        ends.append(time.perf_counter())
    dist.barrier()
    if rank == 0:
        Path(out).write_text(json.dumps({"ends": ends}))
    dist.destroy_process_group()


def run_plain(workers: int, steps: int, batch: int, layers: list) -> float:
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "plain.json")
        cfg = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=workers, rdzv_backend="c10d",
                           rdzv_endpoint="localhost:0", max_restarts=0, run_id=f"plain-{time.time_ns()}")
        elastic_launch(cfg, plain_ddp)(steps, batch, layers, out)
        ends = json.loads(Path(out).read_text())["ends"]
    return batch * workers * (steps - WARMUP) / (ends[-1] - ends[WARMUP - 1])


def run_dtgen(workers: int, steps: int, batch: int, layers: list, algorithm: str, traced: bool) -> tuple[float, dict]:
    import yaml

    from opentikz_dt.runner.launch import launch_run

    spec = {"name": "bench", "strategy": {"kind": "allreduce", "algorithm": algorithm},
            "topology": {"workers": {"count": workers}},
            "training": {"model": {"layers": layers}, "batch_size": batch, "steps": steps},
            "runtime": {"backend": "gloo", "device": "cpu", "trace": {"enabled": traced}}}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.yaml"
        path.write_text(yaml.safe_dump(spec))
        result = launch_run(path, out=Path(tmp) / "run", progress=False, echo=lambda line: None)
        wall = result.metrics["wall_s"]
        size = (Path(tmp) / "run" / "trace.json").stat().st_size
    return batch * workers * (steps - WARMUP) / (wall[-1] - wall[WARMUP - 1]), {"trace_bytes": size}


def tracer_cost_us(n: int = 200_000) -> float:
    """Microseconds per span, recorded and written to disk: the noise-free part of the overhead."""
    from opentikz_dt.runner.trace import Tracer

    with tempfile.TemporaryDirectory() as tmp:
        tracer = Tracer(Path(tmp) / "r.jsonl", 0, "w1", max_events=n + 1)
        t0 = time.perf_counter()
        for i in range(n):
            with tracer.span("allreduce", tid="comm", step=i, algorithm="ring", phase="reduce-scatter", chunk=0):
                pass
        tracer.close()
        return (time.perf_counter() - t0) / n * 1e6


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--algorithm", default="native", choices=["native", "ring", "tree", "hierarchical"])
    args = ap.parse_args(argv)
    os.environ["OMP_NUM_THREADS"] = "1"
    layers = [32, 128, 128, 10]
    configs = ["plain DDP script", f"dtgen {args.algorithm}, trace off", f"dtgen {args.algorithm}, trace on"]
    rates = {c: [] for c in configs}
    trace_bytes = 0
    for round_ in range(args.rounds):
        # rotate the order each round, so drifting background load hits every configuration
        for i in range(3):
            c = configs[(i + round_) % 3]
            if c == configs[0]:
                rate = run_plain(args.workers, args.steps, args.batch, layers) if args.algorithm == "native" else float("nan")
            else:
                rate, info = run_dtgen(args.workers, args.steps, args.batch, layers, args.algorithm, c.endswith("on"))
                trace_bytes = info["trace_bytes"] if c.endswith("on") else trace_bytes
            rates[c].append(rate)
    med = {c: statistics.median(v) for c, v in rates.items()}
    print(f"{args.workers} workers, gloo, MLP {'-'.join(map(str, layers))}, batch {args.batch}/worker, "
          f"{args.steps} steps (throughput after step {WARMUP}), median of {args.rounds} rounds on {os.cpu_count()} cores")
    print(f"{'configuration':<28} | {'samples/s':>10} | {'vs plain':>8} | {'all rounds':<30}")
    print("-" * 86)
    for c in configs:
        vs = med[c] / med[configs[0]] if med[configs[0]] == med[configs[0]] else float("nan")
        print(f"{c:<28} | {med[c]:>10,.0f} | {vs:>7.3f}x | {', '.join(f'{r:,.0f}' for r in rates[c])}")
    overhead = 1 - med[configs[2]] / med[configs[1]]
    print(f"tracing overhead: {overhead * 100:.1f}% of throughput; trace.json {trace_bytes / 1e6:.1f} MB")
    per_span = tracer_cost_us()
    spans_per_step = 3 + {"native": 1, "ring": 2 * (args.workers - 1), "tree": 2}.get(args.algorithm, 3)
    step_s = args.batch * args.workers / med[configs[1]]
    print(f"tracer cost: {per_span:.2f} us per span (recorded + written); {spans_per_step} spans/step on a "
          f"{step_s * 1e3:.2f} ms step = {per_span * spans_per_step / (step_s * 1e6) * 100:.2f}% "
          "(the rest of a measured difference is noise or, for native, DDP's Python comm hook)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
