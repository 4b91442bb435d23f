"""The edit contract and `dtgen contract --check`.

The contract is two files keyed by the same ids. schemas/meta.json is OpenTikZ's
format (it validates against OpenTikZ's meta.schema.json, so its tools and skill read
it): prose only, parameters by macro, operations as {id, summary}, invariants as
"id: description" strings. schemas/contract.exec.json holds what dtgen executes: each
parameter's spec path and bounds, each operation's argument schema and the spec keys it
writes, each invariant's check function. `load_contract()` merges them into one view.

OpenTikZ contracts are prose; ours is checked: every parameter names a real spec path,
every macro and style exists in the templates, every operation has a valid argument
schema and an implementation, every user-facing spec key is reachable by an operation,
every invariant resolves to a check in code, and the figures rendered for each strategy
use only the node names the contract documents. Must not import torch.
"""

from __future__ import annotations

import functools
import importlib
import re

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from .resources import contract_exec, contract_meta, spec_schema, templates_dir


def load_contract() -> dict:
    """meta.json and contract.exec.json merged: the view every dtgen consumer reads."""
    return merge_contract(contract_meta(), contract_exec())[0]


def invariant_id(line: str) -> tuple[str, str]:
    """'distinct-flow-colors: data, ... distinct' -> ('distinct-flow-colors', 'data, ... distinct')."""
    ident, _, description = line.partition(":")
    return ident.strip(), description.strip()


def merge_contract(meta: dict, executable: dict) -> tuple[dict, list[str]]:
    """(the merged view, every id one file has and the other lacks)."""
    prose = meta["edit_contract"]
    problems: list[str] = []

    def joined(kind: str, ids: list[str], table: dict) -> None:
        for missing in [i for i in ids if i not in table]:
            problems.append(f"{kind} {missing}: in meta.json but not in contract.exec.json")
        for extra in [i for i in table if i not in ids]:
            problems.append(f"{kind} {extra}: in contract.exec.json but not in meta.json")

    parameters = []
    for param in prose["parameters"]:
        macro = param["name"]
        parameters.append({"name": macro.lstrip("\\"), "macro": macro, "description": param["meaning"],
                           **executable["parameters"].get(macro, {})})
    joined("parameter", [p["name"] for p in prose["parameters"]], executable["parameters"])
    operations = {op["id"]: {"description": op["summary"], **executable["operations"].get(op["id"], {})}
                  for op in prose["operations"]}
    joined("operation", list(operations), executable["operations"])
    invariants = []
    for line in prose["invariants"]:
        ident, description = invariant_id(line)
        invariants.append({"id": ident, "description": description, **executable["invariants"].get(ident, {})})
    joined("invariant", [i["id"] for i in invariants], executable["invariants"])
    joined("style", prose["styles"], executable["styles"])
    merged = {key: value for key, value in meta.items() if key != "edit_contract"}
    merged["edit_contract"] = {
        "parameters": parameters,
        "node_naming": {"description": prose["node_naming"], "patterns": executable["node_naming_patterns"]},
        "styles": [{"name": name, "description": executable["styles"].get(name, "")} for name in prose["styles"]],
        "usage": executable["usage"],
        "operations": operations,
        "invariants": invariants,
        "coverage": executable.get("coverage", {}),
    }
    return merged, problems


def resolve_check(reference: str):
    """'module:function' -> the function (raises ImportError/AttributeError if absent)."""
    module_name, _, attribute = reference.partition(":")
    if not module_name or not attribute:
        raise ImportError(f"not a module:function reference: {reference!r}")
    return getattr(importlib.import_module(module_name), attribute)


def _schema_node(path: str):
    node = spec_schema()
    for part in path.split("."):
        props = node.get("properties", {})
        if part not in props:
            return None
        node = props[part]
    return node


@functools.lru_cache(maxsize=1)
def _rendered_text() -> str:
    # Some macros are generated per node (\workeronelabel, \workertwolabel, ...), so
    # they appear only in rendered figures, not in the template source.
    try:
        from .figures.samples import sample_figures
    except ImportError:
        return ""
    return "\n".join(tex for _, tex in sample_figures())


def _template_text() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in sorted(templates_dir().rglob("*")) if p.is_file())


def check_contract(meta: dict | None = None, templates: str | None = None) -> list[str]:
    """Every disagreement between meta.json, contract.exec.json, the spec schema, the templates and the code."""
    problems: list[str] = []
    if meta is None:
        meta, problems = merge_contract(contract_meta(), contract_exec())
    contract = meta["edit_contract"]
    templates = _template_text() if templates is None else templates
    for param in contract["parameters"]:
        node = _schema_node(param["path"])
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
            node = _schema_node(path)
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
    try:
        from .edit import OPERATIONS
    except ImportError:
        return problems + ["operations: opentikz_dt.edit.OPERATIONS is missing"]
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


def spec_keys(node: dict | None = None, prefix: str = "") -> list[str]:
    """Every leaf key of the spec schema as a dotted path (mappings of ids count as one leaf)."""
    node = spec_schema() if node is None else node
    if "$ref" in node:
        node = {**spec_schema()["$defs"][node["$ref"].rsplit("/", 1)[-1]], **node}
    if "properties" not in node:
        return [prefix]
    keys = []
    for name, child in node["properties"].items():
        keys += spec_keys(child, f"{prefix}.{name}" if prefix else name)
    return keys


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
    return problems


_NODE_NAME = re.compile(r"\\(?:node|coordinate)\b[^;]*?\(([A-Za-z][\w-]*)\)")


def _check_rendered_node_names(patterns: dict) -> list[str]:
    """Render a figure for every strategy and check each named node against node_naming."""
    try:
        from .figures.samples import sample_figures
    except ImportError:
        return ["node names: opentikz_dt.figures.samples.sample_figures is missing, cannot check rendered names"]
    compiled = [re.compile(p) for p in patterns.values()]
    problems = []
    for figure_name, tex in sample_figures():
        for name in sorted(set(_NODE_NAME.findall(tex))):
            base = name.split("-", 1)[0]
            if not any(p.match(base) for p in compiled):
                problems.append(f"{figure_name}: node ({name}) does not follow node_naming")
    return problems
