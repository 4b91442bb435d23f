"""The one result file of `make gpu-check` (scripts/gpu-check.sh), from what it left in
its output folder:

  OUT/pytest.log            the gpu-marked tests (absent in a dry run)
  OUT/examples/NAME.status  each example's exit status, NAME.out its output, NAME/ its run
  OUT/bench.md              benchmarks/bench_gpu.py's tables (absent with BENCH=0)
  OUT/device-probe.json     `dtgen calibrate --device-probe` (OUT/device-probe.out its output)

Writes RESULTS/gpu-check_<hardware>_<yyyy-mm>.md (hardware, versions, command, date,
the tables, a conclusion) and prints its path and the number of failures. The memory
table compares each example's measured memory (metrics.json's `memory`: parameters,
gradients, optimizer state; on a GPU the CUDA allocator's peak) with what the spec
predicts (opentikz_dt/memory.py's expected_memory): the categories must be equal, and
the allocator's peak at least their sum.

    python scripts/gpu_check_report.py --out runs/gpu-check --results benchmarks/results \
        --command "make gpu-check" --steps 5 --seconds 812 [--dry-run]
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

import yaml

MB = 1e6
# how a run refuses a feature this torch predates (runner/strategies/pipeline.py's _refused)
NEWER_TORCH = re.compile(r"from torch (\d+(?:\.\d+)+) on; this is torch (\S+) ")
STATIC = ("params", "grads", "optimizer")


def hardware() -> tuple[str, str]:
    """(a line naming the hardware, its slug for the file name: 'h200', 'cpu')."""
    import torch

    if torch.cuda.is_available():
        name = torch.cuda.get_device_name(0)
        count = torch.cuda.device_count()
        gib = torch.cuda.get_device_properties(0).total_memory / 2**30
        slug = re.sub(r"[^a-z0-9]+", "-", name.lower().replace("nvidia", "")).strip("-") or "gpu"
        return f"{count} x {name} ({gib:.0f} GiB)", slug
    from opentikz_dt.predict.calibration import cpu_model

    return f"CPU: {cpu_model()} (no CUDA GPU)", "cpu"


def versions() -> str:
    import torch

    from opentikz_dt import __version__

    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).resolve().parent, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    cuda = f", CUDA {torch.version.cuda}" if torch.version.cuda else ""
    return (f"dtgen {__version__}{f' (git {commit})' if commit else ''}, torch {torch.__version__}{cuda}, "
            f"Python {platform.python_version()}")


def example_rows(out: Path, dry_run: bool = False) -> tuple[list[str], list[dict], int, int]:
    """The examples table's rows, each run's folder record, the failures (a dry run's
    examples run on the CPU) and the examples this torch is too old for."""
    rows, runs, failures, not_run = [], [], 0, 0
    for status_file in sorted((out / "examples").glob("*.status")):
        name = status_file.stem
        code = int(status_file.read_text().strip() or 1)
        run_dir = out / "examples" / name
        if code == 0:
            run = json.loads((run_dir / "run.json").read_text())
            metrics = json.loads((run_dir / "metrics.json").read_text())
            devices = sorted({str(r["device"]) for r in run["ranks"]})
            spec = yaml.safe_load((run_dir / "spec.yaml").read_text())
            on_gpu = all(d.startswith("cuda") for d in devices)
            pinned = spec.get("runtime", {}).get("device") == "cpu"
            result = ("ok" if on_gpu else "ok, on the CPU as its spec asks" if pinned else
                      "ok, on the CPU (dry run)" if dry_run else "FAILED: not on the GPU")
            if result.startswith("FAILED"):
                failures += 1
            runs.append({"name": name, "dir": run_dir, "spec": spec, "metrics": metrics})
            rows.append(f"| {name} | {result} | {run['world_size']} | {run['backend']} | {', '.join(devices)} | "
                        f"{metrics['samples_per_s']:,.0f} | {host_reads(out / 'examples' / f'{name}.audit')} |")
        else:
            text = (out / "examples" / f"{name}.out").read_text(errors="replace")
            line = next((ln[len("dtgen: error: "):] for ln in text.splitlines() if ln.startswith("dtgen: error: ")),
                        f"exit status {code} (see {name}.out)")
            newer = NEWER_TORCH.search(line)
            if newer:  # a feature this torch lacks (the box's torch is the box's choice): not run
                rows.append(f"| {name} | not run: needs torch {newer[1]} or newer (this is torch {newer[2]}) "
                            "| – | – | – | – | – |")
                not_run += 1
                continue
            failures += 1  # nothing is refused on one shared GPU any more (docs/gpu.md)
            rows.append(f"| {name} | FAILED: {line.replace('|', '/')} | – | – | – | – | – |")
    return rows, runs, failures, not_run


def host_reads(folder: Path) -> str:
    """The host reads (.item, .cpu, .tolist, synchronize) all ranks' loops made between
    their first and last step's end (runner/sync_audit.py), by kind; '0' when none."""
    loop: dict = {}
    for path in sorted(folder.glob("rank*.json")):
        for kind, n in json.loads(path.read_text())["loop"].items():
            loop[kind] = loop.get(kind, 0) + n
    if not loop:
        return "–"
    return ", ".join(f"{n} {kind}" for kind, n in loop.items() if n) or "0"


