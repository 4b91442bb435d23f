"""scripts/gpu-check.sh, the GPU box's one command: its --dry-run runs the whole harness on
the CPU (one example, the memory check, the one result file), so it cannot rot where no
GPU is; scripts/gpu_check_report.py counts what failed."""

import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from conftest import REPO  # noqa: E402


def _dry_run(out, results=None, **env):
    return subprocess.run(["bash", str(REPO / "scripts" / "gpu-check.sh"), "--dry-run"], capture_output=True,
                          text=True, timeout=900, cwd=REPO,
                          env={**os.environ, "PYTHON": sys.executable, "OUT": str(out), "OMP_NUM_THREADS": "1",
                               "EXAMPLES": "examples/single.yaml", "BENCH": "0",
                               **({"RESULTS": str(results)} if results else {}), **env})


def _report(out, results, *extra):
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "gpu_check_report.py"), "--out", str(out),
                           "--results", str(results), "--command", "x", "--steps", "2", "--seconds", "1", *extra],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr
    path, failures = done.stdout.split()
    return open(path, encoding="utf-8").read(), int(failures)


@pytest.mark.dist
@pytest.mark.solo
@pytest.mark.slow
def test_the_dry_run_writes_one_result_file_and_its_report_counts_failures(tmp_path):
    out = tmp_path / "out"
    done = _dry_run(out)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    files = list(out.glob("gpu-check_cpu_*.md"))
    assert len(files) == 1 and "gpu-check: result in" in done.stdout
    text = files[0].read_text()
    for needed in ("- Hardware: CPU", "- Versions: dtgen ", "torch ", "- Command: `bash scripts/gpu-check.sh --dry-run`",
                   "- Date: ", "it holds no GPU numbers", "| single | ok, on the CPU (dry run) | 1 | gloo | cpu |", " | 0 |\n",
                   "| single | 0 | ", "categories equal", "No GPU numbers: this run had no GPU.",
                   "## Device probe (`dtgen calibrate --device-probe`)", "against the preset none",
                   "| all-gather bus bandwidth over 2 (gloo, 4 MiB) | "):
        assert needed in text, needed
    assert not (REPO / "benchmarks" / "results" / files[0].name).exists()  # a dry run never publishes
    # the report fails what must fail: a memory category off the model, an example that failed
    metrics = out / "examples" / "single" / "metrics.json"
    data = json.loads(metrics.read_text())
    params = data["memory"]["0"]["params"]
    data["memory"]["0"]["params"] += 4
    metrics.write_text(json.dumps(data))
    (out / "examples" / "broken.status").write_text("1\n")
    (out / "examples" / "broken.out").write_text("dtgen run: ...\ndtgen: error: strategy x: something | odd\n")
    # an example this torch predates is not run, not a failure (the refusal as the runner words it)
    from opentikz_dt.runner.strategies.pipeline import _refused

    (out / "examples" / "too-new.status").write_text("1\n")
    (out / "examples" / "too-new.out").write_text(
        f"dtgen: error: examples/z.yaml:8:55: strategy.schedule: {_refused('zbv-zero-bubble')}\n")
    text, failures = _report(out, tmp_path / "res", "--dry-run")
    assert failures == 2
    assert f"| too-new | not run: needs torch 2.13 or newer (this is torch {torch.__version__}) |" in text
    assert "(1 not run: this torch predates what it needs)" in text
    # a probe of an A100 is read against the A100's datasheet model
    probe = json.loads((out / "device-probe.json").read_text())
    probe["device"] = {"kind": "cuda", "name": "NVIDIA A100-SXM4-80GB", "count": 8}
    probe["matmul"]["flops_per_s"] = 271.2e12 / 2
    (out / "device-probe.json").write_text(json.dumps(probe))
    text, _ = _report(out, tmp_path / "res", "--dry-run")
    assert "against the preset `a100-sxm-80gb`" in text and "| 135.6 TFLOP/s | 50.0% of it" in text
    assert "| broken | FAILED: strategy x: something / odd | – | – | – | – | – |" in text
    assert f"CATEGORIES DIFFER: params {params + 4:,} vs {params:,} bytes" in text  # bytes: 4 show in no MB column
    # not a dry run: an example on the CPU although its spec did not ask for it is a failure
    text, failures = _report(out, tmp_path / "res")
    assert "| single | FAILED: not on the GPU |" in text and failures == 3
