"""Tensor parallelism, runner side, before anything is spawned: a python model's plan (the
spec's strategy.plan, or the model's own tp_plan) is resolved against its modules and
refused in one line where it cannot run. Numerics and the traced collectives:
tests/test_runner_numerics.py (-k tensor); the built-in models' sizes: tests/cases/bad/tensor-*."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

torch = pytest.importorskip("torch")

from opentikz_dt.errors import InputError, RunError  # noqa: E402
from opentikz_dt.runner.launch import launch_run  # noqa: E402
from opentikz_dt.spec import spec_from_data  # noqa: E402

CUSTOM = Path(__file__).resolve().parent.parent / "examples" / "custom-model"


def _write(tmp_path, strategy: dict, workers: int = 2, extra_py: str = "", entry: str = "model:build") -> Path:
    shutil.copy(CUSTOM / "model.py", tmp_path / "model.py")
    if extra_py:
        with open(tmp_path / "model.py", "a", encoding="utf-8") as f:
            f.write("\n\n" + extra_py + "\n")
    data = {"strategy": strategy, "topology": {"workers": {"count": workers}},
            "training": {"model": {"kind": "python", "entry": entry},
                         "dataset": {"kind": "python", "entry": "model:blobs"}, "batch_size": 16, "steps": 2},
            "runtime": {"device": "cpu", "timeout_s": 20}}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


# examples/custom-model's build(): Sequential(Linear 16->64, LayerNorm, GELU, Linear 64->64, GELU, Linear 64->4)
BAD = {
    "no-plan": ({"kind": "tensor"}, 2,
                "{spec}:2:9: strategy.kind: tensor parallelism needs a plan for this python model: add strategy.plan, "
                "e.g. {{fc1: colwise, fc2: rowwise}} (module names from model.named_modules()), or give the model a "
                "tp_plan attribute"),
    "missing-module": ({"kind": "tensor", "plan": {"3": "colwise", "fc5": "rowwise"}}, 2,
                       "{spec}:4:5: strategy.plan: the model has no module 'fc5'; closest: 5"),
    "not-linear": ({"kind": "tensor", "plan": {"1": "colwise"}}, 2,
                   "{spec}:4:5: strategy.plan: 1 is a LayerNorm; colwise splits Linear and Embedding modules only"),
    "indivisible": ({"kind": "tensor", "plan": {"3": "colwise", "5": "rowwise"}}, 3,
                    "{spec}:4:5: strategy.plan: 3 (colwise) has 64 output features, which do not split over 3 "
                    "workers (counts that work: 2, 4, 8)"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_plan_that_cannot_run_is_one_line_before_anything_is_spawned(tmp_path, case):
    strategy, workers, expected = BAD[case]
    spec = _write(tmp_path, strategy, workers)
    out = tmp_path / "run"
    with pytest.raises(RunError) as caught:
        launch_run(spec, out=out, progress=False, echo=lambda line: None)
    message = str(caught.value)
    assert message == expected.format(spec=spec), message
    assert not out.exists()


def test_the_models_own_tp_plan_is_used_when_the_spec_has_none():
    from torch import nn

    from opentikz_dt.runner.strategies.tensor import plan_of

    class Net(nn.Module):
        tp_plan = {"layers.*.up": "colwise", "layers.*.down": "rowwise", "head": "replicate"}

        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(nn.ModuleDict({"up": nn.Linear(4, 8), "down": nn.Linear(8, 4)})
                                        for _ in range(2))
            self.head = nn.Linear(4, 2)

    spec = spec_from_data({"strategy": {"kind": "tensor"},
                           "training": {"model": {"kind": "python", "entry": "x:y"},
                                        "dataset": {"shape": [4], "classes": 2}}})
    plan, source = plan_of(spec, Net())
    assert plan == {"layers.0.up": "colwise", "layers.1.up": "colwise", "layers.0.down": "rowwise",
                    "layers.1.down": "rowwise"}
    assert source.endswith("the model's tp_plan")


def test_builtin_plans_pair_colwise_with_rowwise():
    from opentikz_dt.runner.model import MLP
    from opentikz_dt.runner.strategies.tensor import builtin_plan

    assert builtin_plan(MLP([8, 16, 16, 16, 4])) == {"layers.0": "colwise", "layers.1": "rowwise",
                                                     "layers.2": "colwise", "layers.3": "rowwise"}
    assert builtin_plan(MLP([8, 16, 16, 4])) == {"layers.0": "colwise", "layers.1": "rowwise"}  # the last stays whole


@pytest.mark.dist
def test_a_restart_resumes_each_workers_slices_and_optimizer_state(tmp_path):
    """Each rank checkpoints its own slices (and its Adam moments of them); a crash at step
    6 resumes after step 3 and ends where an uninterrupted run does (measured: exactly)."""
    from opentikz_dt.runner.testing import run_small, small_spec_data

    training = {"steps": 10, "optimizer": {"kind": "adamw", "lr": 0.01}}
    data = small_spec_data("tensor", topology={"workers": {"count": 2}}, training=training,
                           runtime={"restarts": 1, "checkpoint_every": 4,
                                    "fault": {"rank": 1, "at_step": 6, "kind": "crash"}})
    result = run_small(data, tmp_path, cache=False)
    assert result.run["attempts"] == 2 and result.metrics["steps_done"] == 10
    assert "resuming from the checkpoint after step 3" in (result.run_dir / "logs" / "rank1.log").read_text()
    clean = run_small(small_spec_data("tensor", topology={"workers": {"count": 2}}, training=training), tmp_path)
    got, want = torch.load(result.run_dir / "model.pt"), torch.load(clean.run_dir / "model.pt")
    assert all(torch.allclose(got[k], want[k], atol=1e-6) for k in want)


SOFTMAXED = """def softmaxed():
    return nn.Sequential(nn.Linear(16, 64), nn.Softmax(dim=-1), nn.Linear(64, 4))"""


@pytest.mark.parametrize("plan, entry, expected", [
    # a Softmax over each worker's slice of the features is not the Softmax over all of them
    ({"0": "colwise", "2": "rowwise"}, "model:softmaxed",
     "this plan changes what the model computes: on 2 trial samples (before spawning) its output is 0.2 (relative) off"),
    ({"5": "colwise"}, "model:build", "with this plan the model's output is [4, 2], not [2, 4]"),
], ids=["softmax-between", "colwise-last"])
def test_a_plan_that_changes_the_models_output_is_refused_before_spawning(tmp_path, plan, entry, expected):
    # The preflight tries the split on two samples in this process (the runner plugin's
    # check_trial); the ranks' own check on the first batch is the second line of defence.
    spec = _write(tmp_path, {"kind": "tensor", "plan": plan}, extra_py=SOFTMAXED, entry=entry)
    with pytest.raises(InputError) as caught:
        launch_run(spec, out=tmp_path / "run", progress=False, echo=lambda line: None)
    message = str(caught.value).splitlines()[0]
    assert "strategy.plan: " + expected in message, message
    assert not (tmp_path / "run" / "logs").exists()  # no rank was started
