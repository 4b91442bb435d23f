"""Sync vs async parameter server, with and without a straggler: prints a Markdown table.

Real runs (gloo, CPU): N workers (default 2) + 1 server, `--batch` rows per worker per step,
each configuration `--repeat` times (mean, min-max). The straggler is the last worker with
`slowdown: --slowdown` (it sleeps (factor-1) x its compute, so it does not steal CPU). The
claim being measured (seeds 001/003): a straggler drags every sync worker down to its pace,
while async keeps the others going at the price of stale updates.

Columns: "run samples/s" is all samples over the run's window (metrics.json; the workers'
per_worker_samples_per_s add up to it); "vs no straggler" compares it with the same mode
without a straggler; "async / sync" compares async with sync in the same straggler setting;
"updates per worker" is metrics.json's steps_per_worker (async workers share one budget of
steps x workers updates, so the fast ones do more; "-" from a version without it).
Keep workers <= cores: on an oversubscribed box the sleeping straggler hands its core
to the others, which flatters the straggler runs.

    OMP_NUM_THREADS=1 python benchmarks/bench_ps_sync_async.py [--steps 30] [--batch 1024] [--slowdown 3] [--repeat 2]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
from pathlib import Path


def spec_data(sync: str, straggler: bool, args) -> dict:
    workers = {"count": args.workers}
    if straggler:
        workers["slowdown"] = {f"w{args.workers}": args.slowdown}
    return {
        "name": f"bench-ps-{sync}-{'straggler' if straggler else 'even'}",
        "strategy": {"kind": "parameter-server", "sync": sync},
        "topology": {"workers": workers, "servers": {"count": 1}},
        "training": {"model": {"layers": args.layers}, "dataset": {"samples": 65536},
                     "batch_size": args.batch, "steps": args.steps, "optimizer": {"lr": 0.05}},
        "runtime": {"backend": "gloo", "device": "cpu", "timeout_s": 120},
    }


def run_one(data: dict, root: Path) -> dict:
    from opentikz_dt.runner.testing import run_small

    result = run_small(data, root, cache=False)
    m = result.metrics
    ids = [f"w{i}" for i in range(1, len(m["per_worker_samples_per_s"]) + 1)]
    return {
        "samples_per_s": m["samples_per_s"],
        "per_worker": [m["per_worker_samples_per_s"][w] for w in ids],
        "done": [m.get("steps_per_worker", {}).get(w) for w in ids],
        "staleness": m["staleness"],
        "loss": m["loss"][-1],
    }


def spread(values: list, fmt: str) -> str:
    text = format(statistics.fmean(values), fmt)
    return text if len(values) == 1 else f"{text} ({format(min(values), fmt)}-{format(max(values), fmt)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)  # one core each on a 2-core box
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--layers", type=int, nargs="+", default=[256, 1024, 1024, 10])
    parser.add_argument("--slowdown", type=float, default=3.0)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="dtgen-bench-ps-"))
    results = {}
    for index in range(args.repeat):  # interleaved, so a change in the machine's load hits every row alike
        for sync in ("sync", "async"):
            for straggler in (False, True):
                results.setdefault((sync, straggler), []).append(run_one(spec_data(sync, straggler, args), root))
    shutil.rmtree(root, ignore_errors=True)
    print(f"{args.workers} workers + 1 server, batch {args.batch}/worker, {args.steps} steps, MLP {args.layers}, "
          f"gloo on CPU, {args.repeat} runs each: mean (min-max)")
    print()
    print("| mode | straggler | run samples/s | vs no straggler | async / sync | updates per worker "
          "| staleness mean / max | final loss |")
    print("|---|---|---:|---:|---:|---|---|---:|")
    for sync in ("sync", "async"):
        for straggler in (False, True):
            runs = results[(sync, straggler)]
            rates = [r["samples_per_s"] for r in runs]
            even = statistics.fmean(r["samples_per_s"] for r in results[(sync, False)])
            other = statistics.fmean(r["samples_per_s"] for r in results[("sync", straggler)])
            stale = [v for r in runs for v in r["staleness"]]
            done = " / ".join("-" if d is None else str(d) for d in runs[-1]["done"])
            print(f"| {sync} | {f'w{args.workers} {args.slowdown:g}x' if straggler else 'none'} "
                  f"| {spread(rates, ',.0f')} | {statistics.fmean(rates) / even:.2f}x "
                  f"| {statistics.fmean(rates) / other:.2f}x | {done} "
                  f"| {f'{statistics.mean(stale):.2f} / {max(stale):.0f}' if stale else '-'} "
                  f"| {spread([r['loss'] for r in runs], '.4f')} |")


if __name__ == "__main__":
    main()
