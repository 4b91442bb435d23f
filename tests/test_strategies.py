"""Every strategy descriptor (opentikz_dt/strategies.py) agrees with every side of dtgen:
schema, contract, rules, starter, figures, measured figures and runner. A strategy added
to one side and forgotten on another fails here, naming the side."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import yaml

from opentikz_dt.errors import SpecError
from opentikz_dt.figures.names import BOX_KINDS
from opentikz_dt.predict.expected import illustrative_timeline as expected_timeline
from opentikz_dt.figures.spacing import Sizes, effective_spacing
from opentikz_dt.figures.plugin import REGISTRY as FIGURES
from opentikz_dt.figures.topology import build_layout
from opentikz_dt.measured import compare
from opentikz_dt.spec import load_spec, spec_from_data
from opentikz_dt.starter import render_starter
from opentikz_dt.strategies import COMMON_PHASES, KINDS, STRATEGIES, plugin

REPO = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((REPO / "schemas" / "spec.schema.json").read_text())["properties"]["strategy"]["properties"]
RUNNER = REPO / "runner"
EVERY = [pytest.param(s, id=s.kind) for s in STRATEGIES]


def _spec(s, **strategy):
    """A valid spec of descriptor `s` at its defaults (hierarchical all-reduce needs 2 hosts)."""
    topology = {"hosts": 2, "workers": {"count": 4}} if strategy.get("algorithm") == "hierarchical" else {}
    return spec_from_data({"strategy": {"kind": s.kind, **strategy}, "topology": topology})


def test_schema_and_contract_list_exactly_the_registered_kinds():
    assert tuple(SCHEMA["kind"]["enum"]) == KINDS
    assert set(SCHEMA["sync"]["enum"]) == {mode for s in STRATEGIES for mode in s.sync_modes}
    assert set(SCHEMA["algorithm"]["enum"]) == {a for s in STRATEGIES for a in s.algorithms}
    assert {option for s in STRATEGIES for option in s.options} <= set(SCHEMA)
    lists = []

    def walk(node):
        if isinstance(node, dict):
            for name, value in node.items():
                if name != "data_parallel":  # set-mesh's: the data-parallel methods, kinds among them
                    walk(value)
        elif isinstance(node, list):
            if "parameter-server" in node:
                lists.append(node)
            for value in node:
                walk(value)

    for contract in ("meta.json", "contract.exec.json"):  # the contract's prose and executable halves
        if (REPO / "schemas" / contract).is_file():
            walk(json.loads((REPO / "schemas" / contract).read_text()))
    assert lists and all(tuple(found) == KINDS for found in lists), lists


@pytest.mark.parametrize("s", EVERY)
def test_rules_follow_the_descriptor(s):
    assert _spec(s).topology.workers.count == s.default_workers
    assert _spec(s).topology.servers.count == s.servers[0]
    if s.workers[0] > 1:
        with pytest.raises(SpecError, match=rf"{s.kind} needs at least {s.workers[0]} workers"):
            spec_from_data({"strategy": {"kind": s.kind}, "topology": {"workers": {"count": s.workers[0] - 1}}})
    for mode in SCHEMA["sync"]["enum"]:
        data = {"strategy": {"kind": s.kind, "sync": mode}}
        if mode in s.sync_modes:
            spec_from_data(data)
        else:
            with pytest.raises(SpecError, match="strategy.sync"):
                spec_from_data(data)
    for algorithm in set(SCHEMA["algorithm"]["enum"]) - set(s.algorithms):
        with pytest.raises(SpecError, match="strategy.algorithm"):
            spec_from_data({"strategy": {"kind": s.kind, "algorithm": algorithm}})
    spec = _spec(s)
    global_batch = spec.training.batch_size * plugin(s.kind).data_parallel_width(spec)
    short = {"strategy": {"kind": s.kind}, "training": {"dataset": {"samples": global_batch - 1}}}
    with pytest.raises(SpecError, match=rf"fewer than one global batch \({spec.training.batch_size} x "):
        spec_from_data(short)
    low, high = s.servers
    if high is not None:
        with pytest.raises(SpecError, match="topology.servers.count"):
            spec_from_data({"strategy": {"kind": s.kind}, "topology": {"servers": {"count": high + 1}}})


# A value of each strategy key a plugin reads (spec.strategy.options), to write into specs
# of the kinds that do not read it.
OWN_KEYS = {"reshard_after_forward": True, "units": ["blocks.0"]}


@pytest.mark.parametrize("s", EVERY)
def test_a_key_of_another_kind_is_refused_naming_it(s):
    """Another kind's strategy key would be accepted and ignored: refused in one line."""
    for key, value in OWN_KEYS.items():
        data = {"strategy": {"kind": s.kind, key: value}}
        if key in s.options:
            continue
        with pytest.raises(SpecError, match=rf"strategy\.{key}: {key} applies to kind: fsdp only, not '{s.kind}'"):
            spec_from_data(data)


