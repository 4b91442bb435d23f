"""`dtgen contract --check`: the edit contract checked against everything it names.

OpenTikZ contracts are prose; ours is checked: every parameter names a real spec path,
every macro and style exists in the templates, every operation has a valid argument
schema and an implementation, every user-facing spec key is reachable by an operation,
every invariant resolves to a check in code, and the figures rendered for each strategy
use only the node names the contract documents.

It sits above the contract's data (`contract`), the edit operations (`edit`) and the
figures (`figures.samples`), so none of those imports it back. Must not import torch.
"""

from __future__ import annotations

import functools
import re

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from .contract import merge_files, resolve_check, schema_node, spec_keys
from .edit import OPERATIONS
from .figures.samples import sample_figures
from .resources import spec_schema, templates_dir


@functools.lru_cache(maxsize=1)
def _rendered_text() -> str:
    # Some macros are generated per node (\workeronelabel, \workertwolabel, ...), so
    # they appear only in rendered figures, not in the template source.
    return "\n".join(tex for _, tex in sample_figures())


def _template_text() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in sorted(templates_dir().rglob("*")) if p.is_file())


def check_contract(meta: dict | None = None, templates: str | None = None) -> list[str]:
    """Every disagreement between meta.json, contract.exec.json, the spec schema, the templates and the code."""
    problems: list[str] = []
    if meta is None:
        meta, problems = merge_files()
    contract = meta["edit_contract"]
    templates = _template_text() if templates is None else templates
    for param in contract["parameters"]:
        node = schema_node(param["path"])
        if node is None:
            problems.append(f"parameter {param['name']}: spec path {param['path']} is not in the schema")
            continue
        problems += _compare_bounds(param, node)
        macro = param.get("macro")
        if macro and not any(re.search(r"\\def" + re.escape(macro) + r"(?![A-Za-z])", text)
                             for text in (templates, _rendered_text())):
            problems.append(f"parameter {param['name']}: macro {macro} is not defined in templates/")
    for style in contract["styles"]:
        if not re.search(r"(?<![A-Za-z])" + re.escape(style["name"]) + r"/\.style", templates):
            problems.append(f"style {style['name']}: not defined in templates/")
    problems += _check_operations(contract["operations"])
    problems += _check_invariants(contract["invariants"])
    problems += check_coverage(contract)
    problems += _check_rendered_node_names(contract["node_naming"]["patterns"])
    return problems


def _compare_bounds(param: dict, node: dict) -> list[str]:
    """The contract's type bounds must be the schema's, so neither can drift."""
    if "$ref" in node:
        node = {**spec_schema()["$defs"][node["$ref"].rsplit("/", 1)[-1]], **node}
    problems = []
    for key in ("minimum", "maximum", "enum", "default"):
        if key in param and key in node and param[key] != node[key]:
            problems.append(f"parameter {param['name']}: {key} {param[key]!r} differs from the schema's {node[key]!r}")
    return problems


_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "enum", "pattern", "maxLength")


def _check_operations(operations: dict) -> list[str]:
    problems = []
    for name, operation in operations.items():
        try:
            Draft202012Validator.check_schema(operation["args"])
        except SchemaError as exc:
            problems.append(f"operation {name}: invalid argument schema: {exc.message}")
            continue
        properties = operation["args"].get("properties", {})
        # An argument that is a spec value keeps the schema's bounds (arg_paths), so the
        # two cannot drift apart.
        for arg, path in operation.get("arg_paths", {}).items():
            node = schema_node(path)
            if node is None or arg not in properties:
                problems.append(f"operation {name}: arg_paths {arg} -> {path}: no such argument or spec key")
                continue
            if "$ref" in node:
                node = {**spec_schema()["$defs"][node["$ref"].rsplit("/", 1)[-1]], **node}
            for key in _BOUNDS:
                if key in node and properties[arg].get(key) != node[key]:
                    problems.append(f"operation {name}: --{arg} {key} {properties[arg].get(key)!r} differs from "
                                    f"{path}'s {node[key]!r}")
        key_enum = properties.get("key", {}).get("enum")
        if key_enum is not None and sorted(key_enum) != sorted(operation.get("writes", [])):
            problems.append(f"operation {name}: the keys --key accepts and the keys it 'writes' differ")
    for name in sorted(set(operations) - set(OPERATIONS)):
        problems.append(f"operation {name}: listed in the contract but not implemented")
    for name in sorted(set(OPERATIONS) - set(operations)):
        problems.append(f"operation {name}: implemented but not listed in the contract")
    return problems


