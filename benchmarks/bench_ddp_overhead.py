"""dtgen's all-reduce run vs a plain hand-written DDP script; tracing on vs off.

    OMP_NUM_THREADS=1 python benchmarks/bench_ddp_overhead.py [--workers 3] [--steps 600] [--rounds 5] [--algorithm native]

Same model (the spec default MLP 32-128-128-10), batch (256 per worker), steps and
launcher (torch's elastic launcher, gloo, one thread per process) for every
configuration. The throughput is measured from the end of warm-up step WARMUP to the
last step, so process start-up is excluded. Each round runs every configuration once,
in a rotated order, and the overheads are the median over rounds of the per-round ratio
to that round's "trace off" run (paired A/B: background load drifts slowly, so a pair
run back to back shares it), with the min-max over rounds as the spread.

For native (DDP) a third dtgen configuration, "hook only", runs with tracing on but
`sample_every` beyond the run (nothing recorded after step 0): it isolates the cost of
DDP's Python comm hook, which tracing needs to see bucket all-reduces, from the cost of
recording spans.

Whole-run pairs are noisy on the shared 2-core box (other engineers' jobs come and go
within a run), so two finer measurements follow, both immune to slow drift:
- in-run A/B: one run with `trace.sample_every: 2`, so even steps are traced and odd
  steps are not, in the same processes; the recording overhead is the median over
  adjacent (traced, untraced) step pairs of their duration ratio. Writing the trace
  happens at a flush every 0.5 s and is added from the tracer's own cost (below).
- hook cost: in one process, two identical DDP models (world size 1, gloo), one with
  dtgen's comm hook and one without, stepped alternately; median per-step difference.
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
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "plain.json")
        # the agent's logs in the folder removed after: without a log dir it makes a
        # torchelastic_* folder in the temporary directory and leaves it there
        cfg = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=workers, rdzv_backend="c10d",
                           rdzv_endpoint="localhost:0", max_restarts=0, run_id=f"plain-{time.time_ns()}",
                           logs_specs=DefaultLogsSpecs(log_dir=str(Path(tmp) / "elastic")))
        elastic_launch(cfg, plain_ddp)(steps, batch, layers, out)
        ends = json.loads(Path(out).read_text())["ends"]
    return batch * workers * (steps - WARMUP) / (ends[-1] - ends[WARMUP - 1])


def run_dtgen(workers: int, steps: int, batch: int, layers: list, algorithm: str, traced: bool,
              sample_every: int = 1) -> tuple[float, dict]:
    import yaml

    from opentikz_dt.runner.launch import launch_run

    spec = {"name": "bench", "strategy": {"kind": "allreduce", "algorithm": algorithm},
            "topology": {"workers": {"count": workers}},
            "training": {"model": {"layers": layers}, "batch_size": batch, "steps": steps},
            "runtime": {"backend": "gloo", "device": "cpu",
                        "trace": {"enabled": traced, "sample_every": sample_every}}}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.yaml"
        path.write_text(yaml.safe_dump(spec))
        result = launch_run(path, out=Path(tmp) / "run", progress=False, echo=lambda line: None)
        wall = result.metrics["wall_s"]
        size = (Path(tmp) / "run" / "trace.json").stat().st_size
    return batch * workers * (steps - WARMUP) / (wall[-1] - wall[WARMUP - 1]), {"trace_bytes": size}


def tracer_cost_us(n: int = 200_000) -> dict:
    """Microseconds per span: recording (a `span` context manager; `add_span` from raw
    perf_counter_ns stamps, as the collectives and the DDP hook do) and writing to disk.
    The noise-free part of the overhead."""
    from time import perf_counter_ns

    from opentikz_dt.runner import trace

    out = {}
    saved, trace.FLUSH_EVENTS = trace.FLUSH_EVENTS, 1 << 60  # time the write separately
    try:
        with tempfile.TemporaryDirectory() as tmp:
            tracer = trace.Tracer(Path(tmp) / "r.jsonl", 0, "w1", max_events=2 * n + 1)
            t0 = time.perf_counter()
            for i in range(n):
                with tracer.span("allreduce", tid="comm", step=i, algorithm="ring", phase="reduce-scatter", chunk=0):
                    pass
            t1 = time.perf_counter()
            for i in range(n):
                a = perf_counter_ns()
                tracer.add_span("allreduce", a, perf_counter_ns(), i, "comm", algorithm="ring", phase="all-gather", chunk=1)
            t2 = time.perf_counter()
            tracer.close()
            t3 = time.perf_counter()
    finally:
        trace.FLUSH_EVENTS = saved
    out["span"] = (t1 - t0) / n * 1e6
    out["add_span"] = (t2 - t1) / n * 1e6
    out["write"] = (t3 - t2) / (2 * n) * 1e6
    return out


def _trimmed_mean(values: list, cut: float = 0.1) -> float:
    values = sorted(values)
    k = int(len(values) * cut)
    return statistics.fmean(values[k:len(values) - k])


def run_in_run(workers: int, steps: int, batch: int, layers: list, algorithm: str, traced: bool = True) -> dict:
    """One run traced on even steps only: paired step-duration ratios even/odd (traced/untraced).
    With traced=False the same split of an untraced run: the A/A control (bias and noise floor)."""
    import yaml

    from opentikz_dt.runner.launch import launch_run

    spec = {"name": "bench", "strategy": {"kind": "allreduce", "algorithm": algorithm},
            "topology": {"workers": {"count": workers}},
            "training": {"model": {"layers": layers}, "batch_size": batch, "steps": steps},
            "runtime": {"backend": "gloo", "device": "cpu", "trace": {"enabled": traced, "sample_every": 2}}}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.yaml"
        path.write_text(yaml.safe_dump(spec))
        wall = launch_run(path, out=Path(tmp) / "run", progress=False, echo=lambda line: None).metrics["wall_s"]
    dur = {s: wall[s] - wall[s - 1] for s in range(WARMUP, len(wall))}
    ratios = sorted(dur[s] / dur[s + 1] for s in dur if s % 2 == 0 and s + 1 in dur)
    q = statistics.quantiles(ratios, n=4)
    even = [dur[s] for s in dur if s % 2 == 0]
    odd = [dur[s] for s in dur if s % 2]
    return {"ratio": statistics.median(ratios), "q1": q[0], "q3": q[2], "pairs": len(ratios),
            "tmean": _trimmed_mean(even) / _trimmed_mean(odd), "step_us": statistics.median(odd) * 1e6}


def hook_cost_us(layers: list, batch: int, steps: int = 3000) -> dict:
    """Per-step cost of dtgen's DDP comm hook (tracing on, recording and not), in one process."""
    import socket
    from types import SimpleNamespace

    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    from opentikz_dt.runner.strategies.allreduce import _traced_allreduce_hook
    from opentikz_dt.runner.trace import Tracer

    torch.set_num_threads(1)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        def model():
            torch.manual_seed(0)
            mods = []
            for i, (a, b) in enumerate(zip(layers[:-1], layers[1:])):
                mods += [nn.Linear(a, b)] + ([nn.ReLU()] if i < len(layers) - 2 else [])
            return DDP(nn.Sequential(*mods))

        with tempfile.TemporaryDirectory() as tmp:
            tracer = Tracer(Path(tmp) / "r.jsonl", 0, "w1", max_events=10 * steps, sample_every=2)
            ctx = SimpleNamespace(world_size=1, tracer=tracer)
            plain, hooked = model(), model()
            state = {"step": 0}
            hooked.register_comm_hook(state, _traced_allreduce_hook(ctx))
            x, y = torch.randn(batch, layers[0]), torch.randint(0, layers[-1], (batch,))
            times = {"plain": [], "hook, recording": [], "hook, not recording": []}
            for i in range(steps):
                for m in ((plain, hooked) if i % 2 else (hooked, plain)):
                    state["step"] = i
                    loss = nn.functional.cross_entropy(m(x), y)
                    t0 = time.perf_counter_ns()
                    loss.backward()
                    t1 = time.perf_counter_ns()
                    key = "plain" if m is plain else ("hook, recording" if i % 2 == 0 else "hook, not recording")
                    if i >= 20:
                        times[key].append(t1 - t0)
            tracer.close()
    finally:
        dist.destroy_process_group()
    base = statistics.median(times["plain"])
    return {k: (statistics.median(v) - base) / 1e3 for k, v in times.items() if k != "plain"} | {"backward": base / 1e3}


