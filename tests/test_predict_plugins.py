"""The predict side asks each strategy's predict plugin (opentikz_dt/strategies/<kind>/predict.py)."""

from __future__ import annotations

import dataclasses
import inspect
import types

from opentikz_dt import strategies
from opentikz_dt.predict.calibration import illustrative_calibration
from opentikz_dt.predict.costs import Costs
from opentikz_dt.predict.simulate import simulate
from opentikz_dt.predict.interface import PredictPlugin
from opentikz_dt.predict.plugin import REGISTRY
from opentikz_dt.spec import spec_from_data


def _hooks() -> set[str]:
    """The interface: the fields of the predict side's plugin dataclass."""
    return {f.name for f in dataclasses.fields(PredictPlugin)}


def test_every_strategy_has_a_predict_plugin_that_simulates_it():
    for kind in strategies.kinds():
        assert callable(getattr(REGISTRY.raw(kind), "simulate_steps", None)), kind


def test_the_interface_documents_every_hook():
    """Each field of the interface has a comment: on its line, or the line above it."""
    lines = inspect.getsource(PredictPlugin).splitlines()
    hooks = _hooks()
    assert len(hooks) > 10 and "simulate_steps" in hooks
    at = {name: next(i for i, line in enumerate(lines) if line.strip().startswith(f"{name}:")) for name in hooks}
    missing = sorted(h for h, i in at.items() if "#" not in lines[i] and not lines[i - 1].strip().startswith("#"))
    assert missing == []


def test_a_plugins_public_functions_are_hooks():
    """A misspelt hook would be silently ignored (the default answers instead)."""
    hooks = _hooks()
    for kind in REGISTRY.kinds():
        module = REGISTRY.raw(kind)
        public = {name for name, value in vars(module).items() if not name.startswith("_")
                  and inspect.isfunction(value) and value.__module__ == module.__name__}
        assert public <= hooks, (kind, sorted(public - hooks))


def test_the_simulator_asks_the_registered_plugin():
    single = REGISTRY.raw("single")
    calls = []

    def simulate_steps(sim, steps):
        calls.append(steps)
        single.simulate_steps(sim, steps)

    spec = spec_from_data({"name": "one", "topology": {"workers": {"count": 1}}, "strategy": {"kind": "single"},
                           "training": {"steps": 3}}, name="one")
    REGISTRY.register(types.SimpleNamespace(KIND="single", simulate_steps=simulate_steps,
                                            roles=lambda spec: [("solo", "w1")]))
    try:
        result = simulate(spec, Costs(illustrative_calibration(spec), spec))
    finally:
        REGISTRY.unregister("single")
    assert calls == [3]
    assert result.roles == ["solo"] and len(result.step_time["w1"]) == 3
    assert REGISTRY.get("single").roles(spec) == [("worker", "w1")]  # the default again
