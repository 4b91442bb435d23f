"""Strategies are plugins: outside the plugin modules, no code switches on a strategy.

Every side asks its registry (opentikz_dt/plugins.py) for the plugin of a kind and calls
it. A comparison against a strategy kind, algorithm, sync mode or pipeline schedule name
anywhere else means a strategy leaked into shared code: adding a strategy would then mean
editing that code too. Plugin modules may ask about their own algorithms.
"""

from __future__ import annotations

import ast
import json

from conftest import REPO

from opentikz_dt.strategies import all_strategies

# The plugin packages: a strategy's folder (opentikz_dt/strategies/<kind>/), the strategies
# package itself (descriptor type, interface) and the runner's strategy modules.
PLUGIN_PACKAGES = ("opentikz_dt/strategies", "runner/strategies")


def _in_plugins(rel: str) -> bool:
    folder = rel.rsplit("/", 1)[0]
    return folder in PLUGIN_PACKAGES or folder.rsplit("/", 1)[0] == "opentikz_dt/strategies"

# (file, the compared name): comparisons that are not about a strategy, each with its reason.
ALLOWED: dict[tuple[str, str], str] = {
    ("opentikz_dt/measured/profile_figures.py", "allreduce"):
        "the timeline's box kind for any traced collective (its legend phase), not the spec's strategy",
    ("opentikz_dt/predict/nccl.py", "ring"): "NCCL's own algorithm names, passed in by the plugins",
    ("opentikz_dt/predict/nccl.py", "tree"): "NCCL's own algorithm names, passed in by the plugins",
    ("opentikz_dt/predict/nccl.py", "hierarchical"): "NCCL's own algorithm names, passed in by the plugins",
}


def strategy_names() -> set[str]:
    names = set()
    for s in all_strategies():
        names |= {s.kind, *s.algorithms, *s.sync_modes}
    schema = json.loads((REPO / "schemas" / "spec.schema.json").read_text())
    names |= set(schema["properties"]["strategy"]["properties"]["schedule"]["enum"])
    return names


def _strings(node) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for element in node.elts for s in _strings(element)]
    return []


def comparisons(path, names) -> list[tuple[int, str]]:
    """(line, name) of every ==, !=, in, not in or match case against one of `names`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Compare):
            values = _strings(node.left) + [s for c in node.comparators for s in _strings(c)]
        elif isinstance(node, ast.MatchValue):
            values = _strings(node.value)
        else:
            continue
        found += [(node.lineno, v) for v in values if v in names]
    return found


def leaks(root=REPO) -> list[str]:
    names = strategy_names()
    out = []
    for top in ("opentikz_dt", "runner"):
        for path in sorted((root / top).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if _in_plugins(rel):
                continue
            out += [f"{rel}:{line}: compares against {name!r}" for line, name in comparisons(path, names)
                    if (rel, name) not in ALLOWED]
    return out


def test_no_code_outside_the_plugins_switches_on_a_strategy():
    found = leaks()
    assert not found, "ask the strategy's plugin instead (CONTRIBUTING.md, 'Add a strategy'):\n" + "\n".join(found)


def test_the_check_finds_a_planted_switch(tmp_path):
    # The check itself can fail: a shared module that switches on a kind is reported.
    planted = tmp_path / "opentikz_dt" / "figures" / "planted.py"
    planted.parent.mkdir(parents=True)
    planted.write_text('def f(spec):\n    return spec.strategy.kind == "pipeline" or spec.strategy.algorithm in ("ring",)\n')
    (tmp_path / "runner").mkdir()
    in_a_strategy = tmp_path / "opentikz_dt" / "strategies" / "pipeline" / "figures.py"
    in_a_strategy.parent.mkdir(parents=True)
    in_a_strategy.write_text(planted.read_text())  # a plugin module may compare its own
    assert leaks(tmp_path) == ["opentikz_dt/figures/planted.py:2: compares against 'pipeline'",
                               "opentikz_dt/figures/planted.py:2: compares against 'ring'"]


def test_a_strategy_is_one_folder_and_one_runner_module():
    """Every built-in kind: opentikz_dt/strategies/<kind>/ with a module per side that does
    not import torch, and runner/strategies/<kind>.py; nothing else in those folders. The
    toy plugin from outside (tests/plugins/dtgen_toy) has the same modules, its runner's
    beside them."""
    from opentikz_dt.plugins import module_name
    from opentikz_dt.strategies import outside_kinds

    sides = {"__init__.py", "strategy.py", "figures.py", "predict.py"}
    folders = {p.name for p in (REPO / "opentikz_dt" / "strategies").iterdir()
               if p.is_dir() and p.name != "__pycache__"}
    builtin = {module_name(k) for k in (s.kind for s in all_strategies()) if k not in outside_kinds()}
    assert folders == builtin
    for name in sorted(folders):
        files = {p.name for p in (REPO / "opentikz_dt" / "strategies" / name).glob("*.py")}
        assert files == sides, name
        assert (REPO / "runner" / "strategies" / f"{name}.py").is_file(), name
    toy = {p.name for p in (REPO / "tests" / "plugins" / "dtgen_toy").glob("*.py")}
    assert toy == sides | {"runner.py"}


# The runner strategies that keep a step loop of their own instead of runner/loop.py's
# `train_steps`, each with its reason. Every other one runs the shared loop with its hooks.
OWN_LOOP: dict[str, str] = {
    "parameter_server": "a worker fetches weights and pushes gradients without an update; a server trains on "
                        "no batch (it waits for pushes, updates, sends weights); async hands out tickets",
    "central_storage": "a worker fetches weights and pushes gradients without an update; the storage rank "
                       "trains on no batch (it broadcasts weights, sums the pushes, updates)",
}
LOOP = "for step in range"


def step_loops(root=REPO) -> dict[str, list[int]]:
    """{runner strategy module: the lines of its `for step in range` loops}."""
    found: dict[str, list[int]] = {}
    for path in sorted((root / "runner" / "strategies").glob("*.py")):
        lines = [i for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if LOOP in line]
        if lines:
            found[path.stem] = lines
    return found


def loop_problems(root=REPO) -> list[str]:
    found = step_loops(root)
    problems = [f"runner/strategies/{name}.py:{line}: a step loop of its own: use runner/loop.py's train_steps, "
                "or add the strategy to OWN_LOOP with the reason its step differs"
                for name in sorted(set(found) - set(OWN_LOOP)) for line in found[name]]
    problems += [f"OWN_LOOP: {name} has no step loop of its own any more: remove it"
                 for name in sorted(set(OWN_LOOP) - set(found))]
    return problems


def test_only_the_listed_strategies_own_their_step_loop():
    assert loop_problems() == []
    for name in OWN_LOOP:  # and the module says why, where its loop is
        assert "Its own loop, not runner/loop.py's: " in (REPO / "runner" / "strategies" / f"{name}.py").read_text()


def test_the_loop_check_finds_a_planted_loop(tmp_path):
    folder = tmp_path / "runner" / "strategies"
    folder.mkdir(parents=True)
    (folder / "planted.py").write_text("def train(ctx):\n    pass\n    for step in range(ctx.start_step, ctx.steps):\n"
                                       "        pass\n")
    (folder / "parameter_server.py").write_text(f"# {LOOP}\n")
    assert loop_problems(tmp_path) == [
        "runner/strategies/planted.py:3: a step loop of its own: use runner/loop.py's train_steps, "
        "or add the strategy to OWN_LOOP with the reason its step differs",
        "OWN_LOOP: central_storage has no step loop of its own any more: remove it"]