def _spread(values: list) -> str:
    return f"{min(values):.3f}-{max(values):.3f}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--algorithm", default="native", choices=["native", "ring", "tree", "hierarchical"])
    ap.add_argument("--no-plain", action="store_true", help="skip the hand-written DDP script")
    ap.add_argument("--only-fine", action="store_true", help="only the in-run A/B and the hook and tracer costs")
    args = ap.parse_args(argv)
    os.environ["OMP_NUM_THREADS"] = "1"
    layers = [32, 128, 128, 10]
    off, on, hook = "trace off", "trace on", "hook only"
    configs = [off, on]
    if args.algorithm == "native":
        configs.insert(1, hook)
        if not args.no_plain:
            configs.insert(0, "plain DDP script")
    cost = tracer_cost_us()
    spans_per_step = 3 + {"native": 1, "ring": 2 * (args.workers - 1), "tree": 4}.get(args.algorithm, 3)
    print(f"in-run A/B, {args.algorithm}, {args.workers} workers, {args.steps} steps, even steps traced "
          f"(control: the same split of an untraced run)")
    print(f"{'run':<10} | {'even/odd: median of pairs':>25} | {'pair IQR':>11} | {'trimmed means':>13} | "
          f"{'odd step ms':>11} | load")
    for label, traced in (("control", False), ("traced", True), ("control", False), ("traced", True)):
        r = run_in_run(args.workers, args.steps, args.batch, layers, args.algorithm, traced)
        print(f"{label:<10} | {r['ratio']:>25.4f} | {r['q1']:.3f}-{r['q3']:.3f} | {r['tmean']:>13.4f} | "
              f"{r['step_us'] / 1e3:>11.2f} | {os.getloadavg()[0]:.1f}")
        inrun = r
    write_pct = cost["write"] * spans_per_step / inrun["step_us"] * 100
    print(f"  writing (not in the split: one flush every 0.5 s): {cost['write']:.2f} us x {spans_per_step} "
          f"spans/step = {write_pct:.2f}% of a step")
    per_span = max(cost["span"], cost["add_span"]) + cost["write"]
    print(f"tracer cost (noise-free): span {cost['span']:.2f} us, add_span {cost['add_span']:.2f} us, write "
          f"{cost['write']:.2f} us per span; {spans_per_step} spans/step = "
          f"{per_span * spans_per_step / inrun['step_us'] * 100:.2f}% of a {inrun['step_us'] / 1e3:.2f} ms step")
    if args.algorithm == "native":
        hook = hook_cost_us(layers, args.batch)
        print(f"DDP comm hook (one process, world 1, {hook['backward']:.0f} us backward without hook): "
              f"+{hook['hook, not recording']:.1f} us/step not recording, "
              f"+{hook['hook, recording']:.1f} us/step recording (1 bucket)")
    if args.only_fine:
        return 0
    rates = {c: [] for c in configs}
    loads = []
    trace_bytes = 0
    for round_ in range(args.rounds):
        # rotate the order each round, so drifting background load hits every configuration
        for i in range(len(configs)):
            c = configs[(i + round_) % len(configs)]
            if c == "plain DDP script":
                rate = run_plain(args.workers, args.steps, args.batch, layers)
            else:
                rate, info = run_dtgen(args.workers, args.steps, args.batch, layers, args.algorithm, c != off,
                                       sample_every=1_000_000 if c == hook else 1)
                trace_bytes = info["trace_bytes"] if c == on else trace_bytes
            rates[c].append(rate)
        loads.append(os.getloadavg()[0])
    ratio = {c: [r / b for r, b in zip(rates[c], rates[off])] for c in configs}
    print(f"{args.workers} workers, gloo, allreduce {args.algorithm}, MLP {'-'.join(map(str, layers))}, batch "
          f"{args.batch}/worker, {args.steps} steps (throughput after step {WARMUP}), {args.rounds} rounds on "
          f"{os.cpu_count()} cores, load average {min(loads):.1f}-{max(loads):.1f}")
    print(f"{'configuration':<20} | {'median samples/s':>16} | {'vs trace off, paired':>20} | {'min-max':>11} | all rounds")
    print("-" * 110)
    for c in configs:
        print(f"{c:<20} | {statistics.median(rates[c]):>16,.0f} | {statistics.median(ratio[c]):>19.3f}x | "
              f"{_spread(ratio[c]):>11} | {', '.join(f'{r:,.0f}' for r in rates[c])}")
    over = [1 - r for r in ratio[on]]
    print(f"tracing overhead (1 - on/off, median of per-round pairs): {statistics.median(over) * 100:.1f}% "
          f"(rounds {', '.join(f'{o * 100:.1f}' for o in over)}); trace.json {trace_bytes / 1e6:.1f} MB")
    if hook in ratio:
        h = [1 - r for r in ratio[hook]]
        rec = [a / b - 1 for a, b in zip(rates[hook], rates[on])]
        print(f"  of which DDP's Python comm hook (1 - hook/off): {statistics.median(h) * 100:.1f}%; recording "
              f"(hook/on - 1): {statistics.median(rec) * 100:.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