def memory_rows(runs: list[dict]) -> tuple[list[str], int]:
    """Per rank: the expected static memory, the measured one, the allocator's peak."""
    from opentikz_dt.errors import DtgenError
    from opentikz_dt.memory import expected_memory
    from opentikz_dt.spec import spec_from_data

    rows, failures = [], 0
    for run in runs:
        measured = run["metrics"].get("memory") or {}
        try:
            expected = expected_memory(spec_from_data(run["spec"], name="spec.yaml", data_files=False))
        except DtgenError:
            expected = None
        for rank in sorted(measured, key=int):
            got = measured[rank]
            have = sum(got.get(c) or 0 for c in STATIC)
            want = None if expected is None or int(rank) >= len(expected) else expected[int(rank)]
            peak = got.get("peak")
            checks = []
            if want is not None:
                equal = all((got.get(c) or 0) == getattr(want, c) for c in STATIC)
                checks.append("categories equal" if equal else "CATEGORIES DIFFER: " + ", ".join(
                    f"{c} {got.get(c) or 0:,} vs {getattr(want, c):,} bytes" for c in STATIC
                    if (got.get(c) or 0) != getattr(want, c)))
                failures += not equal
            if peak is not None:
                above = peak >= have
                checks.append("peak >= static" if above else "PEAK BELOW STATIC")
                failures += not above
            want_mb = f"{sum(getattr(want, c) for c in STATIC) / MB:.2f}" if want is not None else "– (no model)"
            rows.append(f"| {run['name']} | {rank} | {want_mb} | {have / MB:.2f} | "
                        f"{f'{peak / MB:.2f}' if peak is not None else '–'} | {'; '.join(checks) or '–'} |")
    return rows, failures


def tests_section(out: Path) -> tuple[list[str], int]:
    log = out / "pytest.log"
    if not log.exists():
        return ["not run (dry run)"], 0
    text = log.read_text(errors="replace")
    summary = [ln.strip("= ") for ln in text.splitlines() if re.search(r"passed|failed|skipped|error|no tests ran", ln)]
    line = summary[-1] if summary else "no result"
    diffs = [f"    {ln}" for ln in text.splitlines() if "max |param - single's|" in ln]
    failed = 1 if re.search(r"\d+ (failed|error)", line) or not summary else 0
    return [line] + ([""] + diffs if diffs else []), failed


