"""The supported torch range (runner/compat.py): a torch outside it is refused in one line
before anything is read or spawned; within it, options newer than the oldest release are
feature-detected. `make test-oldest-torch` runs this file and the runner's core tests on
the oldest supported release."""

import dataclasses
import inspect
import json
import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from click.testing import CliRunner  # noqa: E402

from opentikz_dt.cli import main  # noqa: E402
from opentikz_dt.errors import ToolMissingError  # noqa: E402
from opentikz_dt.runner import compat  # noqa: E402
from opentikz_dt.runner.testing import run_small, small_spec_data, write_spec  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
REFUSAL = ("dtgen: error: torch {v} is installed, but dtgen supports torch>=2.10,<2.16 (2.10 to 2.15): "
           "install a supported release (pip install 'torch>=2.10,<2.16')\n")


@pytest.mark.parametrize("version, ok", [
    ("2.9.1", False), ("1.13.1+cu117", False), ("2.10.0", True), ("2.11.0+cu130", True),
    ("2.13.0+cpu", True), ("2.15.2", True), ("2.16.0", False), ("2.16.0a0+git1234abc", False),
    ("3.0.0", False), ("not a version", False),
])
def test_versions_outside_the_range_are_refused(version, ok):
    if ok:
        compat.check_torch(version)
    else:
        with pytest.raises(ToolMissingError) as err:
            compat.check_torch(version)
        assert str(err.value) == REFUSAL[len("dtgen: error: "):-1].format(v=version)


def test_installed_torch_is_in_range_and_pyproject_says_the_same_range():
    compat.check_torch()  # the torch this suite runs on (2.13 here, 2.10 in make test-oldest-torch)
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    low, high = re.search(r'"torch>=(\d+\.\d+),<(\d+\.\d+)"', pyproject).groups()
    assert (compat.torch_release(low), compat.torch_release(high)) == compat.TORCH_RANGE
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert f"torch {low} to 2.{compat.TORCH_RANGE[1][1] - 1}" in readme


@pytest.mark.parametrize("command", ["run", "calibrate"])
def test_cli_refuses_an_unsupported_torch_before_anything_starts(command, tmp_path, monkeypatch):
    from opentikz_dt.runner import launch, preflight

    monkeypatch.setattr(torch, "__version__", "2.9.1+cu128")

    def spawned(*args, **kwargs):
        raise AssertionError("a trial forward pass ran despite the refusal")

    monkeypatch.setattr(preflight, "preflight", spawned)
    monkeypatch.setattr(launch, "preflight", spawned)
    spec = write_spec(small_spec_data("single"), tmp_path)
    out = tmp_path / "out"
    args = [command, str(spec), "--out" if command == "run" else "-o", str(out)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 4, result.output
    assert result.output == REFUSAL.format(v="2.9.1+cu128")
    assert not out.exists()


def test_accepted_keeps_only_the_keywords_a_callable_takes():
    def old(a, b=1):
        pass

    def new(a, b=1, shutdown_timeout=None):
        pass

    def open_ended(a, **options):
        pass

    assert compat.accepted(old, b=2, shutdown_timeout=3) == {"b": 2}
    assert compat.accepted(new, b=2, shutdown_timeout=3) == {"b": 2, "shutdown_timeout": 3}
    assert compat.accepted(open_ended, shutdown_timeout=3) == {"shutdown_timeout": 3}


def _launch_config_of_2_11():
    """torch's LaunchConfig as torch 2.10/2.11 have it: no `shutdown_timeout` keyword."""
    from torch.distributed.launcher.api import LaunchConfig

    fields = [f for f in dataclasses.fields(LaunchConfig) if f.name != "shutdown_timeout"]
    signature = inspect.signature(LaunchConfig)
    old = signature.replace(parameters=[p for p in signature.parameters.values() if p.name != "shutdown_timeout"])

    class OldLaunchConfig(LaunchConfig):
        __signature__ = old

        def __init__(self, *args, **kwargs):
            if "shutdown_timeout" in kwargs:  # what torch 2.11 raised on every `dtgen run` (issue 19)
                raise TypeError("LaunchConfig.__init__() got an unexpected keyword argument 'shutdown_timeout'")
            super().__init__(*args, **kwargs)

    assert len(fields) == len(old.parameters)
    return OldLaunchConfig


@pytest.mark.dist
def test_a_run_starts_with_the_launch_config_of_torch_2_11(tmp_path, monkeypatch):
    from torch.distributed.launcher import api

    monkeypatch.setattr(api, "LaunchConfig", _launch_config_of_2_11())
    result = run_small(small_spec_data("single", training={"steps": 2}), tmp_path, cache=False)
    assert result.run["status"] == "ok" and result.metrics["steps_done"] == 2
    # run.json says what the run computed on (a fitted calibration reads it)
    from opentikz_dt.predict.calibration import cpu_device

    assert result.run["device_info"] == cpu_device()
    assert json.loads((result.run_dir / "run.json").read_text())["device_info"]["kind"] == "cpu"
