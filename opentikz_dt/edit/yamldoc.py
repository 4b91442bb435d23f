"""A spec file as a ruamel.yaml round-trip document: set and delete keys, keep the rest.

Edits must keep the user's comments, key order, quoting and flow/block style, so we
never write YAML by hand: ruamel.yaml parses the text into CommentedMaps that remember
all of that, we change values in place, and it dumps the text back (byte-identical when
nothing changed). Two ruamel habits need help, both about comments: the blank lines and
comment lines *above* a key are stored on the key before it, so deleting or appending a
key would lose or misplace them; `_take_tail`/`_give_tail` move them along. ruamel
composes recursively, so nesting depth is bounded on its event stream first.
Must not import torch.
"""

from __future__ import annotations

import io

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import CommentMark, YAMLError
from ruamel.yaml.scalarstring import DoubleQuotedScalarString, SingleQuotedScalarString
from ruamel.yaml.tokens import CommentToken
from ruamel.yaml.util import load_yaml_guess_indent

from ..yamlpos import MAX_DEPTH, dotted, first_too_deep

WIDTH = 4096  # never re-wrap a user's long line


class YamlDoc:
    """One parsed spec file; `text()` dumps it back with every untouched byte as it was."""

    def __init__(self, text: str):
        self.newline = "\r\n" if "\r\n" in text else "\n"
        text = text.replace("\r\n", "\n")
        self._yaml = YAML(typ="rt")
        _check_depth(text)  # before anything composes, indent guessing included
        self._yaml.preserve_quotes = True
        self._yaml.width = WIDTH
        self._yaml.indent(**_guess_indents(text))
        self._yaml.explicit_start = text.lstrip().startswith("---")
        self.root = self._yaml.load(text)
        if not isinstance(self.root, CommentedMap):
            raise YAMLError("a spec is a YAML mapping")

    def text(self) -> str:
        out = io.StringIO()
        self._yaml.dump(self.root, out)
        return out.getvalue().replace("\n", self.newline) if self.newline != "\n" else out.getvalue()

    # -- reading ---------------------------------------------------------------------
    def get(self, path, default=None):
        node = self.root
        for key in path:
            if not isinstance(node, dict) or key not in node:
                return default
            node = node[key]
        return node

    def has(self, path) -> bool:
        sentinel = object()
        return self.get(path, sentinel) is not sentinel

    # -- writing ---------------------------------------------------------------------
    def set(self, path, value) -> None:
        """Set `path` to `value`, creating the missing mappings (flow inside flow)."""
        node, depth = self.root, 0
        while depth < len(path) - 1 and isinstance(node.get(path[depth]), dict):
            node, depth = node[path[depth]], depth + 1
        key = path[depth]
        new = _nested(path[depth + 1:], value, _is_flow(node))
        if key in node:
            node[key] = _like(node[key], new)
        else:
            _append(node, key, new)

    def delete(self, path) -> None:
        """Remove `path` if present; the blank lines and comments introducing what follows stay."""
        parent = self.get(path[:-1])
        key = path[-1]
        if not isinstance(parent, CommentedMap) or key not in parent:
            return
        keys = list(parent)
        index = keys.index(key)
        tail = _take_tail(parent, key)
        del parent[key]
        if not tail:
            return
        if index > 0:
            _give_tail(parent, keys[index - 1], tail)
        elif len(parent):
            _put_before(parent, list(parent)[0], tail)
        else:
            self._put_before_next(path[:-1], tail)

    def _put_before_next(self, path, tail: str) -> None:
        # The mapping at `path` is now empty: the tail goes before the next key in document order.
        for depth in range(len(path) - 1, -1, -1):
            mapping = self.get(path[:depth])
            keys = list(mapping)
            position = keys.index(path[depth]) + 1
            if position < len(keys):
                _put_before(mapping, keys[position], tail)
                return
        # Nothing follows: the tail was trailing comments at the end of the file; they go.


def _check_depth(text: str) -> None:
    too_deep = first_too_deep(YAML(typ="rt").parse(text))  # a spare parser: parsing leaves state behind
    if too_deep:
        mark, path = too_deep
        raise YAMLError(f"line {mark.line + 1}, column {mark.column + 1}: {dotted(path[:1])}: "
                        f"nested more than {MAX_DEPTH} levels deep")