def probe_section(out: Path) -> list[str]:
    """The device probe's rates, each against the datasheet preset of the GPU it measured
    (the published best-shape matmul efficiency, the HBM and NVLink datasheet rates)."""
    path = out / "device-probe.json"
    if not path.exists():
        tail = (out / "device-probe.out").read_text().strip().splitlines()[-1:] if (out / "device-probe.out").exists() \
            else ["not run"]
        return [f"FAILED: {tail[0] if tail else 'no output'}"]
    from opentikz_dt.hardware import DEVICES, LINKS, matches
    from opentikz_dt.predict.datasheet import Cluster

    data = json.loads(path.read_text())
    device = data["device"]
    preset = next((p for p in DEVICES.values() if device["kind"] == "cuda" and matches(p, device["name"])), None)
    sheet = Cluster(preset, 8, LINKS[preset.link], LINKS[preset.nic], "bf16") if preset else None
    matmul, memory, coll = data["matmul"], data["memory"], data.get("collectives")

    def against(value: float, reference: float | None) -> str:
        return f"{value / reference:.1%} of it" if reference else "no preset"
    rows = [f"| matmul, best of {len(matmul['points'])} square sizes ({matmul['dtype']}, "
            f"{' x '.join(map(str, matmul['shape']))}) | {matmul['flops_per_s'] / 1e12:,.1f} TFLOP/s | "
            f"{against(matmul['flops_per_s'], sheet.matmul_rate if sheet else None)} (datasheet peak x published "
            "best-shape efficiency) |",
            f"| memory copy ({memory['copied_bytes'] / 2**30:g} GiB, read + written) | "
            f"{memory['bytes_per_s'] / 1e9:,.0f} GB/s | "
            f"{against(memory['bytes_per_s'], sheet.hbm_rate if sheet else None)} (HBM datasheet x published "
            "streaming efficiency, where one is cited) |"]
    for kind in ("all-reduce", "all-gather", "reduce-scatter") if coll else ():
        top = coll[kind]["points"][-1]
        rows.append(f"| {kind} bus bandwidth over {coll['ranks']} ({coll['backend']}, {top['bytes'] / 2**20:g} MiB) | "
                    f"{coll[kind]['bus_bytes_per_s'] / 1e9:,.1f} GB/s | "
                    f"{against(coll[kind]['bus_bytes_per_s'], sheet.bandwidth(sheet.intra) if sheet else None)} "
                    "(NVLink datasheet, NCCL's cap) |")
    if not coll:
        rows.append("| collectives | one GPU: none measured | |")
    named = f"`{preset.name}`" if preset else "none (no preset names this device)"
    unit = ('GPU' if device['kind'] == 'cuda' else 'core') + ('s' if device['count'] != 1 else '')
    return [f"On {device['name']} ({device['count']} {unit}), against the preset {named}; the file is "
            f"{path.name} in the output folder (`dtgen predict SPEC --calibration` of it sets a plan's rates).",
            "", "| rate | measured | against the datasheet model |", "|---|---:|---|", *rows]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--results", type=Path, required=True)
    ap.add_argument("--command", required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--seconds", type=int, required=True)
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--failures", type=int, default=0, help="failures the shell script counted itself")
    args = ap.parse_args(argv)
    what, slug = hardware()
    now = time.gmtime()
    examples, runs, failed_examples, not_run = example_rows(args.out, args.dry_run)
    memory, failed_memory = memory_rows(runs)
    tests, failed_tests = tests_section(args.out)
    bench = (args.out / "bench.md").read_text().rstrip().splitlines() if (args.out / "bench.md").exists() \
        else ["no table: left out (BENCH=0), or the benchmark stopped before writing one (its output says why)"]
    probe = probe_section(args.out)
    failures = args.failures + failed_examples + failed_memory + failed_tests
    goal = next((ln for ln in bench if ln.startswith("goal dtgen / plain")), None)
    kind = ("a dry run on the CPU: it checks the harness; it holds no GPU numbers" if args.dry_run
            else "measured on this GPU")
    lines = [
        f"# gpu-check: {what}",
        "",
        f"- Hardware: {what}",
        f"- Versions: {versions()}",
        f"- Command: `{args.command}`",
        f"- Date: {time.strftime('%Y-%m-%d %H:%M UTC', now)} ({args.seconds} s)",
        f"- What this is: {kind}",
        "",
        "## GPU-marked tests",
        "",
        *tests,
        "",
        f"## Every example for {args.steps} steps (`dtgen run EXAMPLE --steps {args.steps}`)",
        "",
        "| example | result | ranks | backend | devices | samples/s | host reads in the loop |",
        "|---|---|---:|---|---|---:|---|",
        *examples,
        "",
        "## Memory per rank against the model (opentikz_dt/memory.py; MB)",
        "",
        "| example | rank | expected params+grads+optimizer | measured | CUDA allocator peak | check |",
        "|---|---:|---:|---:|---:|---|",
        *memory,
        "",
        "## benchmarks/bench_gpu.py",
        "",
        *bench,
        "",
        "## Device probe (`dtgen calibrate --device-probe`)",
        "",
        *probe,
        "",
        "## Conclusion",
        "",
        (f"{len(runs)} of {len(examples)} examples ran{' on the GPU' if not args.dry_run else ''}"
         + (f" ({not_run} not run: this torch predates what it needs)" if not_run else "") + "; "
         f"{failures} failure(s) in all. " + (f"Against a plain loop: {goal}." if goal and not args.dry_run else "")
         + (" No GPU numbers: this run had no GPU." if args.dry_run else "")),
    ]
    args.results.mkdir(parents=True, exist_ok=True)
    path = args.results / f"gpu-check_{slug}_{time.strftime('%Y-%m', now)}.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{path} {failures}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