def _check_invariants(invariants: list) -> list[str]:
    problems = []
    ids = [inv["id"] for inv in invariants]
    for duplicate in sorted({i for i in ids if ids.count(i) > 1}):
        problems.append(f"invariant {duplicate}: listed twice")
    for invariant in invariants:
        if invariant.get("applies_to") not in ("spec", "tex"):
            problems.append(f"invariant {invariant['id']}: applies_to must be 'spec' or 'tex'")
        try:
            if not callable(resolve_check(invariant.get("check", ""))):
                raise AttributeError
        except (ImportError, AttributeError, ValueError):
            problems.append(f"invariant {invariant['id']}: check {invariant.get('check')} does not exist")
    return problems


def check_coverage(contract: dict) -> list[str]:
    """Every user-facing spec key is written by some operation (named, or listed for the generic `set`)."""
    coverage = contract.get("coverage", {})
    internal = set(coverage.get("not_user_facing", {}))
    reached: dict[str, str] = {}
    for name, operation in contract["operations"].items():
        for path in operation.get("writes", []):
            reached.setdefault(path, name)
    problems = []
    keys = spec_keys()
    for key in keys:
        if key in internal:
            continue
        if not any(key == path or key.startswith(path + ".") for path in reached):
            problems.append(f"spec key {key}: no operation reaches it (add one, or list it under an operation's "
                            "'writes' in contract.exec.json)")
    for path, name in reached.items():
        if not any(key == path or key.startswith(path + ".") for key in keys):
            problems.append(f"operation {name}: writes {path}, which is not a spec key")
    problems += _check_settable(reached)
    return problems


def _check_settable(reached: dict) -> list[str]:
    """A written key must be settable to a valid value from a spec that lacks its section:
    a key inside an optional mapping with other required keys (runtime.fault.rank, beside
    the required at_step and kind) is valid only with them, so some operation must write
    that mapping whole (set --key runtime.fault --value '{rank: 1, at_step: 5, kind: crash}')."""
    problems = []
    for path, name in sorted(reached.items()):
        parts = path.split(".")
        for depth in range(1, len(parts)):
            section = ".".join(parts[:depth])
            node = _resolved(schema_node(section))
            if node is None or _always_present(parts[:depth]):
                continue
            missing = sorted(set(node.get("required", [])) - {parts[depth]})
            whole = any(section == p or section.startswith(p + ".") for p in reached)
            if missing and not whole:
                problems.append(f"operation {name}: writes {path}, but {section} also requires "
                                f"{', '.join(missing)} and no operation writes {section} whole, so no edit "
                                f"can give {path} a valid value in a spec without {section}")
    return problems


def _resolved(node):
    if node is not None and "$ref" in node:
        node = {**spec_schema()["$defs"][node["$ref"].rsplit("/", 1)[-1]], **node}
    return node


def _always_present(parts: list) -> bool:
    """Whether every valid spec has this section (each step is required by its parent)."""
    node = spec_schema()
    for part in parts:
        if part not in node.get("required", []):
            return False
        node = _resolved(node["properties"][part])
    return True


_NODE_NAME = re.compile(r"\\(?:node|coordinate)\b[^;]*?\(([A-Za-z][\w-]*)\)")


def _check_rendered_node_names(patterns: dict) -> list[str]:
    """Render a figure for every strategy and check each named node against node_naming."""
    compiled = [re.compile(p) for p in patterns.values()]
    problems = []
    for figure_name, tex in sample_figures():
        for name in sorted(set(_NODE_NAME.findall(tex))):
            base = name.split("-", 1)[0]
            if not any(p.match(base) for p in compiled):
                problems.append(f"{figure_name}: node ({name}) does not follow node_naming")
    return problems
