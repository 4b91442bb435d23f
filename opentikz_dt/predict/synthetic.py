"""Synthetic run directories for tests and benchmarks of the measured figures (no torch).

The predictor's simulator with round-number costs and noise (each duration x U(0.85,
1.25), the first step 4x slower, as real runs are) writes a run directory that follows
docs/dev/runner-interface.md exactly, with a made-up falling loss. `crash_at_ms` cuts
every rank's stream at that time, tears the failing rank's last line and leaves
trace.json out (or marks it `ended_early`), as a crashed run does.

    python -m opentikz_dt.predict.synthetic OUT [KIND] [--steps N] [--workers N] [--straggler w3] [--crash-at-ms T]
"""

from __future__ import annotations

import math
import random
from pathlib import Path

from ..spec import spec_from_data
from ..strategies import kinds as strategy_kinds
from .calibration import Calibration, illustrative_calibration
from .costs import Costs
from .rundir import write_run_dir
from .simulate import simulate
from .plugin import REGISTRY


def synthetic_plugins() -> dict:
    """Every synthetic run name (ps-sync, allreduce-ring, ...) -> the predict plugin that
    writes its strategy (`SYNTHETIC_RUNS`), in the strategies' order."""
    out = {}
    for kind in strategy_kinds():
        if REGISTRY.has(kind):
            plugin = REGISTRY.get(kind)
            out.update((name, plugin) for name in plugin.SYNTHETIC_RUNS)
    return out


def spec_data(kind: str, workers: int = 3, steps: int = 60, microbatches: int = 4,
              slowdown: dict | None = None) -> dict:
    """A spec (plain data, before defaults) for one synthetic kind."""
    plugins = synthetic_plugins()
    if kind not in plugins:
        raise ValueError(f"unknown synthetic kind {kind!r} (one of {', '.join(plugins)})")
    topology: dict = {"workers": {"count": workers}}
    if slowdown:
        topology["workers"]["slowdown"] = dict(slowdown)
    strategy = plugins[kind].synthetic_strategy(kind, topology, microbatches)
    return {"name": f"synth-{kind}", "topology": topology, "strategy": strategy, "training": {"steps": steps}}


def synthetic_calibration(spec) -> Calibration:
    """Milliseconds-scale costs, so synthetic timelines look like real ones on this kind of machine."""
    cal = illustrative_calibration(spec, flops_per_s=2e9, bytes_per_s=4e8, latency_s=2.5e-4)
    batch = spec.training.batch_size
    data = cal.data
    blocks = data["compute"]["blocks"]
    for b in blocks:  # 1.8 ms forward and 3.2 ms backward per 256 rows, shared by the blocks
        b["forward"] = [0.0, 1.8e-3 / 256 / len(blocks)]
        b["backward"] = [0.0, 3.2e-3 / 256 / len(blocks)]
    data["compute"]["optimizer"] = [3e-4 / max(1, 2 * len(blocks)), 0.0]
    data["compute"]["add_per_param_s"] = 1e-9
    data["compute"]["step_overhead_s"] = 2e-5 if batch else 0.0
    return cal


def synthetic_loss(steps: int) -> list:
    rng = random.Random(7)
    return [round(2.3 * math.exp(-s / 18) + 0.15 + rng.uniform(-0.03, 0.03), 5) for s in range(steps)]


def write_synthetic_run(out: str | Path, kind: str = "ps-sync", workers: int = 3, steps: int = 20,
                        microbatches: int = 4, slowdown: dict | None = None, seed: int = 0,
                        crash_at_ms: float | None = None, crash_rank: int = 0,
                        merged_on_crash: bool = False) -> Path:
    """Write a run directory for a synthetic run of `kind`; returns its path."""
    spec = spec_from_data(spec_data(kind, workers, steps, microbatches, slowdown), name=f"synth-{kind}")
    costs = Costs(synthetic_calibration(spec), spec, jitter=random.Random(seed))
    result = simulate(spec, costs, steps)
    return write_run_dir(out, spec, result, steps, loss=synthetic_loss(steps), crash_at_ms=crash_at_ms,
                         crash_rank=crash_rank, merged_on_crash=merged_on_crash, dtgen="synthetic")


def main(argv=None) -> None:
    import argparse

    parser = argparse.ArgumentParser(description="Write a synthetic dtgen run directory (for tests and benchmarks).")
    parser.add_argument("out")
    parser.add_argument("kind", nargs="?", default="ps-sync", choices=list(synthetic_plugins()))
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--straggler", default=None, help="worker id to slow down 2x, e.g. w3")
    parser.add_argument("--crash-at-ms", type=float, default=None)
    args = parser.parse_args(argv)
    print(write_synthetic_run(args.out, args.kind, args.workers, args.steps,
                              slowdown={args.straggler: 2.0} if args.straggler else None,
                              crash_at_ms=args.crash_at_ms))


if __name__ == "__main__":
    main()
