"""The plugin interface is type-checked: mypy checks every strategy plugin module (each
built-in kind's, on every side, and the toy plugin from outside, tests/plugins) against its
side's interface dataclass (opentikz_dt/strategies/interface.py, figures/interface.py,
predict/interface.py, runner/strategies/interface.py), and the strategies and plugins
modules themselves. A hook with the wrong number of parameters, a misspelt required hook
or a constant of the wrong type is an error here."""

from __future__ import annotations

import dataclasses
import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from opentikz_dt import strategies
from opentikz_dt.figures.plugin import REGISTRY as FIGURES
from opentikz_dt.predict.plugin import REGISTRY as PREDICT

ROOT = Path(__file__).resolve().parent.parent
TOY = ROOT / "tests" / "plugins"

# side: (registry, the interface "module:Class", the toy plugin's module)
SIDES = {
    "strategy": (strategies.REGISTRY, "opentikz_dt.strategies.interface:StrategyPlugin", "dtgen_toy.strategy"),
    "figures": (FIGURES, "opentikz_dt.figures.interface:FiguresPlugin", "dtgen_toy.figures"),
    "predict": (PREDICT, "opentikz_dt.predict.interface:PredictPlugin", "dtgen_toy.predict"),
    "runner": (None, "opentikz_dt.runner.strategies.interface:RunnerPlugin", "dtgen_toy.runner"),
}


def _interface(spec: str):
    where, name = spec.split(":")
    return getattr(importlib.import_module(where), name)


def _modules(side: str, registry) -> list[str]:
    if registry is None:  # the runner's registry imports torch: name its modules from the kinds
        names = [f"opentikz_dt.runner.strategies.{kind.replace('-', '_')}" for kind in strategies.kinds()]
    else:
        names = [registry.raw(kind).__name__ for kind in registry.kinds()]
    return names + [SIDES[side][2]]


def _check_source() -> str:
    """One call of the interface's constructor per plugin module, with the module's own
    names for the fields it defines: what the registry does at run time (plugins.bind)."""
    lines = ["from __future__ import annotations"]
    calls = []
    for side, (registry, spec, _) in SIDES.items():
        where, name = spec.split(":")
        lines.append(f"from {where} import {name}")
        fields = [f.name for f in dataclasses.fields(_interface(spec))]
        for i, module_name in enumerate(_modules(side, registry)):
            alias = f"{side}_{i}"
            lines.append(f"import {module_name} as {alias}")
            module = _source_names(module_name)
            given = ", ".join(f"{f}={alias}.{f}" for f in fields if f in module)
            calls.append(f"{name}({given})  # {module_name}")
    return "\n".join(lines + calls) + "\n"


def _source_names(module_name: str) -> set[str]:
    """The top-level names a module defines, read from its source (no import: the runner's
    modules import torch)."""
    import ast

    path = _path_of(module_name)
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.ImportFrom):
            names.update(a.asname or a.name for a in node.names)
    return names


def _path_of(module_name: str) -> Path:
    parts = module_name.split(".")
    if parts[:2] == ["opentikz_dt", "runner"]:
        base, parts = ROOT / "runner", parts[2:]
    elif parts[0] == "opentikz_dt":
        base, parts = ROOT / "opentikz_dt", parts[1:]
    else:
        base = TOY
    path = base.joinpath(*parts)
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def _tree(tmp_path: Path) -> Path:
    """The package as mypy finds it: opentikz_dt/ with runner/ inside as opentikz_dt.runner
    (the wheel's layout; pyproject's package-dir), and the toy plugin beside it."""
    tree = tmp_path / "src"
    package = tree / "opentikz_dt"
    package.mkdir(parents=True)
    for entry in (ROOT / "opentikz_dt").iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    (package / "runner").symlink_to(ROOT / "runner")
    (tree / "dtgen_toy").symlink_to(TOY / "dtgen_toy")
    return tree


def _mypy(tmp_path: Path, check: str) -> subprocess.CompletedProcess:
    tree = _tree(tmp_path)
    (tree / "plugin_check.py").write_text(check)
    # The strategies package and each kind's descriptor module in full; the drawing and
    # simulation modules (figures.py, predict.py) through the interface calls of
    # plugin_check.py only (mypy reads them, their bodies are not checked).
    descriptors = sorted(str(p.relative_to(tree)) for p in (tree / "opentikz_dt" / "strategies").glob("*/strategy.py"))
    targets = ["plugin_check.py", "opentikz_dt/plugins.py", "opentikz_dt/strategies/__init__.py",
               "opentikz_dt/strategies/_base.py", "opentikz_dt/strategies/interface.py", *descriptors,
               "opentikz_dt/figures/interface.py", "opentikz_dt/predict/interface.py",
               "opentikz_dt/runner/strategies/interface.py"]
    env = dict(os.environ, MYPYPATH=str(tree))
    return subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
                           "--cache-dir", str(tmp_path / "cache"), *targets],
                          cwd=tree, capture_output=True, text=True, timeout=900, env=env)


@pytest.mark.slow
def test_every_plugin_module_type_checks_against_its_sides_interface(tmp_path):
    check = _check_source()
    assert check.count("StrategyPlugin(") >= len(strategies.kinds()) + 1  # the built-ins and the toy
    result = _mypy(tmp_path, check)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success" in result.stdout


@pytest.mark.slow
def test_a_hook_with_the_wrong_signature_is_an_error(tmp_path):
    """The check can fail: a figures hook taking one parameter too few, a required hook
    missing, a constant of the wrong type."""
    check = _check_source() + "\n".join([
        "def layout(spec): ...",
        "def spacing_needs(sizes): ...",
        "def expected_panels(spec, cost): ...",
        "FiguresPlugin(KIND='bad', layout=layout, spacing_needs=spacing_needs, expected_panels=expected_panels)",
        "PredictPlugin(KIND='bad')",
        "FiguresPlugin(KIND='bad', layout=print, spacing_needs=print, WINDOW_STEPS='3')",
    ]) + "\n"
    result = _mypy(tmp_path, check)
    assert result.returncode != 0
    out = result.stdout
    assert 'Argument "layout" to "FiguresPlugin" has incompatible type' in out, out
    assert 'Missing named argument "simulate_steps" for "PredictPlugin"' in out, out
    assert 'Argument "WINDOW_STEPS" to "FiguresPlugin" has incompatible type "str"' in out, out
    assert 'Argument "expected_panels" to "FiguresPlugin" has incompatible type' in out, out
