"""Cluster presets (`dtgen predict --link PRESET`, `--device PRESET`, `--list-presets`): sourced
numbers, compute carried only from a calibration of the preset's device, one-line refusals."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from opentikz_dt.cli import main
from opentikz_dt.errors import UsageError
from opentikz_dt.predict import calibration, presets
from opentikz_dt.predict.calibration import illustrative_calibration
from opentikz_dt.predict.predict import costs_for
from opentikz_dt.spec import load_spec

SPEC = "examples/allreduce-ring.yaml"
H100 = {"kind": "cuda", "name": "NVIDIA H100 80GB HBM3", "count": 4}
XEON = {"kind": "cpu", "name": "Intel(R) Xeon(R) Gold 6248", "count": 2}


def cal_file(tmp_path, device, name="cal.json"):
    """A measured calibration (illustrative numbers, marked as a probe) of SPEC on `device`."""
    data = json.loads(json.dumps(illustrative_calibration(load_spec(SPEC)).data))
    data.update(source="probe", device=device, machine={"host": "gpu-box", "cpus": 16})
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


@pytest.fixture(autouse=True)
def no_local_gpu(monkeypatch):
    monkeypatch.setattr(calibration, "local_gpus", lambda: [])


def test_every_preset_has_a_source_and_numbers_only_where_one_gives_them():
    for preset in presets.LINKS.values():
        assert preset.source.startswith("https://") and preset.bytes_per_s > 0 and preset.note
        # a latency is either sourced (then the note says where) or left out; none is made up
        assert preset.latency_s is None or "latency" in preset.note
        assert preset.device is None or preset.device in presets.DEVICES
    for device in presets.DEVICES.values():
        assert device.source.startswith("https://") and device.link in presets.LINKS
    # spec sheets give bidirectional NVLink bandwidth; the simulator wants one direction
    assert presets.LINKS["nvlink4-h100"].bytes_per_s == 450e9
    assert presets.LINKS["ib-ndr"].bytes_per_s * 8 == 400e9


def test_list_presets_prints_every_preset_with_its_source():
    result = CliRunner().invoke(main, ["predict", "--list-presets"])
    assert result.exit_code == 0, result.output
    for preset in list(presets.LINKS.values()) + list(presets.DEVICES.values()):
        assert preset.name in result.output and preset.source in result.output
    assert "not sourced" in result.output


@pytest.mark.parametrize("args, named", [(["--link", "nvlink5"], "--link: 'nvlink5'"),
                                         (["--device", "mi300x"], "--device: 'mi300x'")])
def test_an_unknown_preset_is_one_usage_line_listing_them(tmp_path, args, named):
    result = CliRunner().invoke(main, ["predict", SPEC, *args, "-o", str(tmp_path / "p")])
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert named in result.output and "nvlink4-h100" in result.output and "h100-sxm" in result.output
    assert not (tmp_path / "p").exists()


def test_a_network_preset_carries_any_calibrations_compute_and_says_whose(tmp_path):
    spec = load_spec(SPEC)
    cal = cal_file(tmp_path, XEON)
    costs, assumed, _ = costs_for(spec, cal, link="ib-ndr")
    assert costs.comm["p2p"][1] == pytest.approx(1e6 / 50e9)        # beta in µs per byte
    assert costs.comm["p2p"][0] == pytest.approx(3e-4 * 1e6)         # no sourced latency: the calibrated one
    assert assumed["link_preset"]["latency"].startswith("calibrated")
    assert "Xeon" in assumed["link_preset"]["compute"]
    # a latency given on the command line wins, and says so
    costs, assumed, _ = costs_for(spec, cal, link="ib-ndr", latency_ms=0.002)
    assert costs.comm["p2p"][0] == pytest.approx(2.0) and assumed["link_preset"]["latency"] == "given"
    # without a preset nothing new is written (predictions stay byte-identical)
    _, plain, _ = costs_for(spec, cal, link="10gbit")
    assert "link_preset" not in plain and "device_preset" not in plain


def test_a_link_inside_a_device_needs_a_calibration_of_that_device(tmp_path):
    spec = load_spec(SPEC)
    with pytest.raises(UsageError) as err:
        costs_for(spec, cal_file(tmp_path, XEON), link="nvlink4-h100")
    message = str(err.value)
    assert "\n" not in message and "calibration made on H100 80GB HBM3" in message and "Xeon" in message
    with pytest.raises(UsageError, match="calibration made on H100"):
        costs_for(spec, None, link="nvlink4-h100")                  # illustrative: no device at all
    costs, assumed, _ = costs_for(spec, cal_file(tmp_path, H100), link="nvlink4-h100")
    assert costs.comm["allreduce"][1] == pytest.approx(1e6 / 450e9)


def test_a_device_preset_uses_its_link_and_refuses_another_devices_calibration(tmp_path, monkeypatch):
    spec = load_spec(SPEC)
    costs, assumed, warnings = costs_for(spec, cal_file(tmp_path, H100), device="h100-sxm")
    assert assumed["device_preset"]["name"] == "h100-sxm" and assumed["link_preset"]["name"] == "nvlink4-h100"
    assert not any("another machine" in w for w in warnings)  # predicting for that machine is the point
    # the H100 preset does not depend on this machine's GPU (the prediction is for the preset's)
    monkeypatch.setattr(calibration, "local_gpus", lambda: ["NVIDIA A100-SXM4-40GB"])
    assert costs_for(spec, cal_file(tmp_path, H100), device="h100-sxm")
    for device, what in ((XEON, "cpu (Intel"), ({"kind": "cuda", "name": "NVIDIA H100 PCIe", "count": 1},
                                                 "cuda (1x NVIDIA H100 PCIe)")):
        with pytest.raises(UsageError) as err:
            costs_for(spec, cal_file(tmp_path, device), device="h100-sxm")
        assert what in str(err.value) and "--device h100-sxm" in str(err.value)
    with pytest.raises(UsageError, match="--device h100-sxm: compute comes from a calibration made on that device"):
        costs_for(spec, None, device="h100-sxm")


def test_a_preset_prediction_says_so_in_its_run_and_sweep_caption(tmp_path):
    cal = cal_file(tmp_path, H100)
    out = tmp_path / "pred"
    result = CliRunner().invoke(main, ["predict", SPEC, "--calibration", str(cal), "--device", "h100-sxm",
                                       "-o", str(out)])
    assert result.exit_code == 0, result.output
    predicted = json.loads((out / "run.json").read_text())["predicted"]
    assert predicted["link_preset"]["source"] == presets.LINKS["nvlink4-h100"].source
    result = CliRunner().invoke(main, ["predict", SPEC, "--calibration", str(cal), "--link", "nvlink4-h100",
                                       "--sweep", "workers=2,8", "--steps", "5", "-o", str(tmp_path / "fig")])
    assert result.exit_code == 0, result.output
    tex = (tmp_path / "fig" / "predicted-scaling.tex").read_text()
    assert "nvlink4-h100" in tex and "latency as calibrated" in tex and "H100" in tex
