"""Prediction accuracy: predict, then run, every example strategy at 2-5 ranks on this machine.

For each example, predictions of one target run (`dtgen run --steps 60`) from:
  calibrate   `dtgen calibrate SPEC`: the probe and three 100-step runs of the spec (the default);
  probe       `dtgen calibrate SPEC --probe-only`: micro-benchmarks alone;
  fit         `dtgen calibrate --from RUN` of another 40-step run of the spec;
  half        `dtgen calibrate` of the same spec at half the workers, predicting the full
              size: the model's scaling, not only its costs (data-parallel examples);
and `repeat`, the noise floor: how far that other run's step time is from the target's.
Step time is the mean over workers, first step left out (metrics.json).

    python benchmarks/bench_predict_accuracy.py [--only ps-sync,allreduce-ring] [--steps 60] [--json FILE]
        [--multihost 200mbit]     # also 2 emulated hosts with shaped links (root; scripts/netcluster.sh)
    python benchmarks/bench_predict_accuracy.py --transfer [--only ...]
        leave-one-out: every example predicted from `dtgen calibrate` of ONE fixed reference
        spec of its model (REFERENCE below), never its own; and size: `dtgen calibrate` at 2
        workers predicting 4 and 8 (SIZE examples); with --multihost LINK also 2 workers on one
        host predicting 2 emulated hosts x 4 workers (MULTIHOST, `dtgen predict --link LINK`).
        Each row: measured, a repeat run (the noise floor), predicted, error, the predicted
        interval and whether the run is in it.
        --size ring,... and --size-workers 4,8 choose the size rows (a GPU box's short lease).
        --fresh calibrates again right before each row's target run (as a user calibrates,
        then predicts and runs) instead of once per reference: on a machine whose speed drifts
        over minutes, the rows run last otherwise carry that drift too.
    python benchmarks/bench_predict_accuracy.py --transfer --keep DIR [...]
        keeps the runs, calibrations and rows (DIR/rows.json) in DIR; then
    python benchmarks/bench_predict_accuracy.py --rescore DIR
        predicts DIR's rows again with the code as it is now, against the same runs: a change
        to the predictor is compared with the one before on the same runs and calibrations,
        without the noise of new ones (each pass's runs differ by 5-10% here).

Takes about a minute per strategy here. Timings on a shared machine are noisy: the
script prints the load average before and after.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ["ps-sync", "ps-async", "ps-sharded", "central-storage", "allreduce-native", "allreduce-ring",
            "allreduce-tree", "allreduce-hierarchical", "gossip", "pipeline-gpipe", "pipeline-1f1b",
            "transformer-ring", "transformer-pipeline", "custom-model"]
SOURCES = ("calibrate", "probe", "fit", "half")


def dtgen(*args) -> None:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    subprocess.run([sys.executable, "-m", "opentikz_dt", *map(str, args)], check=True, env=env, cwd=ROOT,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def mean_step_ms(run_dir: Path) -> float:
    times = json.loads((run_dir / "metrics.json").read_text())["step_time_s"].values()
    return statistics.fmean(times) * 1000


def half_spec(spec: Path, tmp: Path) -> Path | None:
    """The spec at half its workers (at least 2), or None where that says nothing new
    (pipelines: the stages are the model's cut; hosts that would not divide the workers;
    a python model, whose module is found beside its own spec)."""
    data = yaml.safe_load(spec.read_text(encoding="utf-8"))
    if data["strategy"]["kind"] == "pipeline" or data["training"].get("model", {}).get("kind") == "python":
        return None
    workers = data["topology"]["workers"]
    half = max(2, workers.get("count", 3) // 2)
    if half == workers.get("count", 3) or half % data["topology"].get("hosts", 1):
        return None
    workers["count"] = half
    if data["strategy"].get("peers", 1) >= half:  # gossip: as many neighbours as there are
        data["strategy"]["peers"] = half - 1
    keep = {f"w{i}" for i in range(1, half + 1)}  # a straggler beyond the half stays out
    if "slowdown" in workers:
        workers["slowdown"] = {w: f for w, f in workers["slowdown"].items() if w in keep}
    out = tmp / f"{spec.stem}-half.yaml"
    out.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return out


def example(name: str) -> Path:
    """examples/NAME.yaml, or examples/NAME/spec.yaml (a spec beside its own model.py)."""
    path = ROOT / "examples" / f"{name}.yaml"
    return path if path.exists() else ROOT / "examples" / name / "spec.yaml"


def one(name: str, tmp: Path, steps: int) -> dict:
    spec = example(name)
    cal = {"calibrate": tmp / f"{name}-cal.json", "probe": tmp / f"{name}-probe.json",
           "fit": tmp / f"{name}-fit.json", "half": tmp / f"{name}-half.json"}
    dtgen("calibrate", spec, "-o", cal["calibrate"])
    dtgen("calibrate", spec, "--probe-only", "-o", cal["probe"])
    dtgen("run", spec, "--out", tmp / f"{name}-other", "--steps", 40)
    dtgen("calibrate", "--from", tmp / f"{name}-other", "-o", cal["fit"])
    half = half_spec(spec, tmp)
    if half is not None:
        dtgen("calibrate", half, "-o", cal["half"])
    dtgen("run", spec, "--out", tmp / f"{name}-run", "--steps", steps)
    row = {"strategy": name, "ranks": json.loads((tmp / f"{name}-run" / "run.json").read_text())["world_size"],
           "measured_ms": mean_step_ms(tmp / f"{name}-run"), "other_run_ms": mean_step_ms(tmp / f"{name}-other")}
    row["repeat_err"] = (row["other_run_ms"] - row["measured_ms"]) / row["measured_ms"]
    for source, path in cal.items():
        if not path.exists():
            continue
        out = tmp / f"{name}-pred-{source}"
        dtgen("predict", spec, "--calibration", path, "--steps", steps, "-o", out)
        row[f"{source}_ms"] = mean_step_ms(out)
        row[f"{source}_err"] = (row[f"{source}_ms"] - row["measured_ms"]) / row["measured_ms"]
    return row


MULTIHOST = {  # 2 emulated hosts (scripts/netcluster.sh), each host's link shaped
    "allreduce-ring": {"strategy": {"kind": "allreduce", "algorithm": "ring"}, "topology": {"workers": {"count": 4}}},
    "allreduce-native": {"strategy": {"kind": "allreduce", "algorithm": "native"},
                         "topology": {"workers": {"count": 4}}},
}


def multihost_run(cluster, spec: Path, out: Path, steps: int) -> Path:
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
        cal = multihost_run(cluster, spec, tmp / f"mh-{name}-cal", 40)
        run = multihost_run(cluster, spec, tmp / f"mh-{name}-run", steps)
    dtgen("calibrate", "--from", cal, "-o", tmp / f"mh-{name}-fit.json")
    out = tmp / f"mh-{name}-pred"
    dtgen("predict", spec, "--calibration", tmp / f"mh-{name}-fit.json", "--steps", steps, "-o", out)
    row = {"strategy": f"{name} 2 hosts {link}", "ranks": 4, "measured_ms": mean_step_ms(run),
           "other_run_ms": mean_step_ms(cal), "fit_ms": mean_step_ms(out)}
    row["repeat_err"] = (row["other_run_ms"] - row["measured_ms"]) / row["measured_ms"]
    row["fit_err"] = (row["fit_ms"] - row["measured_ms"]) / row["measured_ms"]
    return row


# leave-one-out: the one spec of each model that calibrates every other example of it
REFERENCE = {"mlp [32, 128, 128, 10]": "allreduce-ring", "mlp [128, 128, 128, 128]": "pipeline-gpipe",
             "transformer": "transformer-ring"}
FAMILY = {"ps-sync": "mlp [32, 128, 128, 10]", "ps-async": "mlp [32, 128, 128, 10]",
          "ps-sharded": "mlp [32, 128, 128, 10]", "central-storage": "mlp [32, 128, 128, 10]",
          "allreduce-native": "mlp [32, 128, 128, 10]", "allreduce-ring": "mlp [32, 128, 128, 10]",
          "allreduce-tree": "mlp [32, 128, 128, 10]", "allreduce-hierarchical": "mlp [32, 128, 128, 10]",
          "gossip": "mlp [32, 128, 128, 10]", "pipeline-gpipe": "mlp [128, 128, 128, 128]",
          "pipeline-1f1b": "mlp [128, 128, 128, 128]", "transformer-ring": "transformer",
          "transformer-pipeline": "transformer"}
SIZE = ["allreduce-ring", "allreduce-native", "ps-sync", "gossip"]


def at_workers(spec: Path, workers: int, tmp: Path) -> Path:
    data = yaml.safe_load(spec.read_text(encoding="utf-8"))
    data["topology"]["workers"]["count"] = workers
    data["topology"]["workers"].pop("slowdown", None)
    if data["strategy"].get("peers", 1) >= workers:
        data["strategy"]["peers"] = workers - 1
    training = data.setdefault("training", {})
    dataset = training.setdefault("dataset", {})
    if dataset.get("kind", "synthetic") == "synthetic":  # one global batch at any width (as dtgen predict)
        dataset["samples"] = max(int(dataset.get("samples", 4096)), 8 * workers * int(training.get("batch_size", 64)))
    out = tmp / f"{spec.stem}-{workers}w.yaml"
    out.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return out


def transfer_row(label: str, spec: Path, cal: Path, tmp: Path, steps: int, workers: int | None = None) -> dict:
    """Run `spec` twice (target and repeat) and predict it from `cal` (at `workers`)."""
    tag = label.replace(" ", "_")
    dtgen("run", spec, "--out", tmp / f"{tag}-run", "--steps", steps)
    dtgen("run", spec, "--out", tmp / f"{tag}-repeat", "--steps", steps)
    return scored({"strategy": label, "run": str(tmp / f"{tag}-run"), "repeat": str(tmp / f"{tag}-repeat"),
                   "spec": str(spec), "calibration": str(cal),
                   "predict_args": [str(a) for a in ("--steps", steps, *(("--workers", workers) if workers else ()))]},
                  tmp / f"{tag}-pred")


def scored(row: dict, out: Path) -> dict:
    """The row with its prediction (made into `out`) set against its run and repeat: what
    `--rescore` makes again from kept runs after the predictor changed."""
    dtgen("predict", row["spec"], "--calibration", row["calibration"], *row["predict_args"], "-o", out)
    run, measured, repeat, predicted = (Path(row["run"]), mean_step_ms(Path(row["run"])),
                                        mean_step_ms(Path(row["repeat"])), mean_step_ms(out))
    low, high = (v * 1000 for v in json.loads((out / "metrics.json").read_text())["step_time_interval_s"])
    return dict(row, ranks=json.loads((run / "run.json").read_text())["world_size"], measured_ms=measured,
                repeat_err=(repeat - measured) / measured, predicted_ms=predicted,
                err=(predicted - measured) / measured, low_ms=low, high_ms=high, inside=low <= measured <= high,
                half_width=(high - low) / 2 / predicted, load=os.getloadavg()[0])


def transfer(names: list, tmp: Path, steps: int, size_names=SIZE, size_workers=(4, 8), fresh: bool = False) -> list:
    """The leave-one-out and size rows. `fresh`: calibrate again right before each row's
    target run, as a user calibrates and then predicts; otherwise one calibration serves
    all the rows of its reference (or size), the last of them made minutes after it."""
    rows = []
    cals = {}
    for name in [n for n in names if n in FAMILY]:
        family = FAMILY[name]
        ref = REFERENCE[family]
        if fresh or ref not in cals:
            cals[ref] = tmp / (f"ref-{ref}-for-{name}.json" if fresh else f"ref-{ref}.json")
            dtgen("calibrate", example(ref), "-o", cals[ref])
        label = f"{name} (from {ref})" + (" [self]" if name == ref else "")
        rows.append(transfer_row(label, example(name), cals[ref], tmp, steps))
        print(transfer_line(rows[-1]), flush=True)
    for name in [n for n in size_names if n in SIZE]:
        cal = None
        for workers in size_workers:
            if fresh or cal is None:
                cal = tmp / (f"size-{name}-for-{workers}.json" if fresh else f"size-{name}.json")
                dtgen("calibrate", at_workers(example(name), 2, tmp), "-o", cal)
            rows.append(transfer_row(f"{name} 2->{workers}", at_workers(example(name), workers, tmp), cal, tmp,
                                     steps, workers))
            print(transfer_line(rows[-1]), flush=True)
    return rows


def mh_spec_data(name: str, steps: int, workers: int, hosts: int) -> dict:
    """The multi-host examples' model (MULTIHOST) at `workers` workers on `hosts` hosts."""
    from opentikz_dt.runner.testing import small_spec_data

    over = MULTIHOST[name]
    data = small_spec_data(over["strategy"]["kind"], name=f"mh-{name}-{workers}w{hosts}h",
                           training={"steps": steps}, runtime={"timeout_s": 120})
    data["training"]["model"] = {"layers": [32, 128, 128, 10]}
    data["training"]["batch_size"] = 256
    data["training"]["dataset"] = {"samples": 16384}
    data["strategy"] = over["strategy"]
    data["topology"] = {"workers": {"count": workers}, "hosts": hosts}
    return data