def _guess_indents(text: str) -> dict:
    """The file's own indentation, so new and re-emitted lines match it."""
    mapping = min((len(line) - len(line.lstrip(" ")) for line in text.splitlines()
                   if line.startswith(" ") and line.strip() and line.lstrip()[0] not in "#-"), default=2)
    _, sequence, offset = load_yaml_guess_indent(text)
    if offset is None:  # no block sequence to learn from
        return {"mapping": mapping, "sequence": mapping, "offset": 0}
    return {"mapping": mapping, "sequence": sequence, "offset": offset}


def _is_flow(node) -> bool:
    return isinstance(node, (CommentedMap, CommentedSeq)) and node.fa.flow_style()


def _nested(keys, value, flow: bool):
    """`value` under the new mappings `keys` (a block mapping cannot sit in a flow one)."""
    if not keys:
        return _plain_value(value)
    mapping = CommentedMap()
    if flow:
        mapping.fa.set_flow_style()
    else:
        mapping.fa.set_block_style()
    mapping[keys[0]] = _nested(keys[1:], value, flow)
    return mapping


def _plain_value(value):
    # TeX goes in single quotes, as docs/spec.md asks: in double quotes "\nabla" is a newline.
    if isinstance(value, str) and ("\\" in value or "$" in value):
        return SingleQuotedScalarString(value)
    return value


def _like(old, value):
    """`value` in the quoting style of the value it replaces."""
    if not isinstance(value, str):
        return value
    if isinstance(old, DoubleQuotedScalarString):
        return SingleQuotedScalarString(value) if "\\" in value else DoubleQuotedScalarString(value)
    if isinstance(old, SingleQuotedScalarString):
        return SingleQuotedScalarString(value)
    return _plain_value(value)


def _last_comment_slot(mapping: CommentedMap, key):
    """(container, key) whose end-of-line comment follows `key`'s value when dumped."""
    container, slot = mapping, key
    value = mapping[key]
    while isinstance(value, (CommentedMap, CommentedSeq)) and len(value) and not _is_flow(value):
        container = value
        slot = list(value)[-1] if isinstance(value, CommentedMap) else len(value) - 1
        value = value[slot]
    return container, slot


def _eol_index(container) -> int:
    # ruamel keeps a mapping value's end-of-line comment at [2], a sequence item's at [0].
    return 0 if isinstance(container, CommentedSeq) else 2


def _take_tail(mapping: CommentedMap, key) -> str:
    """Cut and return the lines after `key`'s own end-of-line comment (they belong below)."""
    container, slot = _last_comment_slot(mapping, key)
    entry = container.ca.items.get(slot)
    index = _eol_index(container)
    token = entry[index] if entry and len(entry) > index else None
    if token is None or "\n" not in token.value:
        return ""
    own, tail = token.value.split("\n", 1)
    token.value = own + "\n"
    return tail


def _give_tail(mapping: CommentedMap, key, tail: str) -> None:
    """Put `tail` (blank lines, comment lines) right after `key`'s value."""
    container, slot = _last_comment_slot(mapping, key)
    index = _eol_index(container)
    entry = container.ca.items.setdefault(slot, [None, None, None, None])
    while len(entry) <= index:
        entry.append(None)
    if entry[index] is None:
        entry[index] = CommentToken("\n" + tail, CommentMark(0), None)
    else:
        entry[index].value = entry[index].value.rstrip("\n") + "\n" + tail


def _put_before(mapping: CommentedMap, key, tail: str) -> None:
    """Put `tail` (already indented comment lines, blank lines) just above `key`."""
    entry = mapping.ca.items.setdefault(key, [None, None, None, None])
    entry[1] = [CommentToken(tail, CommentMark(0), None)] + list(entry[1] or [])


def _append(mapping: CommentedMap, key, value) -> None:
    """Add `key` at the end of `mapping`, keeping the blank line/comments that follow it below it."""
    tail = _take_tail(mapping, list(mapping)[-1]) if len(mapping) and not _is_flow(mapping) else ""
    mapping[key] = value
    if tail:
        _give_tail(mapping, key, tail)
