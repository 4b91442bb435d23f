"""A run directory stays readable wherever it is: moved, copied to a machine without the
data, or read from another working directory (issue 25: a relative text dataset broke
`dtgen figure`, `compare` and `calibrate --from` after the run)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import yaml

from opentikz_dt.errors import SpecError
from opentikz_dt.measured.run import load_run
from opentikz_dt.spec import load_spec

TINY = {"kind": "transformer", "layers": 1, "d_model": 16, "heads": 2, "seq_len": 8, "vocab": 256}
SPEC = {"name": "t", "strategy": {"kind": "single"},
        "training": {"model": TINY, "dataset": {"kind": "text", "path": "corpus.txt"}, "batch_size": 4, "steps": 4},
        "runtime": {"backend": "gloo", "device": "cpu", "timeout_s": 20}}


def _dtgen(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "opentikz_dt", *map(str, args)], capture_output=True, text=True,
                          timeout=180, cwd=cwd)


def test_a_run_directory_spec_loads_without_its_data(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "spec.yaml").write_text(yaml.safe_dump(SPEC), encoding="utf-8")  # as runs before the fix wrote it
    (run / "metrics.json").write_text("{}", encoding="utf-8")
    assert load_run(run).spec.training.dataset["path"] == "corpus.txt"
    with pytest.raises(SpecError, match=r"training\.dataset\.path: no such file"):  # a spec to run still needs it
        load_spec(run / "spec.yaml")


@pytest.mark.dist
@pytest.mark.slow
def test_a_moved_run_with_a_relative_text_dataset_still_draws_and_compares(tmp_path):
    exp = tmp_path / "exp"
    exp.mkdir()
    (exp / "t.yaml").write_text(yaml.safe_dump(SPEC), encoding="utf-8")
    corpus = exp / "corpus.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog. " * 40, encoding="utf-8")
    ran = _dtgen("run", "t.yaml", "--out", "runs/t", cwd=exp)  # docs/runner.md's form: the data beside the spec
    assert ran.returncode == 0, ran.stderr
    spec_text = (exp / "runs" / "t" / "spec.yaml").read_text(encoding="utf-8")
    assert f"path: {corpus.resolve()}" in spec_text  # by absolute path, not read against the run directory
    info = json.loads((exp / "runs" / "t" / "run.json").read_text(encoding="utf-8"))
    assert info["hardware"]["cpu"] and info["hardware"]["cores"] >= 1  # what the figures' footer says it ran on
    recorded = info["dataset"]
    assert recorded["path"] == str(corpus.resolve()) and recorded["bytes"] == corpus.stat().st_size
    assert len(recorded["sha256"]) == 64
    moved = tmp_path / "elsewhere" / "t"
    moved.parent.mkdir()
    shutil.move(str(exp / "runs" / "t"), str(moved))
    shutil.rmtree(exp)  # another machine: neither the spec's folder nor the data
    for args in (("figure", moved, "--kind", "topology"), ("compare", moved, "-o", tmp_path / "cmp"),
                 ("calibrate", "--from", moved, "-o", tmp_path / "cal.json")):
        done = _dtgen(*args, cwd=tmp_path)
        assert done.returncode == 0, (args, done.stderr)
        assert "wrote" in done.stdout


def test_hardware_of_a_cpu_run_names_the_cpu_and_its_cores():
    from opentikz_dt.runner.provenance import hardware

    found = hardware([{"rank": 0, "device": "cpu"}, {"rank": 1, "device": "cpu"}])
    assert found["cpu"] and 1 <= found["cores"] <= found["cores_total"] and "gpus" not in found


@pytest.mark.gpu
def test_hardware_of_a_gpu_run_names_the_gpus_its_ranks_used():
    import torch

    from opentikz_dt.runner.provenance import hardware

    found = hardware([{"rank": 0, "device": "cuda:0"}, {"rank": 1, "device": "cuda:0"}])
    assert found["gpus"] == {"0": torch.cuda.get_device_name(0)}
