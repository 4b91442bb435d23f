"""Hierarchical vs flat ring all-reduce on an emulated cluster: 4 hosts x 2 workers,
each host's link shaped to RATE (tc tbf), one `dtgen run` launcher per host.
Needs root (scripts/netcluster.sh). Prints mean steady-state step time per algorithm.

    sudo python benchmarks/bench_multihost.py [--rate 100mbit] [--steps 6] [--layers 256,1024,1024,10]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from opentikz_dt.runner.netcluster import NetCluster, unavailable_reason  # noqa: E402


def run(cluster, algorithm, layers, steps, root: Path) -> dict:
    spec = {"name": f"bench-{algorithm}", "strategy": {"kind": "allreduce", "algorithm": algorithm},
            "topology": {"workers": {"count": 2 * cluster.hosts}, "hosts": cluster.hosts},
            "training": {"model": {"layers": layers}, "dataset": {"samples": 4096}, "batch_size": 16,
                         "steps": steps}, "runtime": {"backend": "gloo", "device": "cpu", "timeout_s": 120}}
    path = root / f"{algorithm}.yaml"
    path.write_text(yaml.safe_dump(spec))
    env = dict(os.environ, OMP_NUM_THREADS="1", TORCH_CPP_LOG_LEVEL="ERROR")
    procs = [cluster.popen(h, [sys.executable, "-m", "opentikz_dt", "run", str(path), "--out", str(root / f"{algorithm}-h{h}"),
                               "--nnodes", str(cluster.hosts), "--node-rank", str(h - 1),
                               "--rdzv-endpoint", f"{cluster.addr(1)}:29500"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
             for h in range(1, cluster.hosts + 1)]
    for p in procs:
        _, err = p.communicate(timeout=900)
        if p.returncode:
            raise SystemExit(f"{algorithm}: launcher failed:\n{err[-2000:]}")
    metrics = json.loads((root / f"{algorithm}-h1" / "metrics.json").read_text())
    sent = sum(v["sent"] for v in metrics["bytes"].values())
    return {"step_s": sum(metrics["step_time_s"].values()) / len(metrics["step_time_s"]), "sent_mb": sent / 1e6}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", default="100mbit")
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--layers", default="256,1024,1024,10")
    args = ap.parse_args()
    if unavailable_reason():
        raise SystemExit(unavailable_reason())
    layers = [int(x) for x in args.layers.split(",")]
    params = sum(a * b + b for a, b in zip(layers, layers[1:]))
    print(f"{args.hosts} hosts x 2 workers, links {args.rate}, {params * 4 / 1e6:.1f} MB of gradients a step")
    print(f"{'algorithm':<14}{'step time':>12}{'sent MB (all ranks)':>22}")
    with tempfile.TemporaryDirectory(prefix="dtgen-bench-") as tmp, NetCluster(args.hosts, args.rate) as cluster:
        for algorithm in ("ring", "hierarchical"):
            r = run(cluster, algorithm, layers, args.steps, Path(tmp))
            print(f"{algorithm:<14}{r['step_s'] * 1000:>10.0f} ms{r['sent_mb']:>22.1f}", flush=True)


if __name__ == "__main__":
    main()
