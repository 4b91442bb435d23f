"""Prediction accuracy: predict, then run, every example strategy at 2-4 ranks on this machine.

For each example: a calibration run (`dtgen run --steps 30`), a fit from its trace
(`dtgen calibrate --from`), a probe calibration (`dtgen calibrate SPEC`, the run's
process count), then the target run (`dtgen run --steps 60`, a fresh run, not the one
fitted) and both predictions of it (`dtgen predict`). Prints the mean step time
measured and predicted and the error per strategy, and the medians. `repeat` is the
noise floor: how far the calibration run's own step time is from the target run's.

    python benchmarks/bench_predict_accuracy.py [--only ps-sync,allreduce-ring] [--no-probe] [--json FILE]
        [--multihost 200mbit]     # also 2 emulated hosts with shaped links (root; scripts/netcluster.sh)

Takes about a minute per strategy here. Timings on a shared machine are noisy: the
script prints the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ["ps-sync", "ps-async", "ps-sharded", "central-storage", "allreduce-native", "allreduce-ring",
            "allreduce-tree", "allreduce-hierarchical", "gossip", "pipeline-gpipe", "pipeline-1f1b",
            "transformer-ring", "transformer-pipeline"]


def dtgen(*args) -> None:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    subprocess.run([sys.executable, "-m", "opentikz_dt", *map(str, args)], check=True, env=env, cwd=ROOT,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def mean_step_ms(run_dir: Path) -> float:
    times = json.loads((run_dir / "metrics.json").read_text())["step_time_s"].values()
    return statistics.fmean(times) * 1000


def one(name: str, tmp: Path, probe: bool, steps: int) -> dict:
    spec = ROOT / "examples" / f"{name}.yaml"
    dtgen("run", spec, "--out", tmp / f"{name}-cal", "--steps", 30)
    dtgen("calibrate", "--from", tmp / f"{name}-cal", "-o", tmp / f"{name}-fit.json")
    if probe:
        dtgen("calibrate", spec, "-o", tmp / f"{name}-probe.json")
    dtgen("run", spec, "--out", tmp / f"{name}-run", "--steps", steps)
    row = {"strategy": name, "ranks": json.loads((tmp / f"{name}-run" / "run.json").read_text())["world_size"],
           "measured_ms": mean_step_ms(tmp / f"{name}-run"), "calibration_run_ms": mean_step_ms(tmp / f"{name}-cal")}
    # the noise floor: how far the calibration run itself is from the target run (same spec, minutes apart)
    row["repeat_err"] = (row["calibration_run_ms"] - row["measured_ms"]) / row["measured_ms"]
    for source in ("fit", "probe") if probe else ("fit",):
        out = tmp / f"{name}-pred-{source}"
        dtgen("predict", spec, "--calibration", tmp / f"{name}-{source}.json", "--steps", steps, "-o", out)
        row[f"{source}_ms"] = mean_step_ms(out)
        row[f"{source}_err"] = (row[f"{source}_ms"] - row["measured_ms"]) / row["measured_ms"]
    return row


MULTIHOST = {  # 2 emulated hosts (scripts/netcluster.sh), each host's link shaped
    "allreduce-ring": {"strategy": {"kind": "allreduce", "algorithm": "ring"}, "topology": {"workers": {"count": 4}}},
    "allreduce-native": {"strategy": {"kind": "allreduce", "algorithm": "native"},
                         "topology": {"workers": {"count": 4}}},
}


def multihost_run(cluster, spec: Path, out: Path, steps: int) -> Path:
    import yaml  # noqa: F401  (spec written by the caller)

    port = 29500 + os.getpid() % 1000
    procs = [cluster.popen(h, [sys.executable, "-m", "opentikz_dt", "run", str(spec), "--out", str(out / f"h{h}"),
                               "--steps", str(steps), "--nnodes", str(cluster.hosts), "--node-rank", str(h - 1),
                               "--rdzv-endpoint", f"{cluster.addr(1)}:{port}"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=dict(os.environ, OMP_NUM_THREADS="1"),
                           cwd=ROOT)
             for h in range(1, cluster.hosts + 1)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        if p.returncode:
            raise subprocess.CalledProcessError(p.returncode, "dtgen run", stderr=err)
    return out / "h1"


def one_multihost(name: str, tmp: Path, steps: int, link: str) -> dict:
    import yaml

    from opentikz_dt.runner.netcluster import NetCluster
    from opentikz_dt.runner.testing import small_spec_data

    over = MULTIHOST[name]
    data = small_spec_data(over["strategy"]["kind"], name=f"mh-{name}", training={"steps": steps},
                           runtime={"timeout_s": 60})
    data["training"]["model"] = {"layers": [32, 128, 128, 10]}
    data["training"]["batch_size"] = 256
    data["training"]["dataset"] = {"samples": 16384}
    data["strategy"] = over["strategy"]
    data["topology"] = dict(over["topology"], hosts=2)
    spec = tmp / f"mh-{name}.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    with NetCluster(2, link=link) as cluster:
        cal = multihost_run(cluster, spec, tmp / f"mh-{name}-cal", 30)
        run = multihost_run(cluster, spec, tmp / f"mh-{name}-run", steps)
    dtgen("calibrate", "--from", cal, "-o", tmp / f"mh-{name}-fit.json")
    out = tmp / f"mh-{name}-pred"
    dtgen("predict", spec, "--calibration", tmp / f"mh-{name}-fit.json", "--steps", steps, "-o", out)
    row = {"strategy": f"{name} 2 hosts {link}", "ranks": 4, "measured_ms": mean_step_ms(run),
           "calibration_run_ms": mean_step_ms(cal), "fit_ms": mean_step_ms(out)}
    row["repeat_err"] = (row["calibration_run_ms"] - row["measured_ms"]) / row["measured_ms"]
    row["fit_err"] = (row["fit_ms"] - row["measured_ms"]) / row["measured_ms"]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(EXAMPLES))
    parser.add_argument("--no-probe", action="store_true")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--json", default=None)
    parser.add_argument("--multihost", default=None, metavar="LINK",
                        help="also 2 emulated hosts with each link shaped to LINK (e.g. 200mbit; root, ip netns, tc)")
    args = parser.parse_args()
    probe = not args.no_probe
    print(f"load average before: {os.getloadavg()[0]:.1f} (cores: {os.cpu_count()})", flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="dtgen-bench-predict-") as tmp:
        for name in [n for n in args.only.split(",") if n]:
            try:
                rows.append(one(name, Path(tmp), probe, args.steps))
            except subprocess.CalledProcessError as exc:
                print(f"{name}: failed: {exc.stderr.decode()[-300:]}", flush=True)
                continue
            r = rows[-1]
            line = f"{name:24} {r['ranks']:>5} {r['measured_ms']:9.2f} {r['repeat_err']:+7.0%} {r['fit_ms']:9.2f} " \
                   f"{r['fit_err']:+7.0%}"
            if probe:
                line += f" {r['probe_ms']:9.2f} {r['probe_err']:+7.0%}"
            print(line, flush=True)
        if args.multihost:
            for name in MULTIHOST:
                try:
                    rows.append(one_multihost(name, Path(tmp), args.steps, args.multihost))
                except (subprocess.CalledProcessError, RuntimeError) as exc:
                    print(f"{name} (2 hosts): failed: {getattr(exc, 'stderr', exc)!s:.300}", flush=True)
                    continue
                r = rows[-1]
                print(f"{r['strategy']:24} {r['ranks']:>5} {r['measured_ms']:9.2f} {r['repeat_err']:+7.0%} "
                      f"{r['fit_ms']:9.2f} {r['fit_err']:+7.0%}", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    header = f"{'strategy':24} {'ranks':>5} {'run ms':>9} {'repeat':>7} {'fit ms':>9} {'error':>7}" + \
        (f" {'probe ms':>9} {'error':>7}" if probe else "")
    print(header)
    for r in rows:
        line = f"{r['strategy']:24} {r['ranks']:>5} {r['measured_ms']:9.2f} {r['repeat_err']:+7.0%} " \
               f"{r['fit_ms']:9.2f} {r['fit_err']:+7.0%}"
        if probe and "probe_ms" in r:
            line += f" {r['probe_ms']:9.2f} {r['probe_err']:+7.0%}"
        print(line)
    for source in ("repeat", "fit", "probe") if probe else ("repeat", "fit"):
        errs = [abs(r[f"{source}_err"]) for r in rows if f"{source}_err" in r]
        if errs:
            print(f"{source}: median |error| {statistics.median(errs):.0%}, max {max(errs):.0%}, "
                  f"over 25%: {sum(e > 0.25 for e in errs)} of {len(errs)}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
