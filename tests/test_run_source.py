"""Every figure of a run directory says where its numbers come from (issue 25): a prediction
is titled and footed as one (from which calibration, or the illustrative cost model), a
measurement says the hardware it ran on and draws the device each rank used; the files are
named by source and run, so two runs' figures share a folder."""

from __future__ import annotations

import json
import subprocess
import sys

from opentikz_dt.measured.figures import render_run_figures
from opentikz_dt.measured.run import load_run
from opentikz_dt.predict.fit import fit_from_run
from opentikz_dt.predict.synthetic import write_synthetic_run

ILLUSTRATIVE = "illustrative cost model (no calibration): not a measurement"


def _dtgen(*args):
    return subprocess.run([sys.executable, "-m", "opentikz_dt", *map(str, args)], capture_output=True, text=True,
                          timeout=120)


def _figures(run_dir, out):
    done = _dtgen("figure", run_dir, "-o", out)
    assert done.returncode == 0, done.stderr
    return {p.name: p.read_text(encoding="utf-8") for p in out.glob("*.tex")}


def test_a_prediction_without_calibration_says_illustrative_everywhere(tmp_path):
    done = _dtgen("predict", "examples/ps-sync.yaml", "-o", tmp_path / "pred", "--steps", "8")
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if "illustrative" in line]
    assert warnings == ["dtgen: warning: no --calibration: the numbers come from the illustrative cost model, "
                        "not from this machine (dtgen calibrate SPEC measures it)"]
    texts = _figures(tmp_path / "pred", tmp_path / "figs")
    # synchronous steps: every worker's rate is one number, given in the table's note (no bar chart)
    assert sorted(texts) == ["predicted-pred-memory.tex", "predicted-pred-table.tex", "predicted-pred-timeline.tex",
                             "predicted-pred-topology.tex"]
    # memory is modelled from the spec (closed forms, no cost model): it says so, and nothing measured
    memory = texts["predicted-pred-memory.tex"]
    assert "Expected memory per rank" in memory and "expected: the spec's model of" in memory
    assert "activations from the memory model" in memory and "measured" not in memory.lower()
    topology = texts["predicted-pred-topology.tex"]
    assert "Predicted: " in topology and "Measured:" not in topology and "measured," not in topology
    assert "predicted, mean of 8 steps" in topology and ILLUSTRATIVE in topology
    assert "\\gpupic" in topology and "ran on" not in topology  # the spec's icons: a prediction ran nowhere
    assert ILLUSTRATIVE in texts["predicted-pred-timeline.tex"] and "predicted: synchronous" in \
        texts["predicted-pred-timeline.tex"]
    assert "every worker alike" in texts["predicted-pred-table.tex"]
    assert f"Source: {ILLUSTRATIVE}." in texts["predicted-pred-table.tex"]


def test_a_prediction_from_a_calibration_names_it(tmp_path):
    cal = fit_from_run(write_synthetic_run(tmp_path / "run", "ps-sync", steps=12)).save(tmp_path / "fit.json")
    done = _dtgen("predict", "examples/ps-sync.yaml", "--calibration", cal, "-o", tmp_path / "pred", "--steps", "8")
    assert done.returncode == 0, done.stderr
    assert "illustrative" not in done.stderr
    texts = _figures(tmp_path / "pred", tmp_path / "figs")
    for name in ("predicted-pred-topology.tex", "predicted-pred-timeline.tex", "predicted-pred-table.tex"):
        assert "predicted from calibration fit.json" in texts[name] and "illustrative" not in texts[name], name


def test_two_runs_figures_share_a_folder(tmp_path):
    for name in ("a", "b"):
        write_synthetic_run(tmp_path / "runs" / name, "ps-async", steps=8, slowdown={"w3": 2.0})  # rates differ
        _figures(tmp_path / "runs" / name, tmp_path / "figs")
    names = sorted(p.name for p in (tmp_path / "figs").glob("*.tex"))
    kinds = ("loss", "staleness", "table", "throughput", "timeline", "topology")
    assert names == sorted(f"measured-{run}-{kind}.tex" for run in ("a", "b") for kind in kinds)


