"""Operation arguments: parse `--key value` words by the operation's schema, then check them.

The schemas live in schemas/meta.json (edit_contract.operations.<op>.args), so the
command line, the contract `dtgen contract` prints and the checks are one thing: there
is no click option per operation. Must not import torch.
"""

from __future__ import annotations

import difflib

from jsonschema import Draft202012Validator

from ..contract import load_contract
from ..errors import DtgenError, UsageError
from ..figures.fit import width_cm


# A suggestion must be a likely typo, not merely a shared prefix: at 0.5 'set-slowdown'
# suggested 'set-sync'. 0.8 still catches a dropped, doubled or swapped letter.
CLOSE_ENOUGH = 0.8


class EditArgumentError(UsageError):
    """Unknown operation, or arguments its schema does not allow (nothing was read or written)."""


def operations_contract() -> dict:
    return load_contract()["edit_contract"]["operations"]


def operation_schema(operation: str) -> dict:
    operations = operations_contract()
    if operation not in operations:
        close = difflib.get_close_matches(operation, list(operations), n=1, cutoff=CLOSE_ENOUGH)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise EditArgumentError(f"unknown operation '{operation}'{hint} (operations: {', '.join(operations)}; "
                                 "dtgen edit --list shows their options)")
    return operations[operation]["args"]


def usage(operation: str) -> str:
    """One line: the operation and its options, required ones bare, optional in brackets."""
    schema = operation_schema(operation)
    parts = [operation]
    for name, prop in schema.get("properties", {}).items():
        kind = prop.get("type", "value")
        if "enum" in prop and len(prop["enum"]) <= 8:
            value = "|".join(map(str, prop["enum"]))
        else:  # a long list of choices (set --key) or a value of several types
            value = name.upper() if "enum" in prop or not isinstance(kind, str) else kind.upper()
        word = f"--{name} {value}"
        parts.append(word if name in schema.get("required", []) else f"[{word}]")
    if schema.get("minProperties"):
        parts.append(f"(at least {schema['minProperties']} option)")
    return " ".join(parts)


def parse_words(operation: str, words) -> dict:
    """['--flow', 'grad', '--color=otorange'] -> {'flow': 'grad', 'color': 'otorange'}, typed by the schema."""
    schema = operation_schema(operation)
    properties = schema.get("properties", {})
    args: dict = {}
    words = list(words)
    while words:
        word = words.pop(0)
        if not word.startswith("--") or len(word) == 2:
            raise EditArgumentError(f"{operation}: unexpected argument {word!r}; usage: {usage(operation)}")
        name, has_value, value = word[2:].partition("=")
        name = name.replace("-", "_")
        if name not in properties:
            raise EditArgumentError(f"{operation}: unknown option --{name}{_options_hint(name, properties)}; usage: {usage(operation)}")
        if not has_value:
            if not words:
                raise EditArgumentError(f"{operation}: option --{name} needs a value; usage: {usage(operation)}")
            value = words.pop(0)
        if name in args:
            raise EditArgumentError(f"{operation}: option --{name} given twice")
        args[name] = coerce(operation, name, value, properties[name])
    return args


def _options_hint(name: str, properties: dict) -> str:
    if not properties:
        return " (it takes no options)"
    close = difflib.get_close_matches(name, list(properties), n=1, cutoff=CLOSE_ENOUGH)
    return f"; did you mean --{close[0]}?" if close else ""


def coerce(operation: str, name: str, text: str, prop: dict):
    """A command-line word as the type its schema wants (enums and strings stay text)."""
    kind = prop.get("type")
    try:
        if kind == "integer":
            return int(text)
        if kind == "number":
            number = float(text)
            if number != number or number in (float("inf"), float("-inf")):
                raise ValueError
            return int(number) if number.is_integer() and "." not in text and "e" not in text.lower() else number
        if kind == "boolean":
            if text.lower() not in ("true", "false"):
                raise ValueError
            return text.lower() == "true"
    except ValueError:
        raise EditArgumentError(f"{operation}: --{name} expects {'an integer' if kind == 'integer' else 'a number' if kind == 'number' else 'true or false'}, got {text!r}") from None
    return text


def check_args(operation: str, args: dict) -> None:
    """Raise EditArgumentError naming every way `args` breaks the operation's schema."""
    schema = operation_schema(operation)
    problems = [_describe(operation, error, schema) for error in
                sorted(Draft202012Validator(schema).iter_errors(args), key=lambda e: list(e.path))]
    if problems:
        raise EditArgumentError("; ".join(problems) + f"; usage: {usage(operation)}")
    for name, check in _VALUE_CHECKS.get(operation, {}).items():
        if name in args:
            try:
                check(args[name])
            except DtgenError as exc:  # a value the schema's pattern lets through but the code cannot use
                raise EditArgumentError(f"{operation}: --{name}: {exc}; usage: {usage(operation)}") from None


def _fit(value: str) -> None:
    if value != "natural":
        width_cm(value)  # the one place that decides the lengths a figure can be laid out at


# Checks beyond the argument schema, by the code that reads the value: an edit
# argument it rejects is a usage error (2), as `dtgen figure --width 3cm` is.
_VALUE_CHECKS = {"set-size": {"fit": _fit}}


MAX_LISTED = 12  # a longer list of choices (set --key: every settable key) is cut to the close ones


def _not_one_of(operation: str, option: str, value, choices: list) -> str:
    """A value outside the choices: all of them where they are few; else the closest one as
    the suggestion and at most three more close ones, and where to find the rest."""
    close = difflib.get_close_matches(str(value), choices, n=1, cutoff=0.6)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    if len(choices) <= MAX_LISTED:
        return f"{operation}: {option} {value!r} is not one of {', '.join(map(repr, choices))}{hint}"
    others = [c for c in difflib.get_close_matches(str(value), choices, n=4, cutoff=0.5) if c not in close][:3]
    nearby = f" (also close: {', '.join(map(repr, others))})" if others else ""
    return (f"{operation}: {option} {value!r} is not one of the {len(choices)} choices{hint}{nearby}; "
            "`dtgen contract` lists them all")


def _describe(operation: str, error, schema: dict) -> str:
    option = f"--{error.path[0]}" if error.path else ""
    value = error.instance
    if error.validator == "required":
        return f"{operation}: missing --{error.message.split(chr(39))[1]}"
    if error.validator == "additionalProperties":
        extra = sorted(set(value) - set(schema.get("properties", {})))
        return f"{operation}: unknown option {', '.join('--' + e for e in extra)}"
    if error.validator == "minProperties":
        return f"{operation}: give at least one of {', '.join('--' + p for p in schema.get('properties', {}))}"
    if error.validator == "enum":
        return _not_one_of(operation, option, value, [str(v) for v in error.validator_value])
    if error.validator in ("minimum", "maximum"):
        word = "less than the minimum" if error.validator == "minimum" else "greater than the maximum"
        return f"{operation}: {option} {value} is {word} of {error.validator_value}"
    if error.validator == "pattern":
        return f"{operation}: {option} {value!r} is not a valid {error.schema.get('description', 'value')} (pattern {error.validator_value})"
    if error.validator == "maxLength":
        return f"{operation}: {option} is {len(value)} characters long; the maximum is {error.validator_value}"
    return f"{operation}: {option} {error.message}".replace("  ", " ")
