"""Simulation speed: 1,024 workers x 100 steps of every strategy (target: at most 10 s each).

Times `simulate` as a sweep point runs it (no trace kept) and as `dtgen predict` does
(every span recorded, then the run directory written), with the illustrative costs.
The meshes (data x tensor x pipeline of examples/fsdp-tensor.yaml's transformer, made 32
blocks of 8 heads, 16 microbatches of a global batch of 1,024) are timed without a trace
only: 100 steps of their every collective would exceed the 3,000,000 trace events a
prediction may write.

    python benchmarks/bench_predict_scale.py [--workers 1024] [--steps 100] [--write]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from opentikz_dt.predict.contention import Contention
from opentikz_dt.predict.calibration import illustrative_calibration
from opentikz_dt.predict.costs import Costs
from opentikz_dt.predict.predict import apply_overrides
from opentikz_dt.predict.rundir import write_run_dir
from opentikz_dt.predict.simulate import simulate
from opentikz_dt.spec import load_spec

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ["ps-sync", "ps-async", "ps-sharded", "central-storage", "allreduce-native", "allreduce-ring",
            "allreduce-tree", "allreduce-hierarchical", "gossip"]
MESH_MODEL = "{kind: transformer, layers: 32, d_model: 64, heads: 8, seq_len: 32, vocab: 256}"
MESHES = [(f"mesh {d}x{t}x{p}", (f"strategy.parallelism={{pipeline: {p}, data: {d}, tensor: {t}}}",
                                 f"training.batch_size={1024 // d}"))
          for d, t, p in ((1024, 1, 1), (64, 1, 16), (8, 8, 16), (64, 2, 8), (128, 8, 1), (64, 8, 2))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--write", action="store_true", help="also record every span and write the run directory")
    args = parser.parse_args()
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (wall time grows with it, cpu time does not)")
    print(f"{'strategy':24} {'ranks':>6} {'simulate s':>11} {'cpu s':>7}" +
          (f" {'+trace s':>9} {'events':>10}" if args.write else ""))
    for name in EXAMPLES:
        spec = load_spec(ROOT / "examples" / f"{name}.yaml")
        sets = ("topology.hosts=8",) if name == "allreduce-hierarchical" else ()
        spec = apply_overrides(spec, sets + (f"training.steps={args.steps}",), workers=args.workers)
        cal = illustrative_calibration(spec)
        costs = Costs(cal, spec, contention=Contention.none(cal))  # a core per rank
        t0, c0 = time.perf_counter(), time.process_time()
        result = simulate(spec, costs, record=False)
        quick, cpu = time.perf_counter() - t0, time.process_time() - c0
        line = f"{name:24} {len(result.ids):>6,} {quick:>11.2f} {cpu:>7.2f}"
        if args.write:
            t0 = time.perf_counter()
            full = simulate(spec, costs)
            with tempfile.TemporaryDirectory() as tmp:
                write_run_dir(Path(tmp) / "run", spec, full, args.steps, predicted={})
            events = sum(len(v) for v in full.events.values())
            line += f" {time.perf_counter() - t0:>9.2f} {events:>10,}"
        print(line, flush=True)
    if args.workers != 1024:
        return
    base = load_spec(ROOT / "examples" / "fsdp-tensor.yaml")
    base = apply_overrides(base, (f"training.model={MESH_MODEL}", "strategy.microbatches=16", "strategy.schedule=gpipe",
                                  "strategy.data_parallel=allreduce", f"training.steps={args.steps}"))
    for name, sets in MESHES:
        spec = apply_overrides(base, sets, workers=args.workers)
        cal = illustrative_calibration(spec)
        costs = Costs(cal, spec, contention=Contention.none(cal))  # a core per rank
        t0, c0 = time.perf_counter(), time.process_time()
        result = simulate(spec, costs, record=False)
        print(f"{name:24} {len(result.ids):>6,} {time.perf_counter() - t0:>11.2f} {time.process_time() - c0:>7.2f}",
              flush=True)


if __name__ == "__main__":
    main()