def _with_hardware(run_dir, device: str, backend: str, hardware: dict):
    info = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    for rank in info["ranks"]:
        rank["device"] = device.format(r=rank["rank"]) if "{r}" in device else device
        rank["backend"] = backend
    info["hardware"] = hardware
    (run_dir / "run.json").write_text(json.dumps(info), encoding="utf-8")
    return load_run(run_dir)


def test_a_cpu_run_is_drawn_on_cpus_and_says_where_it_ran(tmp_path):
    run = _with_hardware(write_synthetic_run(tmp_path / "r", "ps-sync", steps=8), "cpu", "gloo",
                         {"cpu": "AMD EPYC 7B13", "cores": 2, "cores_total": 2})
    texts = render_run_figures(run)
    note = "ran on CPU: AMD EPYC 7B13, cores: 2, ranks: 4; gloo"
    assert "\\cpupic" in texts["measured-topology"] and "\\gpupic" not in texts["measured-topology"]
    assert "Measured: " in texts["measured-topology"]
    for key in ("measured-topology", "measured-timeline", "plot-loss"):  # sync: no per-worker bar chart
        assert note in texts[key], key
    assert f"Source: measured, {note}." in texts["table-summary"]  # the table's one row, one source line


def test_a_compare_of_a_measurement_and_an_illustrative_prediction_says_each_rows_source(tmp_path):
    from opentikz_dt.measured.compare import compare_runs
    from opentikz_dt.predict.predict import predict

    hardware = {"cpu": "AMD EPYC 7B13", "cores": 2, "cores_total": 2}
    measured = [_with_hardware(write_synthetic_run(tmp_path / name, "ps-sync", steps=8), "cpu", "gloo", hardware).path
                for name in ("a", "b")]
    predicted, _ = predict("examples/ps-sync.yaml", tmp_path / "pred", steps=6)
    compare_runs([*measured, predicted], tmp_path / "out", ("tex",))
    table = (tmp_path / "out" / "compare-table.tex").read_text(encoding="utf-8")
    # the two measured runs are repeats of one spec: one row, one line; the prediction its own
    assert "Source of synth-ps-sync: measured, ran on CPU: AMD EPYC 7B13, cores: 2, ranks: 4; gloo." in table
    assert f"Source of ps-sync (predicted): {ILLUSTRATIVE}." in table
    assert table.count("Source") == 2


def test_a_gpu_run_is_drawn_on_gpus_and_names_them(tmp_path):
    run = _with_hardware(write_synthetic_run(tmp_path / "r", "allreduce-ring", workers=4, steps=8), "cuda:{r}",
                         "nccl", {"cpu": "x", "cores": 64, "gpus": {str(i): "NVIDIA H100 80GB HBM3" for i in range(4)}})
    texts = render_run_figures(run, only=("measured-topology", "measured-timeline"))
    note = "ran on GPU: 4 \u00d7 NVIDIA H100 80GB HBM3, ranks: 4; nccl"
    assert "\\gpupic" in texts["measured-topology"] and "\\cpupic" not in texts["measured-topology"]
    assert note in texts["measured-topology"] and note in texts["measured-timeline"]


def test_a_run_on_several_machines_says_its_hardware_line_is_node_0s(tmp_path):
    run_dir = write_synthetic_run(tmp_path / "r", "allreduce-ring", workers=4, steps=8)
    info = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    for rank in info["ranks"]:
        rank["node_rank"] = rank["rank"] // 2
    (run_dir / "run.json").write_text(json.dumps(info), encoding="utf-8")
    run = _with_hardware(run_dir, "cpu", "gloo", {"cpu": "Xeon", "cores": 8})
    tex = render_run_figures(run, only=("measured-topology",))["measured-topology"]
    assert "ran on CPU: Xeon, cores: 8, ranks: 2; gloo (node 0 of 2 machines)" in tex


def test_a_prediction_in_its_default_folder_is_not_named_predicted_twice(tmp_path):
    done = _dtgen("predict", "examples/ps-sync.yaml", "-o", tmp_path / "ps-sync-predicted", "--steps", "6")
    assert done.returncode == 0, done.stderr
    done = _dtgen("figure", tmp_path / "ps-sync-predicted", "--kind", "topology", "-o", tmp_path / "f")
    assert done.stdout == f"wrote {tmp_path / 'f' / 'predicted-ps-sync-topology.tex'}\n"
