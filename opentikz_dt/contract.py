"""The edit contract's data: schemas/meta.json and schemas/contract.exec.json, merged.

The contract is two files keyed by the same ids. schemas/meta.json is OpenTikZ's
format (it validates against OpenTikZ's meta.schema.json, so its tools and skill read
it): prose only, parameters by macro, operations as {id, summary}, invariants as
"id: description" strings. schemas/contract.exec.json holds what dtgen executes: each
parameter's spec path and bounds, each operation's argument schema and the spec keys it
writes, each invariant's check function. `load_contract()` merges them into one view.

This is a bottom layer: it reads two JSON files and the spec schema and imports nothing
of dtgen but `resources` and `strategies` (the kinds of outside strategy plugins, which
every argument naming a strategy.kind accepts too). Checking the contract against the templates, the edit
operations and the rendered figures sits above all of them, in `contract_check`.
Must not import torch.
"""

from __future__ import annotations

import copy
import importlib

from .resources import contract_exec, contract_meta
from .strategies import outside_kinds, spec_schema


def load_contract() -> dict:
    """meta.json and contract.exec.json merged: the view every dtgen consumer reads."""
    return merge_files()[0]


def merge_files() -> tuple[dict, list[str]]:
    """The two files merged, with every id one has and the other lacks."""
    merged, problems = merge_contract(contract_meta(), contract_exec())
    _accept_outside_kinds(merged["edit_contract"]["operations"])
    return merged, problems


def _accept_outside_kinds(operations: dict) -> None:
    """An argument that sets strategy.kind (set-strategy --kind) lists the built-in kinds;
    add those of DTGEN_PLUGINS' strategies, as the spec schema does."""
    extra = outside_kinds()
    if not extra:
        return
    for operation in operations.values():
        for arg, path in operation.get("arg_paths", {}).items():
            listed = operation["args"]["properties"][arg].get("enum")
            if path == "strategy.kind" and listed is not None:
                operation["args"] = args = copy.deepcopy(operation["args"])  # the file's data is shared
                args["properties"][arg]["enum"] = listed + [k for k in extra if k not in listed]


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


def schema_node(path: str):
    node = spec_schema()
    for part in path.split("."):
        props = node.get("properties", {})
        if part not in props:
            return None
        node = props[part]
    return node


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