@pytest.mark.parametrize("s", EVERY)
def test_starter_spec_exists_and_loads(s, tmp_path):
    path = tmp_path / "starter.yaml"
    path.write_text(render_starter(s.kind), encoding="utf-8")
    assert load_spec(path).strategy.kind == s.kind


# A figures plugin (opentikz_dt/strategies/<kind>/figures.py) must answer these itself: no default exists.
FIGURES_REQUIRED = ("layout", "spacing_needs")


def test_every_kind_has_a_figures_plugin_that_draws_it():
    assert set(FIGURES.kinds()) == set(KINDS)
    for kind in KINDS:
        module = FIGURES.raw(kind)
        missing = [hook for hook in FIGURES_REQUIRED if not callable(getattr(module, hook, None))]
        assert not missing, f"figures plugin of {kind} lacks {missing}"


@pytest.mark.parametrize("s", EVERY)
def test_every_algorithm_has_its_drawer_and_spacing(s):
    # Each algorithm's drawer (the descriptor's) is laid out at gaps its own spacing rule gives;
    # two algorithms with different drawers must not share one layout.
    drawn = {}
    for algorithm in s.algorithms:
        spec = _spec(s, **({"algorithm": algorithm} if "algorithm" in s.options else {}))
        plugin = FIGURES.get(s.kind)
        colsep, rowsep = plugin.spacing_needs(Sizes(spec))
        assert colsep > 0 and rowsep > 0
        layout = plugin.layout(spec, effective_spacing(spec, plugin.spacing_needs))
        drawn.setdefault(s.drawer(algorithm), set()).add(tuple(sorted(n.name for n in layout.nodes)))
    assert len(drawn) == len({s.drawer(a) for a in s.algorithms})
    layouts = [names for found in drawn.values() for names in found]
    assert len(set(layouts)) == len(drawn), "algorithms with different drawers drew the same layout"


@pytest.mark.parametrize("s", EVERY)
def test_figures_draw_every_kind_and_algorithm(s):
    for algorithm in s.algorithms:
        spec = _spec(s, **({"algorithm": algorithm} if "algorithm" in s.options else {}))
        assert build_layout(spec).nodes
        timeline = expected_timeline(spec)
        kinds = {box.kind for panel in timeline.panels for lane in panel.lanes for box in lane.boxes}
        assert kinds and kinds <= set(BOX_KINDS), kinds - set(BOX_KINDS)


def _string_literals(path: Path, seen: set) -> set:
    """String constants in a runner module and in the runner modules it imports relatively."""
    if path in seen or not path.is_file():
        return set()
    seen.add(path)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level in (1, 2):  # a sibling, or the runner's (runner/loop.py)
            folder = path.parent if node.level == 1 else path.parent.parent
            names = [node.module] if node.module else [alias.name for alias in node.names]
            for name in names:
                found |= _string_literals(folder / f"{name.replace('.', '/')}.py", seen)
    return found


@pytest.mark.parametrize("s", EVERY)
def test_runner_module_exists_and_records_its_phases(s):
    from opentikz_dt.plugins import module_name

    module = RUNNER / "strategies" / f"{module_name(s.kind)}.py"
    assert module.is_file(), f"no runner module for {s.kind}: {module}"
    functions = {n.name for n in ast.parse(module.read_text()).body if isinstance(n, ast.FunctionDef)}
    assert {"roles", "train"} <= functions
    assert set(s.phases) <= set(BOX_KINDS), "the timeline has no style for a phase"
    assert set(s.phases) <= _string_literals(module, set()), "the runner never names a phase it is said to record"


def test_common_phases_are_recorded_by_the_rank_context():
    assert set(COMMON_PHASES) <= _string_literals(RUNNER / "context.py", set()) & set(BOX_KINDS)


