"""A device probe (`dtgen calibrate --device-probe`): this host's best matmul rate, copy rate
and collective bus bandwidth, measured (runner/device_probe.py), replace the datasheet's in a
plan on that device (predict/device_probe.py); anything else is one located line."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from opentikz_dt.cli import main
from opentikz_dt.predict.cluster import cluster_of, layout_of, model_of, rated_cluster
from opentikz_dt.predict.datasheet import stage_pass
from opentikz_dt.predict.device_probe import load_device_probe
from opentikz_dt.spec import load_spec

SPEC = ("name: tiny-a100\n"
        "strategy: {kind: mesh, parallelism: {pipeline: 2, data: 2, tensor: 4}, microbatches: 4}\n"
        "topology: {workers: {count: 16}}\n"
        "training:\n  model: {kind: transformer, layers: 4, d_model: 256, heads: 4, seq_len: 128, vocab: 512}\n"
        "  batch_size: 8\n  precision: bf16\n  steps: 3\n"
        "hardware: {device: a100-sxm-80gb}\n")
A100 = {"kind": "cuda", "name": "NVIDIA A100-SXM4-80GB", "count": 8}


def _probe(tmp_path, device: dict, matmul: float, memory: float, bus: float | None, name="probe.json"):
    """A device probe file with these rates (FLOP/s, bytes/s, bus bytes/s or no collectives)."""
    data = {"dtgen_device_probe": 1, "device": device,
            "matmul": {"dtype": "bfloat16", "flops_per_s": matmul, "shape": [8192] * 3, "points": []},
            "memory": {"bytes_per_s": memory, "copied_bytes": 1 << 30},
            "collectives": None if bus is None else {
                "ranks": 8, "backend": "nccl",
                **{k: {"bus_bytes_per_s": bus, "points": []} for k in ("all-reduce", "all-gather", "reduce-scatter")}},
            "made": {"date": "a test's"}}
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def _spec(tmp_path, text=SPEC):
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return path


def test_a_probe_of_the_plans_gpu_sets_its_matmul_hbm_and_nvlink_rates(tmp_path):
    spec_path = _spec(tmp_path)
    spec = load_spec(spec_path)
    sheet = cluster_of(spec)
    # half the datasheet's matmul and HBM rates: every GEMM (at its wave fill, or on the HBM
    # roofline) and every memory-bound term takes twice as long, so every pass does
    half = _probe(tmp_path, A100, sheet.matmul_rate / 2, sheet.hbm_rate / 2, sheet.bandwidth(sheet.intra) / 2)
    probe = load_device_probe(half)
    model, layout = model_of(spec), layout_of(spec)
    probed, measured = rated_cluster(probe, spec, model, layout)
    assert (probed.matmul_rate, probed.hbm_rate) == (sheet.matmul_rate / 2, sheet.hbm_rate / 2)
    for stage in (0, 1):
        before, after = (stage_pass(model, layout, c, "none", stage) for c in (sheet, probed))
        assert after.forward == pytest.approx(2 * before.forward)
        assert after.backward == pytest.approx(2 * before.backward)
    # inside a host collectives move at the probe's bus rate: a 10 GB ring all-reduce of the
    # tensor group of 4 (latency under 0.1% of it) takes twice as long
    assert probed.collective("all-reduce", 1e10, 1, 4, "ring") == pytest.approx(
        2 * sheet.collective("all-reduce", 1e10, 1, 4, "ring"), rel=1e-3)
    # across hosts the NIC stays the datasheet's: a data group of 2 hosts' ranks (stride 4)
    assert probed.collective("all-reduce", 1e9, 8, 2) == pytest.approx(sheet.collective("all-reduce", 1e9, 8, 2))
    assert measured["device_probe"]["measured"] == "matmuls, HBM and NVLink"
    assert measured["caption"] == ("expected on 16 A100 SXM 80 GB, matmuls, HBM and NVLink measured by a device "
                                   "probe of 8x NVIDIA A100-SXM4-80GB, the NIC from datasheets")
    # through the CLI: run.json says what was measured and where it came from
    result = CliRunner().invoke(main, ["predict", str(spec_path), "--calibration", str(half),
                                       "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    predicted = json.loads((tmp_path / "out" / "run.json").read_text())["predicted"]
    assert predicted["device_probe"]["device_probe"] == str(half) and predicted["caption"] == measured["caption"]
    assert predicted["hbm_efficiency"] == pytest.approx(sheet.hbm_rate / 2 / sheet.device.hbm_bytes_per_s, abs=1e-4)
    assert "datasheets and device probe" in result.output


def test_a_probe_without_collectives_or_of_another_precision_keeps_those_datasheet_rates(tmp_path):
    spec = load_spec(_spec(tmp_path, SPEC.replace("precision: bf16", "precision: fp32")))
    sheet = cluster_of(spec)
    probe = load_device_probe(_probe(tmp_path, A100, 1e14, 1e12, None))
    probed, measured = rated_cluster(probe, spec, model_of(spec), layout_of(spec))
    # a bf16 matmul rate says nothing of fp32: the datasheet's; one GPU measured no NVLink
    assert probed.matmul_rate == sheet.matmul_rate and probed.hbm_rate == 1e12
    assert probed.bandwidth(probed.intra) == sheet.bandwidth(sheet.intra)
    assert measured["device_probe"]["measured"] == "HBM"
    assert measured["device_probe"]["datasheet"] == "fp32 matmuls, NVLink and the NIC"


def test_a_probe_of_another_device_a_bad_probe_or_a_probe_for_a_calibration_is_one_line(tmp_path):
    spec_path = _spec(tmp_path)
    h100 = _probe(tmp_path, {"kind": "cuda", "name": "NVIDIA H100 80GB HBM3", "count": 8}, 7e14, 3e12, 4e11,
                  name="h100.json")
    result = CliRunner().invoke(main, ["predict", str(spec_path), "--calibration", str(h100),
                                       "-o", str(tmp_path / "o")])
    assert result.exit_code == 2 and not (tmp_path / "o").exists()
    assert f"{spec_path}:9:20: hardware.device: the device probe" in result.output
    assert "measured 8x NVIDIA H100 80GB HBM3, not A100-SXM4-80GB" in result.output
    bad = json.loads(h100.read_text())
    del bad["memory"]["bytes_per_s"]
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    result = CliRunner().invoke(main, ["predict", str(spec_path), "--calibration", str(tmp_path / "bad.json"),
                                       "-o", str(tmp_path / "o")])
    assert result.exit_code == 1 and "bad.json: memory.bytes_per_s: missing" in result.output
    assert "Traceback" not in result.output
    plain = _spec(tmp_path, SPEC.replace("hardware: {device: a100-sxm-80gb}\n", ""))
    result = CliRunner().invoke(main, ["predict", str(plain), "--calibration", str(h100), "-o", str(tmp_path / "o")])
    assert result.exit_code == 1 and "a device probe (dtgen calibrate --device-probe)" in result.output
    result = CliRunner().invoke(main, ["calibrate", "--device-probe", str(plain)])
    assert result.exit_code == 2 and "--device-probe cannot be combined with SPEC" in result.output


@pytest.mark.dist
def test_the_probe_measures_this_host_and_its_file_reads_back(tmp_path):
    """On this CPU: gloo over 2 processes. Each collective's bus bandwidth is nccl-tests'
    (bytes x its factor over the time) at the largest size; the matmul kept is the best."""
    out = tmp_path / "probe.json"
    done = subprocess.run([sys.executable, "-m", "opentikz_dt", "calibrate", "--device-probe", "--ranks", "2",
                           "-o", str(out)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"wrote {out}" in done.stdout and not list(tmp_path.glob("*.part"))
    probe = load_device_probe(out)
    data = probe.data
    assert data["device"]["kind"] == "cpu" and data["collectives"]["ranks"] == 2
    assert data["matmul"]["flops_per_s"] == max(p["flops_per_s"] for p in data["matmul"]["points"])
    assert data["memory"]["bytes_per_s"] > 0
    factors = {"all-reduce": 2 * 1 / 2, "all-gather": 1 / 2, "reduce-scatter": 1 / 2}
    for kind, factor in factors.items():
        points = data["collectives"][kind]["points"]
        assert len(points) == 2 and data["collectives"][kind]["bus_bytes_per_s"] == points[-1]["bus_bytes_per_s"]
        for p in points:
            assert p["bus_bytes_per_s"] == pytest.approx(p["bytes"] * factor / p["seconds"])
    # a CPU's probe sets no plan's rates: the A100 plan refuses it at hardware.device
    result = CliRunner().invoke(main, ["predict", str(_spec(tmp_path)), "--calibration", str(out),
                                       "-o", str(tmp_path / "o")])
    assert result.exit_code == 2 and "measured cpu (" in result.output
