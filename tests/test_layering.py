"""The figure and validation side must not import torch (fast start, works without it)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

CODE = """
import importlib, pkgutil, sys
import opentikz_dt
for info in pkgutil.walk_packages(opentikz_dt.__path__, "opentikz_dt."):
    if info.name.startswith("opentikz_dt.runner"):
        continue
    importlib.import_module(info.name)
from opentikz_dt.cli import main  # the CLI registers every command, run included
print(sorted(main.commands))
print("torch" in sys.modules)
"""


def test_non_runner_modules_do_not_import_torch():
    result = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    commands, torch_loaded = result.stdout.splitlines()
    assert "run" in commands and "figure" in commands
    assert torch_loaded == "False"


# --- import structure: no circles, the layers in pyproject.toml -----------------------------

ROOT = Path(__file__).resolve().parent.parent
# The one distribution ships two source folders: opentikz_dt/ and runner/ (as opentikz_dt.runner).
SOURCES = {"opentikz_dt": ROOT / "opentikz_dt", "opentikz_dt.runner": ROOT / "runner"}


def _module_files() -> dict[str, Path]:
    modules = {}
    for package, folder in SOURCES.items():
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join([package, *parts])] = path
    return modules


def _imports(name: str, path: Path, modules: dict) -> set[str]:
    """Every dtgen module `name` imports, at the top or inside a function (lazy imports count)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            base = base[:len(base) - node.level + 1] if node.level else []
            stem = ".".join(base + ([node.module] if node.module else []))
            targets = [f"{stem}.{alias.name}" for alias in node.names] + [stem]
        else:
            continue
        for target in targets:
            while target and target not in modules:  # `from .x import name`: the module is .x
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, stack, on_stack, circles, counter = {}, {}, [], set(), [], [0]
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
    return circles


def test_no_import_circles_among_the_packages_modules():
    """opentikz_dt and its runner, lazy imports included: a circle means a lower layer asks a
    higher one (move the asking code up, as contract_check sits above contract)."""
    modules = _module_files()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert sum(len(targets) for targets in graph.values()) > 300  # the walk found the imports
    assert _circles(graph) == []


def test_a_circle_is_found():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_layers_in_pyproject_hold():
    """import-linter's contracts (pyproject.toml [tool.importlinter]): the layers, a
    strategy folder's modules at their layers, and torch only in the runner."""
    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run([str(lint), "--no-cache"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "4 kept, 0 broken" in result.stdout
