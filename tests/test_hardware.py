"""The hardware presets (opentikz_dt.hardware) and the spec's `hardware:` block: vendor
numbers with their sources, dense peaks from sparse datasheets, defaults, one located
line per bad block (tests/cases/bad/hardware-*), and the warning for a tensor group
wider than a host."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from opentikz_dt import hardware
from opentikz_dt.cli import main
from opentikz_dt.rules import check_warnings
from opentikz_dt.spec import load_spec, spec_from_data

VENDOR_HOSTS = ("https://www.nvidia.com/", "https://resources.nvidia.com/", "https://docs.nvidia.com/",
                "https://pcisig.com/")


def test_every_datasheet_number_comes_from_a_vendor_page_or_the_standard():
    for preset in list(hardware.LINKS.values()) + list(hardware.DEVICES.values()):
        if preset.name.endswith("-measured"):  # a measurement, labelled as one
            assert "measurement" in preset.note
            continue
        assert preset.source.startswith(VENDOR_HOSTS), preset.name
    for device in hardware.DEVICES.values():
        assert device.memory_bytes > 0 and device.hbm_bytes_per_s > 0 and device.short
        assert device.link in hardware.LINKS and device.nic in hardware.LINKS
        assert all(device.peak(p) for p in ("fp32", "tf32", "bf16", "fp16"))


def test_dense_peaks_halve_the_figures_printed_with_sparsity_and_only_those():
    a100, h100 = hardware.DEVICES["a100-sxm-80gb"], hardware.DEVICES["h100-sxm"]
    assert a100.peak("bf16") == 312e12 and a100.peak("tf32") == 156e12 and a100.peak("fp8") is None
    assert h100.peak("bf16") == pytest.approx(989.5e12) and h100.peak("fp8") == pytest.approx(1979e12)
    assert h100.peak("fp32") == 67e12                      # not a tensor-core figure: printed dense
    assert a100.memory_bytes == 80e9 and a100.hbm_bytes_per_s == 2039e9
    assert hardware.LINKS["nvlink3-a100"].bytes_per_s == 300e9     # 600 GB/s bidirectional


def test_a_spec_without_hardware_has_none_and_one_with_it_gets_the_devices_links():
    assert load_spec("examples/mesh-3d.yaml").hardware is None
    spec = spec_from_data({"strategy": {"kind": "allreduce"}, "topology": {"workers": {"count": 16}},
                           "hardware": {"device": "A100-SXM-80GB"}})
    hw = spec.hardware
    assert (hw.device, hw.gpus_per_host, hw.intra_host, hw.inter_host) == ("a100-sxm-80gb", 8, "nvlink3-a100", "ib-hdr")
    assert hw.hosts(16) == 2 and hw.describe(1024) == "1,024 A100 SXM 80 GB"


def test_a_tensor_group_wider_than_a_host_is_a_located_warning_in_validate(tmp_path):
    path = tmp_path / "wide.yaml"
    path.write_text("strategy: {kind: mesh, parallelism: {pipeline: 1, data: 1, tensor: 16}}\n"
                    "topology: {workers: {count: 16}}\n"
                    "training: {model: {kind: transformer, layers: 2, d_model: 32, heads: 16, seq_len: 16, vocab: 64}}\n"
                    "hardware: {device: h100-sxm, gpus_per_host: 8}\n")
    assert check_warnings(load_spec(path)) == [
        f"{path}:4:45: hardware.gpus_per_host: the tensor group of 16 is wider than a host of 8 GPUs: "
        "its all-reduces cross the NIC"]
    result = CliRunner().invoke(main, ["validate", str(path)])
    assert result.exit_code == 0 and "dtgen: warning: " in result.output and "cross the NIC" in result.output
    path.write_text(path.read_text().replace("gpus_per_host: 8", "gpus_per_host: 16"))
    assert check_warnings(load_spec(path)) == []


def test_list_presets_shows_the_device_numbers_and_sources():
    result = CliRunner().invoke(main, ["predict", "--list-presets"])
    assert result.exit_code == 0
    assert "dense TFLOP/s fp32 19.5, tf32 156, bf16 312, fp16 312, fp8 none" in result.output
    assert hardware.A100_DATASHEET in result.output and hardware.CONNECTX6 in result.output
