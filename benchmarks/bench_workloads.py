"""Transformer workloads: samples/s per strategy, and dtgen vs a plain DDP script.

    OMP_NUM_THREADS=1 python benchmarks/bench_workloads.py [--steps 40] [--rounds 3]
    OMP_NUM_THREADS=1 python benchmarks/bench_workloads.py --only vs-ddp --rounds 5

Model: the built-in transformer, 6 blocks, d_model 128, 4 heads, seq_len 64, vocab 256
(about 1.2 M parameters), synthetic token streams, batch 8 sequences per worker.

1. `strategies`: `dtgen run` of native / ring / tree / hierarchical all-reduce and sync
   / async parameter server; samples/s from metrics.json (after the warm-up step, so
   process start-up is excluded). 2 workers (hierarchical: 4 workers on 2 hosts);
   parameter server: 2 workers + 1 server. One round runs every configuration once.
2. `vs-ddp`: whole process, wall clock from the command to its exit: `dtgen run` of
   allreduce native (tracing on, the default; and off) vs `torchrun` of
   benchmarks/plain_ddp_transformer.py, 2 workers, the same steps. Rounds alternate the
   order; the ratio is paired within a round (the box is shared: background load drifts
   slowly, so configurations run back to back share it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
MODEL = {"kind": "transformer", "layers": 6, "d_model": 128, "heads": 4, "seq_len": 64, "vocab": 256}
BATCH = 8
STRATEGIES = {
    "allreduce native": ({"kind": "allreduce", "algorithm": "native"}, {"workers": {"count": 2}}),
    "allreduce ring": ({"kind": "allreduce", "algorithm": "ring"}, {"workers": {"count": 2}}),
    "allreduce tree": ({"kind": "allreduce", "algorithm": "tree"}, {"workers": {"count": 2}}),
    "allreduce hierarchical (4 w, 2 hosts)": ({"kind": "allreduce", "algorithm": "hierarchical"},
                                              {"workers": {"count": 4}, "hosts": 2}),
    "parameter server sync": ({"kind": "parameter-server", "sync": "sync"}, {"workers": {"count": 2}}),
    "parameter server async": ({"kind": "parameter-server", "sync": "async"}, {"workers": {"count": 2}}),
}


def _dtgen() -> list[str]:
    return [sys.executable, "-m", "opentikz_dt"]


def write_spec(directory: Path, name: str, strategy: dict, topology: dict, steps: int, trace: bool = True) -> Path:
    data = {"name": name, "strategy": strategy, "topology": topology,
            "training": {"model": MODEL, "dataset": {"kind": "synthetic", "samples": 4096},
                         "batch_size": BATCH, "steps": steps, "optimizer": {"lr": 0.05, "momentum": 0.9}},
            "runtime": {"backend": "gloo", "device": "cpu", "timeout_s": 300, "trace": {"enabled": trace}}}
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def run_dtgen(spec: Path, out: Path) -> tuple[float, dict]:
    """(wall seconds of the whole `dtgen run` process, metrics.json)."""
    t0 = time.perf_counter()
    proc = subprocess.run(_dtgen() + ["run", str(spec), "--out", str(out), "--force"], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise SystemExit(f"dtgen run {spec} failed:\n{proc.stderr[-2000:]}")
    return wall, json.loads((out / "metrics.json").read_text())


def run_plain(steps: int, workers: int) -> tuple[float, float]:
    """(wall seconds of the whole torchrun process, samples/s after warm-up)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(workers), "--rdzv-backend", "c10d",
           "--rdzv-endpoint", "localhost:0", str(REPO / "benchmarks" / "plain_ddp_transformer.py"),
           "--steps", str(steps), "--batch", str(BATCH), "--layers", str(MODEL["layers"]),
           "--d-model", str(MODEL["d_model"]), "--heads", str(MODEL["heads"]), "--seq-len", str(MODEL["seq_len"]),
           "--vocab", str(MODEL["vocab"])]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise SystemExit(f"plain DDP failed:\n{proc.stderr[-2000:]}")
    line = [x for x in proc.stdout.splitlines() if x.startswith("{")][-1]
    return wall, json.loads(line)["samples_per_s"]


def _load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def bench_strategies(tmp: Path, steps: int, rounds: int) -> None:
    rates: dict[str, list] = {name: [] for name in STRATEGIES}
    loads = []
    for r in range(rounds):
        for i, (name, (strategy, topology)) in enumerate(STRATEGIES.items()):
            spec = write_spec(tmp, f"s{i}", strategy, topology, steps)
            _, metrics = run_dtgen(spec, tmp / f"run-s{i}")
            rates[name].append(metrics["samples_per_s"])
            loads.append(os.getloadavg()[0])
    base = statistics.median(rates["allreduce native"])
    print(f"\ntransformer {MODEL}, ~1.2 M parameters, batch {BATCH}/worker, {steps} steps, gloo on CPU, "
          f"{rounds} round(s), load average {min(loads):.1f}-{max(loads):.1f}")
    print(f"{'strategy':40s} | {'median samples/s':>16s} | {'vs native':>9s} | all rounds")
    print("-" * 100)
    for name, values in rates.items():
        med = statistics.median(values)
        print(f"{name:40s} | {med:16,.0f} | {med / base:8.2f}x | {', '.join(f'{v:,.0f}' for v in values)}")


def bench_vs_ddp(tmp: Path, steps: int, rounds: int) -> None:
    spec_on = write_spec(tmp, "native-trace", STRATEGIES["allreduce native"][0], {"workers": {"count": 2}}, steps)
    spec_off = write_spec(tmp, "native-notrace", STRATEGIES["allreduce native"][0], {"workers": {"count": 2}}, steps,
                          trace=False)
    rows: dict[str, list] = {"plain DDP (torchrun)": [], "dtgen run, trace on": [], "dtgen run, trace off": []}
    loads = []
    for r in range(rounds):
        order = list(rows)
        order = order[r % 3:] + order[:r % 3]
        got = {}
        for name in order:
            if name.startswith("plain"):
                wall, rate = run_plain(steps, 2)
            else:
                wall, metrics = run_dtgen(spec_on if "on" in name else spec_off, tmp / "run-vs")
                rate = metrics["samples_per_s"]
            got[name] = (wall, rate)
            loads.append(os.getloadavg()[0])
        for name, value in got.items():
            rows[name].append((value[0], value[1], got["plain DDP (torchrun)"][0] / value[0]))
    print(f"\nwhole process, 2 workers, allreduce native (DDP), {steps} steps, {rounds} rounds, "
          f"load average {min(loads):.1f}-{max(loads):.1f}")
    print(f"{'configuration':24s} | {'median wall s':>13s} | {'speed vs plain (paired)':>23s} | {'min-max':>11s} | "
          f"{'samples/s after warm-up':>23s}")
    print("-" * 110)
    for name, values in rows.items():
        walls, rates, ratios = zip(*values)
        print(f"{name:24s} | {statistics.median(walls):13.2f} | {statistics.median(ratios):22.3f}x | "
              f"{min(ratios):.3f}-{max(ratios):.3f} | {statistics.median(rates):23,.0f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", choices=("strategies", "vs-ddp"))
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="dtgen-bench-") as tmp:
        if args.only in (None, "strategies"):
            bench_strategies(Path(tmp), args.steps, args.rounds)
        if args.only in (None, "vs-ddp"):
            bench_vs_ddp(Path(tmp), args.steps, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
