"""A python model on the datasheet path: the runner builds it on the CPU and counts one
trial step (forward with the loss, backward) with torch.utils.flop_counter; `dtgen predict`
of a spec with `hardware:` then costs it from those FLOPs (examples/custom-model)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("torch")

from opentikz_dt.cli import main  # noqa: E402
from opentikz_dt.hardware import DEVICES, LINKS  # noqa: E402
from opentikz_dt.predict.cluster import layout_of, step_seconds  # noqa: E402
from opentikz_dt.predict.datasheet import Cluster, Counted  # noqa: E402
from opentikz_dt.runner.describe import count_python_model  # noqa: E402
from opentikz_dt.spec import load_spec  # noqa: E402

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "custom-model"
# Linear 16->64, LayerNorm, GELU, Linear 64->64, GELU, Linear 64->4: FlopCounterMode counts the
# matmuls only. Forward 2 x (16·64 + 64·64 + 64·4); backward: every weight's gradient, and the
# input's gradient of the two later layers (the first layer's input needs none).
FORWARD = 2 * (16 * 64 + 64 * 64 + 64 * 4)
BACKWARD = 2 * (16 * 64 + 64 * 64 + 64 * 4) + 2 * (64 * 64 + 64 * 4)


def _spec(tmp_path, kind: str = "allreduce", workers: int = 2) -> Path:
    shutil.copy(EXAMPLE / "model.py", tmp_path / "model.py")
    text = (EXAMPLE / "spec.yaml").read_text()
    text = text.replace("  servers: {count: 2}\n", "").replace("strategy: {kind: parameter-server, sync: sync}",
                                                                 f"strategy: {{kind: {kind}}}")
    text = text.replace("workers: {count: 2}", f"workers: {{count: {workers}}}")
    path = tmp_path / "spec.yaml"
    path.write_text(text + "hardware: {device: h100-sxm}\n")
    return path


def test_one_trial_step_is_counted_forward_and_backward_per_sample(tmp_path):
    path = _spec(tmp_path)
    step = count_python_model(load_spec(path), path)["step"]
    assert (step["forward"], step["backward"], step["samples"]) == (FORWARD, BACKWARD, 1)


def test_predict_costs_the_python_model_from_its_counted_step(tmp_path):
    path = _spec(tmp_path, "single", 1)  # no all-reduce to hide the compute behind
    result = CliRunner().invoke(main, ["predict", str(path), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    predicted = json.loads((tmp_path / "out" / "run.json").read_text())["predicted"]
    assert predicted["source"] == "datasheet" and "torch.utils.flop_counter" in predicted["model_flops"]
    spec = load_spec(path)
    params = (16 * 64 + 64) + 2 * 64 + (64 * 64 + 64) + (64 * 4 + 4)
    model = Counted("python", FORWARD, params, BACKWARD)
    cluster = Cluster(DEVICES["h100-sxm"], 8, LINKS["nvlink4-h100"], LINKS["ib-ndr"], "fp32")
    expected = step_seconds(model, layout_of(spec), cluster, "none")
    assert predicted["step_s"] == pytest.approx(expected, rel=1e-6)
    # the counted backward, not twice the forward: the step moves by the difference
    doubled = step_seconds(Counted("python", FORWARD, params), layout_of(spec), cluster, "none")
    assert doubled - expected == pytest.approx((2 * FORWARD - BACKWARD) * 64 / cluster.matmul_rate, rel=1e-6)


def test_the_expected_timeline_of_a_python_model_is_costed_from_its_counted_step(tmp_path):
    path = _spec(tmp_path)
    result = CliRunner().invoke(main, ["figure", str(path), "-o", str(tmp_path / "fig"), "--kind", "timeline"])
    assert result.exit_code == 0, result.output
    assert "illustrative" not in result.output
    tex = (tmp_path / "fig" / "custom-model-timeline.tex").read_text()
    assert "expected on 2 H100 SXM, datasheet costs" in tex and "Each of 2 ranks" in tex
