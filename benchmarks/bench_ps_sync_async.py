"""Sync vs async parameter server, with and without a 2x straggler: prints a Markdown table.

Four real runs (gloo, CPU): N workers (default 2) + 1 server, `--batch` rows per worker per step.
The straggler is the last worker with `slowdown: 2.0` (it sleeps as long as it computed,
so it does not steal CPU). The claim being measured (seeds 001/003): a straggler drags
every sync worker down to its pace, while async keeps the others going at the price of
stale updates.

Columns: "run samples/s" is all samples over the run's makespan (metrics.json), which in
async mode ends with the straggler finishing its own `steps` pushes alone; "sum of worker
rates" adds each worker's samples over its own busy time (per_worker_samples_per_s), the
aggregate rate while everyone is running, and "vs no straggler" compares that sum.
Keep workers <= cores: on an oversubscribed box the sleeping straggler hands its core
to the others, which flatters the straggler runs.

    OMP_NUM_THREADS=1 python benchmarks/bench_ps_sync_async.py [--steps 30] [--batch 1024]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path


def spec_data(sync: str, straggler: bool, args) -> dict:
    workers = {"count": args.workers}
    if straggler:
        workers["slowdown"] = {f"w{args.workers}": 2.0}
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
        "staleness": m["staleness"],
        "loss": m["loss"][-1],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)  # one core each on a 2-core box
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--layers", type=int, nargs="+", default=[256, 1024, 1024, 10])
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="dtgen-bench-ps-"))
    rows = []
    for sync in ("sync", "async"):
        base = None
        for straggler in (False, True):
            r = run_one(spec_data(sync, straggler, args), root)
            aggregate = sum(r["per_worker"])
            base = base or aggregate
            stale = r["staleness"]
            rows.append((sync, "w%d 2x" % args.workers if straggler else "none", r["samples_per_s"], aggregate,
                         aggregate / base, " / ".join(f"{x:,.0f}" for x in r["per_worker"]),
                         f"{statistics.mean(stale):.2f} / {max(stale):.0f}" if stale else "-", r["loss"]))
    print(f"{args.workers} workers + 1 server, batch {args.batch}/worker, {args.steps} steps, "
          f"MLP {args.layers}, gloo on CPU")
    print()
    print("| mode | straggler | run samples/s | sum of worker rates | vs no straggler | per-worker samples/s "
          "| staleness mean / max | final loss |")
    print("|---|---|---:|---:|---:|---|---|---:|")
    for sync, strag, sps, agg, rel, per, stale, loss in rows:
        print(f"| {sync} | {strag} | {sps:,.0f} | {agg:,.0f} | {rel:.2f}x | {per} | {stale} | {loss:.4f} |")


if __name__ == "__main__":
    main()
