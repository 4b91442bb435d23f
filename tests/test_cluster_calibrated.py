"""A calibration made on the spec's `hardware:` device replaces the datasheet's compute
(predict/cluster.calibrated_compute); the links stay the datasheets'. A CPU calibration
keeps predicting its own machine; a GPU calibration of another device is refused."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from opentikz_dt.cli import main
from opentikz_dt.predict.calibration import illustrative_calibration, training_of
from opentikz_dt.predict.cluster import cluster_of, model_of
from opentikz_dt.predict.datasheet import Layout, stage_pass
from opentikz_dt.spec import load_spec

SPEC = ("name: tiny-h100\n"
        "strategy: {kind: mesh, parallelism: {pipeline: 2, data: 2, tensor: 2}, microbatches: 4}\n"
        "topology: {workers: {count: 8}}\n"
        "training:\n  model: {kind: transformer, layers: 4, d_model: 256, heads: 4, seq_len: 128, vocab: 512}\n"
        "  batch_size: 8\n  precision: bf16\n  steps: 3\n"
        "hardware: {device: h100-sxm}\n")
H100 = {"kind": "cuda", "name": "NVIDIA H100 80GB HBM3", "count": 1}
A100 = {"kind": "cuda", "name": "NVIDIA A100-SXM4-80GB", "count": 1}
XEON = {"kind": "cpu", "name": "Intel(R) Xeon(R) Gold 6248", "count": 2}


def _calibration(tmp_path, spec_path, device: dict, times_datasheet: float):
    """A calibration of `device` whose forward and backward of the whole model at the spec's
    microbatch take `times_datasheet` times the datasheet's (all of it in one block's
    per-sample cost, so the sum at that microbatch is exact)."""
    spec = load_spec(spec_path)
    b = spec.training.batch_size // spec.strategy.microbatches
    one = stage_pass(model_of(spec), Layout(1, 1, 1, 1, b), cluster_of(spec), "none", 0)
    data = illustrative_calibration(spec).data
    for block in data["compute"]["blocks"]:
        block["forward"], block["backward"] = [0.0, 0.0], [0.0, 0.0]
    data["compute"]["blocks"][1]["forward"] = [0.0, times_datasheet * (one.forward + one.backward) / b]
    data.update(source="probe", device=device, training=training_of(spec.data), ranks=8, cores_effective=8)
    data["provenance"] = {"numbers": "a test's"}
    path = tmp_path / f"cal-{device['kind']}-{times_datasheet}.json"
    path.write_text(json.dumps(data))
    return path


def _predict(tmp_path, spec_path, name, *extra):
    result = CliRunner().invoke(main, ["predict", str(spec_path), "-o", str(tmp_path / name), *extra])
    return result


def _spans(run_dir, name, phase=None):
    """Durations of the spans called `name` (of `phase`), less the tensor all-reduces inside them."""
    trace = json.loads((run_dir / "trace.json").read_text())
    return [e["dur"] - e["args"].get("tensor_allreduce_us", 0) for e in trace["traceEvents"]
            if e.get("ph") == "X" and e.get("name") == name and phase in (None, e["args"].get("phase"))]


def test_a_calibration_on_the_hardware_device_scales_compute_and_keeps_the_links(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    sheet = _predict(tmp_path, spec, "sheet")
    assert sheet.exit_code == 0, sheet.output
    cal = _calibration(tmp_path, spec, H100, 2.0)
    measured = _predict(tmp_path, spec, "measured", "--calibration", str(cal))
    assert measured.exit_code == 0, measured.output
    info = json.loads((tmp_path / "measured" / "run.json").read_text())["predicted"]
    compute = info["measured_compute"]
    assert compute["scale"] == pytest.approx(2.0, abs=1e-4) and compute["samples"] == 2
    assert info["calibration"] == str(cal) and info["lanes"] == 2  # still the datasheet's lanes
    assert info["caption"] == ("expected on 8 H100 SXM, compute measured on cuda (1x NVIDIA H100 80GB HBM3), "
                               "links from datasheets")
    assert "compute x 2.000, as measured at 2 sample(s)" in measured.output
    # every forward and backward's compute twice the datasheet's; every collective and send unchanged
    for part in ("forward", "backward"):
        before, after = _spans(tmp_path / "sheet", part), _spans(tmp_path / "measured", part)
        assert before and len(before) == len(after)
        assert all(a == pytest.approx(2 * b, abs=2) for b, a in zip(before, after)), (part, before[:4], after[:4])
    for part, phase in (("allreduce", "all-reduce"), ("send", None)):  # (the tied embedding's waits for its peer)
        before, after = _spans(tmp_path / "sheet", part, phase), _spans(tmp_path / "measured", part, phase)
        assert before and before == after, part


def test_a_cpu_calibration_keeps_predicting_its_machine(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    cal = _calibration(tmp_path, spec, XEON, 1.0)
    result = _predict(tmp_path, spec, "cpu", "--calibration", str(cal))
    assert result.exit_code == 0, result.output
    info = json.loads((tmp_path / "cpu" / "run.json").read_text())
    assert "lanes" not in info["predicted"] and "measured_compute" not in info["predicted"]
    assert info["world_size"] == 8  # every rank simulated on the calibrated machine


def test_a_gpu_calibration_of_another_device_is_one_located_line(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    cal = _calibration(tmp_path, spec, A100, 1.0)
    result = _predict(tmp_path, spec, "other", "--calibration", str(cal))
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.output.strip().splitlines()[-1] == (
        f"dtgen: error: {spec}:9:20: hardware.device: compute is carried from a calibration made on H100 80GB HBM3, "
        f"but {cal} measured cuda (1x NVIDIA A100-SXM4-80GB); calibrate on that device, or predict without "
        "--calibration for datasheet costs")
    assert not (tmp_path / "other").exists()


def test_the_shapes_sweep_scales_each_shape_at_its_own_microbatch(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    tables = {}
    for name, extra in (("sheet", ()), ("same", ("--calibration", str(_calibration(tmp_path, spec, H100, 1.0)))),
                        ("slower", ("--calibration", str(_calibration(tmp_path, spec, H100, 2.0))))):
        result = _predict(tmp_path, spec, name, "--sweep", "shapes", *extra)
        assert result.exit_code == 0, result.output
        rows = (tmp_path / name / "predicted-shapes.txt").read_text().splitlines()[1:]
        tables[name] = {r.split("  ")[0]: float(r.split()[5]) for r in rows if "refused" not in r}
        tables[name + ".tex"] = (tmp_path / name / "predicted-shapes.tex").read_text()
    # a calibration that measured the datasheet's own compute at 2 samples changes no step time
    # of a shape whose microbatch is 2 samples (global batch 16: 1x8x1 one microbatch of 2,
    # 2x2x2 four of 2); at other microbatches its per-sample fit, not the datasheet's shape
    # effects, says what the device does
    assert len(tables["sheet"]) == 8
    assert all(tables["same"][k] == tables["sheet"][k] for k in ("1 x 8 x 1", "2 x 2 x 2"))
    assert tables["same"]["1 x 4 x 2"] != tables["sheet"]["1 x 4 x 2"]  # 4 samples a microbatch
    # twice the compute: every shape slower, by less than twice (its links unchanged)
    assert all(tables["same"][k] < tables["slower"][k] < 2 * tables["same"][k] for k in tables["same"])
    assert "compute measured on cuda (1" in tables["slower.tex"] and "peaks" not in tables["slower.tex"]
    assert "datasheet costs" in tables["sheet.tex"]


def test_a_profiled_gpu_run_names_its_device_and_calibrates_the_cluster_prediction(tmp_path):
    """`dtgen calibrate --from-profile` of CUDA traces (the shape torch.profiler writes with
    NCCL, benchmarks/bench_profile_read.py, plus the deviceProperties a real trace lists)
    names the GPU, so its compute replaces the datasheet's for a spec on that device."""
    from gpu_trace_helpers import write_mesh_traces

    folder = write_mesh_traces(tmp_path / "prof", (("pipeline", 2), ("data", 2), ("tensor", 2)), 2, 40)
    for rank in range(8):
        path = folder / f"rank{rank}.pt.trace.json"
        doc = json.loads(path.read_text())
        doc["deviceProperties"] = [{"id": i, "name": H100["name"], "totalGlobalMem": 85_000_000_000}
                                   for i in range(8)]
        path.write_text(json.dumps(doc))
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    cal = tmp_path / "cal.json"
    made = CliRunner().invoke(main, ["calibrate", "--from-profile", str(folder), str(spec), "-o", str(cal)])
    assert made.exit_code == 0, made.output
    assert json.loads(cal.read_text())["device"] == {"kind": "cuda", "name": H100["name"], "count": 8}
    result = _predict(tmp_path, spec, "out", "--calibration", str(cal))
    assert result.exit_code == 0, result.output
    compute = json.loads((tmp_path / "out" / "run.json").read_text())["predicted"]["measured_compute"]
    assert compute["device"] == "cuda (8x NVIDIA H100 80GB HBM3)" and compute["scale"] > 0
    # the calibration's compute at the spec's microbatch, as its fits say
    fits = json.loads(cal.read_text())["compute"]["blocks"]
    at_two = sum(f[0] + 2 * f[1] for b in fits for f in (b["forward"], b["backward"]))
    assert compute["measured_s"] == pytest.approx(at_two, rel=1e-5)


def test_the_figures_of_a_cluster_prediction_say_whose_costs_and_what_a_lane_is(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    cal = _calibration(tmp_path, spec, H100, 1.5)
    for name, extra, costs in (("sheet", (), "datasheet costs"),
                               ("measured", ("--calibration", str(cal)),
                                "compute measured on cuda (1x NVIDIA H100 80GB HBM3), links from datasheets")):
        assert _predict(tmp_path, spec, name, *extra).exit_code == 0
        drawn = CliRunner().invoke(main, ["figure", str(tmp_path / name), "-o", str(tmp_path / f"{name}-fig"),
                                          "--kind", "timeline"])
        assert drawn.exit_code == 0, drawn.output
        (tex,) = (tmp_path / f"{name}-fig").glob("*-timeline.tex")
        text = " ".join(tex.read_text().split())
        assert (f"predicted (dtgen predict): expected on 8 H100 SXM, {costs}; a lane stands for its stage's 4 ranks"
                in text), text[-600:]
        assert "no calibration" not in text
