"""Reading a batch of edit operations (`dtgen edit SPEC --ops FILE|-`, the MCP batch tool).

Two forms, whichever the text is:
- a YAML or JSON list of mappings, `{op: recolor, flow: grad, color: otorange}` (or
  `{op: recolor, args: {flow: grad, color: otorange}}`);
- one command line per operation, as typed after `dtgen edit SPEC`:
  `recolor --flow grad --color otorange` (blank lines and # comments skipped).
Must not import torch.
"""

from __future__ import annotations

import shlex

import yaml

from .args import EditArgumentError, parse_words


def read_ops(text: str, source: str = "-") -> list[tuple[str, dict]]:
    """[(operation, args), ...] from a batch file's text; raises EditArgumentError naming the line/item."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        data = None
    if isinstance(data, list):
        return [_from_mapping(item, f"{source}: item {index}") for index, item in enumerate(data, 1)]
    steps = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            words = shlex.split(line, comments=True)
        except ValueError as exc:
            raise EditArgumentError(f"{source}:{number}: {exc}") from None
        try:
            steps.append((words[0], parse_words(words[0], words[1:])))
        except EditArgumentError as exc:
            raise EditArgumentError(f"{source}:{number}: {exc}") from None
    if not steps:
        raise EditArgumentError(f"{source}: no operations (a list of {{op: NAME, ...}} or one 'OP --arg value' line each)")
    return steps


def _from_mapping(item, where: str) -> tuple[str, dict]:
    if not isinstance(item, dict) or not isinstance(item.get("op"), str):
        raise EditArgumentError(f"{where}: expected a mapping with 'op' (the operation) and its arguments")
    item = dict(item)
    operation = item.pop("op")
    args = item.pop("args", None)
    if args is not None:
        if item or not isinstance(args, dict):
            raise EditArgumentError(f"{where}: give the arguments either under 'args' or beside 'op', not both")
        item = args
    return operation, {str(key).replace("-", "_"): value for key, value in item.items()}