def transfer_multihost(tmp: Path, steps: int, link: str) -> list:
    """Size across hosts: `dtgen calibrate` at 2 workers on this one host, predicting 2
    emulated hosts x 4 workers with `--link LINK` (the emulated link's bandwidth), each
    against two runs on the emulated cluster (root, ip netns, tc: scripts/netcluster.sh)."""
    from opentikz_dt.runner.netcluster import NetCluster

    rows = []
    for name in MULTIHOST:
        small, big = (tmp / f"mh-{name}-{w}w.yaml" for w in (2, 8))
        small.write_text(yaml.safe_dump(mh_spec_data(name, steps, 2, 1), sort_keys=False))
        big.write_text(yaml.safe_dump(mh_spec_data(name, steps, 8, 2), sort_keys=False))
        cal = tmp / f"mh-{name}-2w.json"
        dtgen("calibrate", small, "-o", cal)
        with NetCluster(2, link=link) as cluster:
            run = multihost_run(cluster, big, tmp / f"mh-{name}-8w-run", steps)
            repeat = multihost_run(cluster, big, tmp / f"mh-{name}-8w-repeat", steps)
        rows.append(scored({"strategy": f"{name} 2->2 hosts x 4 ({link})", "run": str(run), "repeat": str(repeat),
                            "spec": str(big), "calibration": str(cal),
                            "predict_args": ["--steps", str(steps), "--link", link]}, tmp / f"mh-{name}-8w-pred"))
        print(transfer_line(rows[-1]), flush=True)
    return rows


