"""The edit contract (schemas/meta.json) and `dtgen contract --check`.

OpenTikZ contracts are prose; ours is checked: every parameter names a real spec path,
every macro and style exists in the templates, every operation has a valid argument
schema and an implementation, every invariant resolves to a check in code, and the
figures rendered for each strategy use only the node names the contract documents.
Must not import torch.
"""

from __future__ import annotations

import importlib
import re

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from .resources import contract_meta, spec_schema, templates_dir


def load_contract() -> dict:
    return contract_meta()


def resolve_check(reference: str):
    """'module:function' -> the function (raises ImportError/AttributeError if absent)."""
    module_name, _, attribute = reference.partition(":")
    return getattr(importlib.import_module(module_name), attribute)


def _schema_node(path: str):
    node = spec_schema()
    for part in path.split("."):
        props = node.get("properties", {})
        if part not in props:
            return None
        node = props[part]
    return node


def _template_text() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in sorted(templates_dir().rglob("*")) if p.is_file())


def check_contract(meta: dict | None = None, templates: str | None = None) -> list[str]:
    """Every disagreement between meta.json, the spec schema, the templates and the code."""
    contract = (meta or load_contract())["edit_contract"]
    templates = _template_text() if templates is None else templates
    problems: list[str] = []
    for param in contract["parameters"]:
        node = _schema_node(param["path"])
        if node is None:
            problems.append(f"parameter {param['name']}: spec path {param['path']} is not in the schema")
            continue
        problems += _compare_bounds(param, node)
        macro = param.get("macro")
        if macro and not re.search(r"\\def" + re.escape(macro) + r"(?![A-Za-z])", templates):
            problems.append(f"parameter {param['name']}: macro {macro} is not defined in templates/")
    for style in contract["styles"]:
        if not re.search(r"(?<![A-Za-z])" + re.escape(style["name"]) + r"/\.style", templates):
            problems.append(f"style {style['name']}: not defined in templates/")
    problems += _check_operations(contract["operations"])
    problems += _check_invariants(contract["invariants"])
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


def _check_operations(operations: dict) -> list[str]:
    problems = []
    for name, operation in operations.items():
        try:
            Draft202012Validator.check_schema(operation["args"])
        except SchemaError as exc:
            problems.append(f"operation {name}: invalid argument schema: {exc.message}")
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
    from .invariants import SPEC_INVARIANTS

    problems = []
    ids = [inv["id"] for inv in invariants]
    for duplicate in sorted({i for i in ids if ids.count(i) > 1}):
        problems.append(f"invariant {duplicate}: listed twice")
    for invariant in invariants:
        try:
            if not callable(resolve_check(invariant["check"])):
                raise AttributeError
        except (ImportError, AttributeError):
            problems.append(f"invariant {invariant['id']}: check {invariant['check']} does not exist")
    for coded in SPEC_INVARIANTS:
        if coded.id not in ids:
            problems.append(f"invariant {coded.id}: checked in code but not listed in the contract")
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
