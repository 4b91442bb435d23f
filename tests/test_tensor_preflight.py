"""A python model's tensor plan is tried before any rank is spawned (runner/preflight.py asks
the runner plugin's check_trial): a plan that changes what the model computes is refused
in one process, on the trial samples."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from opentikz_dt.errors import InputError  # noqa: E402
from opentikz_dt.runner.strategies import load_strategy  # noqa: E402
from opentikz_dt.spec import spec_from_data  # noqa: E402


def _spec(plan: dict, workers: int = 2):
    return spec_from_data({"strategy": {"kind": "tensor", "plan": plan}, "topology": {"workers": {"count": workers}},
                           "training": {"model": {"kind": "python", "entry": "model:build"}, "batch_size": 8,
                                        "dataset": {"kind": "synthetic", "shape": [16], "classes": 4}}})


def _sequential():  # examples/custom-model/model.py's build()
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 64), nn.LayerNorm(64), nn.GELU(), nn.Linear(64, 64), nn.GELU(),
                         nn.Linear(64, 4))


def _check(model, plan, workers=2):
    x = torch.randn(2, 16)
    load_strategy("tensor").check_trial(_spec(plan, workers), model, x, "model")


@pytest.mark.parametrize("workers", [2, 4])
def test_a_consistent_plan_passes(workers):
    _check(_sequential(), {"3": "colwise", "5": "rowwise"}, workers)


@pytest.mark.parametrize("plan, says", [
    ({"0": "colwise", "3": "rowwise"}, "cannot run split"),  # the LayerNorm gets a slice
    ({"3": "colwise"}, "cannot run split"),  # a slice goes on to a whole layer
    ({"5": "colwise"}, "output is \\[4, 2\\], not \\[2, 4\\]"),  # the slice reaches the loss
])
def test_a_plan_that_breaks_the_model_is_refused_before_spawning(plan, says):
    with pytest.raises(InputError, match=says):
        _check(_sequential(), plan)


def test_a_plan_that_changes_the_values_is_refused_before_spawning():
    torch.manual_seed(0)
    softmax = nn.Sequential(nn.Linear(16, 64), nn.Softmax(dim=-1), nn.Linear(64, 4))  # needs whole rows
    with pytest.raises(InputError, match="changes what the model computes: on 2 trial samples"):
        _check(softmax, {"0": "colwise", "2": "rowwise"})


def test_the_preflight_asks_the_strategy_and_others_check_nothing():
    from opentikz_dt.runner import preflight

    assert "check_trial" in preflight.preflight.__code__.co_names
    load_strategy("allreduce").check_trial(_spec({"5": "colwise"}), _sequential(), torch.randn(2, 16),
                                           "model")  # the default checks nothing