def relocated(row: dict, kept: Path) -> dict:
    """A kept row's paths where this machine has them: a DIR made elsewhere (a GPU box) and
    copied here holds its runs and calibrations under their own names; its examples are
    this checkout's."""
    def here(path: str) -> str:
        p = Path(path)
        if p.exists():
            return path
        if "examples" in p.parts:  # from the last "examples" on, under this checkout
            last = max(i for i, part in enumerate(p.parts) if part == "examples")
            return str(ROOT.joinpath(*p.parts[last:]))
        return str(kept / p.name)
    return dict(row, **{k: here(row[k]) for k in ("run", "repeat", "spec", "calibration")})


def transfer_line(r: dict) -> str:
    return (f"{r['strategy']:44} {r['ranks']:>5} {r['measured_ms']:9.2f} {r['repeat_err']:+7.0%} "
            f"{r['predicted_ms']:9.2f} {r['err']:+7.0%} {r['low_ms']:8.2f}-{r['high_ms']:<8.2f} "
            f"{'in' if r['inside'] else 'OUT':>3} {r['half_width']:6.0%} {r['load']:5.1f}")


def transfer_summary(rows: list) -> None:
    print(f"{'row':44} {'ranks':>5} {'run ms':>9} {'repeat':>7} {'pred ms':>9} {'error':>7} {'interval ms':>17} "
          f"{'in?':>3} {'+-':>6} {'load':>5}")
    for r in rows:
        print(transfer_line(r))
    for what, keep in (("leave-one-out", lambda r: "->" not in r["strategy"] and "[self]" not in r["strategy"]),
                       ("size", lambda r: "->" in r["strategy"])):
        mine = [r for r in rows if keep(r)]
        if mine:
            errs = [abs(r["err"]) for r in mine]
            print(f"{what}: median |error| {statistics.median(errs):.0%}, max {max(errs):.0%}, over 25%: "
                  f"{sum(e > 0.25 for e in errs)} of {len(errs)}; in the interval: "
                  f"{sum(r['inside'] for r in mine)} of {len(mine)} (with a half-width of 25% or less: "
                  f"{sum(r['inside'] and r['half_width'] <= 0.25 for r in mine)})")
            # The noise floor scored as the goal scores a prediction: the repeat run, made right
            # after the target, taken as if it predicted it. Where it misses, no predictor fitted
            # before the target ran could be sure to meet the goal on this machine.
            floor = [abs(r["repeat_err"]) for r in mine]
            print(f"  the repeat run as the prediction: median |error| {statistics.median(floor):.0%}, "
                  f"max {max(floor):.0%}, over 25%: {sum(e > 0.25 for e in floor)} of {len(floor)}")
            # and the prediction against both runs' mean, a steadier estimate of the spec's step
            both = [abs(r["predicted_ms"] / (r["measured_ms"] * (1 + r["repeat_err"] / 2)) - 1) for r in mine]
            print(f"  the prediction against the mean of run and repeat: median |error| "
                  f"{statistics.median(both):.0%}, max {max(both):.0%}, over 25%: {sum(e > 0.25 for e in both)} "
                  f"of {len(both)}")


