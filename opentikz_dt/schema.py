"""Check spec data against the JSON Schema and fill in its defaults.

Messages are rewritten for people: one line per problem, at the offending key, with
"did you mean" for misspelt keys and values.
"""

from __future__ import annotations

import copy
import difflib
import re

from jsonschema import Draft202012Validator

from .errors import Issue
from .strategies import spec_schema
from .yamlpos import Located

_TYPE_NAMES = {"object": "a mapping", "array": "a list", "string": "a string", "integer": "an integer",
               "number": "a number", "boolean": "true or false"}


def _kind_of(data) -> str | None:
    """strategy.kind of spec data that may not be a valid spec yet (None if it has none)."""
    block = data.get("strategy") if isinstance(data, dict) else None
    kind = block.get("kind") if isinstance(block, dict) else None
    return kind if isinstance(kind, str) else None


def _validator(kind: str | None = None) -> Draft202012Validator:
    # A plugin strategy's own keys (its SCHEMA) are valid in specs of its kind only.
    return Draft202012Validator(spec_schema(kind))


def _suggest(word: str, choices) -> str:
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f"; did you mean '{close[0]}'?" if close else ""


def _describe(value) -> str:
    if isinstance(value, (dict, list)):
        return _TYPE_NAMES["object" if isinstance(value, dict) else "array"]
    text = repr(value) if isinstance(value, str) else str(value).lower() if isinstance(value, bool) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


# A number in exponent form that YAML 1.1 (PyYAML) reads as text: it wants a decimal point
# and a signed exponent (1.0e+3), where YAML 1.2 and Python read 1e3, 3e-4 and 1.5e3 alike.
EXPONENT = re.compile(r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)[eE][-+]?[0-9]+")


def yaml_number_text(text: str) -> str:
    """`text` (1e3, 3e-4) as YAML 1.1 reads a float, its digits kept: a decimal point and a
    signed exponent (1.0e+3, 3.0e-4)."""
    digits, letter, sign, power = re.fullmatch(r"([-+]?[0-9.]+)([eE])([-+]?)([0-9]+)", text.strip()).groups()
    return f"{digits if '.' in digits else digits + '.0'}{letter}{sign or '+'}{power}"


def exponent_hint(text: str) -> str:
    """What to write instead of `text` (3e-4, 1e3) for YAML to read a number."""
    return f"YAML reads {text.strip()} as text; it reads {yaml_number_text(text)} as a number"


def key_types(path: tuple, kind: str | None = None) -> set:
    """The JSON types the schema gives the key at `path` (empty where it names no key)."""
    root = node = spec_schema(kind)
    for part in path:
        if "$ref" in node:
            node = _resolve(node["$ref"], root)
        extra = node.get("additionalProperties")
        node = node.get("properties", {}).get(part) or (extra if isinstance(extra, dict) else None)
        if node is None:
            return set()
    if "$ref" in node:
        node = {**_resolve(node["$ref"], root), **node}
    types = node.get("type", ())
    return {types} if isinstance(types, str) else set(types)


def number_meant(text: str, types: set):
    """The number a string in exponent form means at a key of `types`: a float where a
    number fits, an int where only an integer fits and it is whole; else None."""
    if not isinstance(text, str) or not EXPONENT.fullmatch(text.strip()):
        return None
    number = float(text)
    if "number" in types:
        return number
    return int(number) if "integer" in types and number.is_integer() else None


def numbers_meant(located: Located) -> list[Issue]:
    """Strings in exponent form (1e3, 3e-4) at keys whose type is a number, read as the
    number the user meant: `located.data` gets the float (an integer where only an integer
    fits and the value is whole), and each gets a note (an Issue to print as a warning)."""
    notes: list[Issue] = []
    for error in _validator(_kind_of(located.data)).iter_errors(located.data):
        value, path = error.instance, tuple(error.absolute_path)
        if error.validator != "type" or not path:
            continue
        expected = error.validator_value
        meant = number_meant(value, {expected} if isinstance(expected, str) else set(expected))
        if meant is None:
            continue
        parent = located.data
        for part in path[:-1]:
            parent = parent[part]
        parent[path[-1]] = meant
        notes.append(located.issue(path, f"read '{value}' as the number {meant} ({exponent_hint(value)})"))
    return notes


def check_schema(located: Located) -> list[Issue]:
    """Every schema violation in `located.data`, one Issue each."""
    issues: list[Issue] = []
    for error in _validator(_kind_of(located.data)).iter_errors(located.data):
        issues.extend(_to_issues(error, located))
    return issues


def _to_issues(error, located: Located) -> list[Issue]:
    path = tuple(error.absolute_path)
    kind, value, schema = error.validator, error.instance, error.schema
    if kind == "additionalProperties":
        allowed = list(schema.get("properties", {}))
        unknown = [k for k in value if k not in allowed]
        return [located.issue(path + (k,), f"unknown key '{k}'{_suggest(k, allowed)}", prefer_value=False) for k in unknown]
    if kind == "propertyNames":
        return [located.issue(path, error.message)]
    if kind == "required":
        missing = error.message.split("'")[1]
        return [located.issue(path, f"missing required key '{missing}'", prefer_value=False)]
    if kind == "type":
        expected = error.validator_value
        expected = [expected] if isinstance(expected, str) else expected
        want = " or ".join(_TYPE_NAMES.get(t, t) for t in expected)
        if not path and not isinstance(value, dict):
            return [located.issue(path, f"a spec must be a mapping of keys (name, topology, strategy, ...), not {_describe(value) if not isinstance(value, list) else 'a list'}")]
        hint = ""
        if isinstance(value, str) and EXPONENT.fullmatch(value.strip()):  # numbers_meant took the whole ones
            hint = f" ({float(value):g} is not a whole number)" if "integer" in expected else f" ({exponent_hint(value)})"
        return [located.issue(path, f"expected {want}, got {_describe(value)}{hint}")]
    if kind == "enum":
        options = ", ".join(repr(o) for o in error.validator_value)
        return [located.issue(path, f"{_describe(value)} is not one of {options}{_suggest(value, error.validator_value)}")]
    if kind in ("minimum", "exclusiveMinimum"):
        word = "less than" if kind == "minimum" else "less than or equal to"
        return [located.issue(path, f"{_describe(value)} is {word} the minimum of {error.validator_value}")]
    if kind in ("maximum", "exclusiveMaximum"):
        word = "greater than" if kind == "maximum" else "greater than or equal to"
        return [located.issue(path, f"{_describe(value)} is {word} the maximum of {error.validator_value}")]
    if kind == "pattern":
        why = f" ({schema['description']})" if schema.get("description") else ""
        return [located.issue(path, f"{_describe(value)} does not match the pattern {error.validator_value}{why}")]
    if kind in ("maxLength", "minLength", "minItems", "maxItems"):
        return [located.issue(path, error.message)]
    return [located.issue(path, error.message)]


def apply_defaults(data: dict) -> dict:
    """A deep copy of `data` with every schema default filled in (objects recursively)."""
    schema = spec_schema(_kind_of(data))
    return _fill(copy.deepcopy(data), schema, schema)


def _fill(value, node: dict, root: dict):
    if "$ref" in node:
        node = {**_resolve(node["$ref"], root), **{k: v for k, v in node.items() if k != "$ref"}}
    if isinstance(value, dict) and "properties" in node:
        for key, sub in node["properties"].items():
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
            if key in value:
                value[key] = _fill(value[key], sub, root)
    return value


def _resolve(ref: str, root: dict) -> dict:
    node = root
    for part in ref.lstrip("#/").split("/"):
        node = node[part]
    return node