def test_runner_serves_every_kind():
    # Read, not imported (the runner's modules import torch): the module named after the
    # kind declares that kind, as the registry (opentikz_dt/plugins.py) looks it up.
    from opentikz_dt.plugins import module_name

    for kind in KINDS:
        module = RUNNER / "strategies" / f"{module_name(kind)}.py"
        assigned = {n.targets[0].id: n.value.value for n in ast.parse(module.read_text()).body
                    if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)}
        assert assigned.get("KIND") == kind, module


@pytest.mark.parametrize("s", EVERY)
def test_measured_comparison_names_every_kind(s):
    # table_name defaults to the bare kind, so a built-in plugin that forgot it would pass
    # unnoticed at run time: each names its strategy itself.
    assert callable(getattr(FIGURES.raw(s.kind), "table_name", None)), f"figures plugin of {s.kind} has no table_name"
    assert compare.strategy_name(_spec(s)) == FIGURES.raw(s.kind).table_name(_spec(s))


@pytest.fixture
def outside_kind():
    """A strategy registered in-process as an outside plugin would be (DTGEN_PLUGINS)."""
    from types import SimpleNamespace

    from opentikz_dt.strategies import REGISTRY, Strategy

    def rules(spec, model_blocks):
        if spec.strategy.options["knob"] > 5:
            yield ("strategy", "knob"), "knob at most 5"

    kind = "toy-outside"
    REGISTRY.register(SimpleNamespace(
        KIND=kind, STRATEGY=Strategy(kind, "Toy training", ("optimizer",), workers=(1, 1),
                                     default_workers=1),
        SCHEMA={"knob": {"description": "A toy key.", "type": "integer", "minimum": 1, "default": 3}}, rules=rules))
    yield kind
    REGISTRY.unregister(kind)


def test_an_outside_kind_is_a_kind_of_the_schema_rules_and_contract(outside_kind):
    from opentikz_dt.contract import load_contract
    from opentikz_dt.edit.args import parse_words
    from opentikz_dt.rules import check_rules
    from opentikz_dt.schema import check_schema
    from opentikz_dt.spec import build_spec, resolve
    from opentikz_dt.yamlpos import Located

    data = {"strategy": {"kind": outside_kind}}
    assert check_schema(Located("s.yaml", data)) == []
    resolved = resolve(data)
    assert resolved["strategy"]["knob"] == 3 and resolved["title"] == "Toy training"  # its SCHEMA's default
    spec = build_spec(resolved, Located("s.yaml", data))
    assert spec.strategy.options == {"knob": 3} and check_rules(spec) == []
    big = {"strategy": {"kind": outside_kind, "knob": 9}}
    too_big = build_spec(resolve(big), Located("s.yaml", big))
    assert [i.message for i in check_rules(too_big)] == ["knob at most 5"]  # its own rules hook
    # its keys belong to its kind only; the built-ins' schema is unchanged
    [issue] = check_schema(Located("s.yaml", {"strategy": {"kind": "allreduce", "knob": 2}}))
    assert "unknown key 'knob'" in issue.message
    assert "knob" not in resolve({"strategy": {"kind": "allreduce"}})["strategy"]
    kinds = load_contract()["edit_contract"]["operations"]["set-strategy"]["args"]["properties"]["kind"]["enum"]
    assert tuple(kinds) == KINDS + (outside_kind,)
    assert parse_words("set-strategy", ["--kind", outside_kind]) == {"kind": outside_kind}


@pytest.mark.parametrize("s", [pytest.param(s, id=s.kind) for s in STRATEGIES if "stages" not in s.options])
def test_stages_in_a_kind_that_does_not_read_them_is_refused(s, tmp_path):
    """strategy.stages resolves to the worker count for every kind (a run's spec.yaml carries
    it, and loads); another value, in a kind without stages, would be ignored: refused."""
    workers = spec_from_data({"strategy": {"kind": s.kind}}).topology.workers.count
    assert spec_from_data({"strategy": {"kind": s.kind, "stages": workers}}).strategy.stages == workers
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({"strategy": {"kind": s.kind, "stages": workers + 1}}, sort_keys=False))
    with pytest.raises(SpecError, match=rf"spec\.yaml:3:11: strategy\.stages: stages applies to kind: pipeline only, "
                                        rf"not '{s.kind}'"):
        load_spec(path)