def line(r: dict) -> str:
    cells = [f"{r['strategy']:30} {r['ranks']:>5} {r['measured_ms']:9.2f} {r['repeat_err']:+7.0%}"]
    for source in SOURCES:
        cells.append(f"{r[source + '_ms']:9.2f} {r[source + '_err']:+7.0%}" if source + "_ms" in r else
                     f"{'--':>9} {'--':>7}")
    return " ".join(cells)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(EXAMPLES))
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--json", default=None)
    parser.add_argument("--multihost", default=None, metavar="LINK",
                        help="also 2 emulated hosts with each link shaped to LINK (e.g. 200mbit; root, ip netns, tc)")
    parser.add_argument("--transfer", action="store_true",
                        help="leave-one-out (one reference calibration per model) and size (2 -> 4, 8 workers)")
    parser.add_argument("--keep", default=None, metavar="DIR",
                        help="with --transfer: keep the runs, calibrations and rows (DIR/rows.json) in DIR")
    parser.add_argument("--size", default=",".join(SIZE), help="with --transfer: the examples of the size rows")
    parser.add_argument("--size-workers", default="4,8", help="with --transfer: the sizes predicted from 2 workers")
    parser.add_argument("--fresh", action="store_true",
                        help="with --transfer: calibrate again right before each row's target run")
    parser.add_argument("--rescore", default=None, metavar="DIR",
                        help="predict a --keep DIR's rows again with this code, against the same runs")
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.1f} (cores: {os.cpu_count()})", flush=True)
    if args.rescore:  # the kept runs and calibrations, predicted again by this code
        kept = Path(args.rescore)
        rows = [scored(relocated(r, kept), kept / (r["strategy"].replace(" ", "_").replace("/", "_") + "-rescore"))
                for r in json.loads((kept / "rows.json").read_text())]
        transfer_summary(rows)
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=1))
        return
    if args.transfer:
        with contextlib.ExitStack() as stack:
            tmp = Path(args.keep) if args.keep else Path(stack.enter_context(
                tempfile.TemporaryDirectory(prefix="dtgen-bench-transfer-")))
            tmp.mkdir(parents=True, exist_ok=True)
            rows = transfer([n for n in args.only.split(",") if n], tmp, args.steps,
                            [n for n in args.size.split(",") if n], [int(w) for w in args.size_workers.split(",") if w],
                            fresh=args.fresh)
            if args.multihost:
                rows += transfer_multihost(tmp, args.steps, args.multihost)
            if args.keep:
                (tmp / "rows.json").write_text(json.dumps(rows, indent=1))
        print(f"load average after: {os.getloadavg()[0]:.1f}")
        transfer_summary(rows)
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=1))
        return
    rows = []
    with tempfile.TemporaryDirectory(prefix="dtgen-bench-predict-") as tmp:
        for name in [n for n in args.only.split(",") if n]:
            try:
                rows.append(one(name, Path(tmp), args.steps))
            except subprocess.CalledProcessError as exc:
                print(f"{name}: failed: {exc.stderr.decode()[-800:]}", flush=True)
                continue
            print(line(rows[-1]), flush=True)
        if args.multihost:
            for name in MULTIHOST:
                try:
                    rows.append(one_multihost(name, Path(tmp), args.steps, args.multihost))
                except (subprocess.CalledProcessError, RuntimeError) as exc:
                    print(f"{name} (2 hosts): failed: {getattr(exc, 'stderr', exc)!s:.300}", flush=True)
                    continue
                print(line(rows[-1]), flush=True)
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    print(f"{'strategy':30} {'ranks':>5} {'run ms':>9} {'repeat':>7} " +
          " ".join(f"{s + ' ms':>9} {'error':>7}" for s in SOURCES))
    for r in rows:
        print(line(r))
    for source in ("repeat",) + SOURCES:
        errs = [abs(r[f"{source}_err"]) for r in rows if f"{source}_err" in r]
        if errs:
            print(f"{source}: median |error| {statistics.median(errs):.0%}, max {max(errs):.0%}, "
                  f"over 25%: {sum(e > 0.25 for e in errs)} of {len(errs)}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
