"""benchmarks/bench_gpu.py, the GPU box's benchmark (scripts/gpu-check.sh): its --smoke mode
runs the whole harness on the CPU with a tiny model, so it cannot rot where no GPU is."""

import importlib.util
import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("torch")

from conftest import REPO  # noqa: E402


def _bench():
    spec = importlib.util.spec_from_file_location("bench_gpu", REPO / "benchmarks" / "bench_gpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.dist
@pytest.mark.slow
def test_smoke_measures_the_plain_loop_dtgen_single_in_fp32_and_bf16_and_a_shared_strategy(tmp_path):
    out = tmp_path / "table.md"
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_gpu.py"), "--smoke", "--out", str(out)],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    table = out.read_text()
    assert table == done.stdout
    fp32 = re.search(r"^\| fp32 \| ([\d,.]+) \| ([\d,.]+) \| (\d+\.\d\d)x \|$", table, re.M)
    assert fp32, table
    plain, ours, ratio = (float(g.replace(",", "")) for g in fp32.groups())
    assert plain > 0 and ours > 0 and ratio == pytest.approx(ours / plain, abs=0.01)
    # bf16 runs on the CPU too (autocast): both sides measured, not "not run"
    bf16 = re.search(r"^\| bf16 \| ([\d,.]+) \| ([\d,.]+) \| (\d+\.\d\d)x \|$", table, re.M)
    assert bf16, table
    assert re.search(r"^dtgen bf16 / dtgen fp32: \d+\.\d\dx$", table, re.M), table
    assert re.search(r"^\| allreduce-native \| 4 \| [\d,.]+ \|$", table, re.M), table
    assert "transformer (layers 2, d_model 32" in table and "Device: CPU" in table


def test_modes_this_dtgen_cannot_run_are_marked_not_run_never_estimated():
    bench = _bench()
    data = bench.spec_data("b", bench.MODELS["tiny"], 4, 2, "cpu", {"precision": "fp64"})
    why = bench.refused_keys(data)
    assert why and "precision" in why  # not a precision (nor, before the training branch, a key)
    assert bench.refused_keys(bench.spec_data("b", bench.MODELS["tiny"], 4, 2, "cpu")) is None
    rows = {"fp32": ({"samples_per_s": 100.0}, {"samples_per_s": 98.0}),
            "bf16": ({"samples_per_s": 500.0}, {"error": f"not run: {why}"})}
    lines = bench.one_gpu_table(rows, "header")
    assert "| fp32 | 100.0 | 98.0 | 0.98x |" in lines
    assert any(line.startswith("| bf16 | 500.0 | not run: ") and line.endswith(" | – |") for line in lines)
    assert not any("bf16 / dtgen fp32" in line for line in lines)
    assert bench.rate([0.0, 1.0, 2.0, 2.5], 16, warmup=1) == pytest.approx(16 * 2 / 1.5)


def test_the_table_says_where_dtgen_misses_the_goal_against_the_plain_loop():
    bench = _bench()
    rows = {"fp32": ({"samples_per_s": 100.0}, {"samples_per_s": 98.0}),
            "tf32": ({"samples_per_s": 200.0}, {"samples_per_s": 190.0}),
            "bf16": ({"samples_per_s": 500.0}, {"error": "not run: x"})}
    lines = bench.one_gpu_table(rows, "header")
    assert "goal dtgen / plain >= 0.97x: not met at tf32 0.95x" in lines
    rows["tf32"] = ({"samples_per_s": 200.0}, {"samples_per_s": 194.0})
    assert "goal dtgen / plain >= 0.97x: met at fp32, tf32" in bench.one_gpu_table(rows, "header")


def test_a_benchmark_stopped_part_way_leaves_what_it_measured(tmp_path, monkeypatch):
    """--out is written after every measurement, so a run stopped at a time limit keeps
    its rows (stand-ins for the runs; the second dtgen run is where it stops)."""
    bench = _bench()
    calls = []

    def dtgen(data, work, warmup, env):
        calls.append(data["name"])
        if len(calls) == 2:
            raise KeyboardInterrupt  # the time limit's signal, as the loop sees it
        return {"samples_per_s": 90.0, "ranks": 1}

    monkeypatch.setattr(bench, "run_plain", lambda *a: {"samples_per_s": 100.0, "params": 28_000})
    monkeypatch.setattr(bench, "run_dtgen", dtgen)
    out = tmp_path / "table.md"
    with pytest.raises(KeyboardInterrupt):
        bench.main(["--smoke", "--out", str(out)])
    table = out.read_text()
    assert "| fp32 | 100.0 | 90.0 | 0.90x |" in table and "| bf16 |" not in table
    assert re.search(r"^Incomplete: 1 of 3 measurements after \d+ s \(still running, or stopped there\)$", table, re.M)
