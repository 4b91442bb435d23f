"""How far this machine lets any prediction land: the same specs run round-robin for a while,
each run scored as a "prediction" of a later run of the same spec.

A calibration is a measurement of the machine at one moment; a prediction is checked against
a run made later. Where the machine's speed drifts over minutes (a shared or virtual machine),
even an oracle, one that knew the exact step time of the very spec it predicts from a run a
minute earlier, misses by that drift. This benchmark measures the drift and scores that oracle
the way bench_predict_accuracy.py --transfer scores dtgen's predictions:

  - per spec: its runs' mean step time, min / median / max;
  - per lag between two runs of a spec: the median |later/earlier - 1|, its 80th and 90th
    percentiles, and the share of pairs over 25%;
  - passes of 10 rows drawn from the pairs about a minute apart (what --fresh leaves between a
    calibration and its row's run): how often the oracle meets issue 24's goals (median <= 10%,
    no row over 25%; 80% of rows within +-25%).

Step time is each run's mean over ranks and steps (metrics.json), as bench_predict_accuracy
counts it.

    python benchmarks/bench_machine_drift.py [--minutes 12] [--steps 40]
        [--specs allreduce-ring,ps-sync,gossip,pipeline-gpipe] [--json FILE]
    python benchmarks/bench_machine_drift.py --from FILE     # score a saved --json again
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAGS_MIN = ((0.3, 0.7), (0.8, 1.3), (1.8, 2.5), (4.0, 6.0), (8.0, 12.0))
ORACLE_LAG_MIN = (0.8, 1.3)
PASSES, ROWS = 20000, 10


def mean_step_ms(run_dir: Path) -> float:
    times = json.loads((run_dir / "metrics.json").read_text())["step_time_s"].values()
    return statistics.fmean(times) * 1000


def measure(specs: list[str], minutes: float, steps: int) -> list[dict]:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    runs, until = [], time.time() + 60 * minutes
    with tempfile.TemporaryDirectory(prefix="dtgen-drift-") as tmp:
        while time.time() < until:
            name = specs[len(runs) % len(specs)]
            out = Path(tmp) / name
            started = time.time()
            subprocess.run([sys.executable, "-m", "opentikz_dt", "run", str(ROOT / "examples" / f"{name}.yaml"),
                            "--steps", str(steps), "-o", str(out), "--force"],
                           check=True, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            runs.append({"t": started, "spec": name, "ms": mean_step_ms(out)})
            print(f"  {time.strftime('%H:%M:%S')} {name}: {runs[-1]['ms']:.2f} ms", file=sys.stderr)
    return runs


def pair_errors(runs: list[dict], lo_min: float, hi_min: float) -> dict[str, list[float]]:
    """|later/earlier - 1| for every two runs of a spec lo..hi minutes apart, per spec."""
    by_spec = defaultdict(list)
    for r in runs:
        by_spec[r["spec"]].append(r)
    out = {}
    for spec, rs in by_spec.items():
        out[spec] = [abs(b["ms"] / a["ms"] - 1) for i, a in enumerate(rs) for b in rs[i + 1:]
                     if 60 * lo_min <= b["t"] - a["t"] <= 60 * hi_min]
    return out


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def report(runs: list[dict]) -> None:
    span = (max(r["t"] for r in runs) - min(r["t"] for r in runs)) / 60
    print(f"{len(runs)} runs over {span:.1f} minutes; load average now {os.getloadavg()[0]:.2f}\n")
    print("| spec | runs | min ms | median ms | max ms | max / min |")
    print("|---|---:|---:|---:|---:|---:|")
    by_spec = defaultdict(list)
    for r in runs:
        by_spec[r["spec"]].append(r["ms"])
    for spec, ms in by_spec.items():
        print(f"| {spec} | {len(ms)} | {min(ms):.2f} | {statistics.median(ms):.2f} | {max(ms):.2f} | "
              f"{max(ms) / min(ms):.2f} |")
    print("\nThe same spec run again later, scored as a prediction (|later/earlier - 1|):\n")
    print("| minutes apart | pairs | median | 80th pct | 90th pct | over 25% | median per spec |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for lo, hi in LAGS_MIN:
        per = pair_errors(runs, lo, hi)
        errs = [e for es in per.values() for e in es]
        if not errs:
            continue
        each = ", ".join(f"{s} {statistics.median(es):.0%}" for s, es in per.items() if es)
        print(f"| {lo:g}-{hi:g} | {len(errs)} | {statistics.median(errs):.1%} | {quantile(errs, 0.8):.1%} | "
              f"{quantile(errs, 0.9):.1%} | {sum(e > 0.25 for e in errs) / len(errs):.0%} | {each} |")
    errs = [e for es in pair_errors(runs, *ORACLE_LAG_MIN).values() for e in es]
    if len(errs) < ROWS:
        return
    rng = random.Random(0)
    median_ok = max_ok = both = inside = 0
    for _ in range(PASSES):
        rows = [rng.choice(errs) for _ in range(ROWS)]
        m, x = statistics.median(rows) <= 0.10, max(rows) <= 0.25
        median_ok, max_ok, both = median_ok + m, max_ok + x, both + (m and x)
        inside += sum(e <= 0.25 for e in rows) >= 0.8 * ROWS
    lo, hi = ORACLE_LAG_MIN
    print(f"\nAn oracle calibrated {lo:g}-{hi:g} minutes before each row ({PASSES:,} passes of {ROWS} rows "
          f"drawn from those pairs): median <= 10% in {median_ok / PASSES:.0%} of passes, no row over 25% "
          f"in {max_ok / PASSES:.0%}, both in {both / PASSES:.0%}; 80% of rows within +-25% in "
          f"{inside / PASSES:.0%}.")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=12.0)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--specs", default="allreduce-ring,ps-sync,gossip,pipeline-gpipe")
    ap.add_argument("--json", type=Path, help="write the runs (time, spec, mean step ms) here")
    ap.add_argument("--from", dest="from_json", type=Path, help="score the runs of an earlier --json")
    args = ap.parse_args()
    if args.from_json:
        runs = json.loads(args.from_json.read_text())
    else:
        runs = measure(args.specs.split(","), args.minutes, args.steps)
        if args.json:
            args.json.write_text(json.dumps(runs, indent=1) + "\n")
    report(runs)


if __name__ == "__main__":
    main()
