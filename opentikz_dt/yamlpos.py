"""Read a YAML file into plain data plus the file:line:col of every key and value.

We walk PyYAML's node tree ourselves (as pre-commit does) so every later message can
point at the exact spot, and so an alias bomb is stopped by a node budget instead of
being expanded into gigabytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from .errors import Issue, SpecError

MAX_FILE_BYTES = 1_000_000
MAX_NODES = 20_000  # a real spec has ~100; aliases count every time they are used

PathKey = tuple  # ("topology", "workers", "count") or with list indexes


@dataclass
class Located:
    """Parsed data and where each piece of it came from (1-based line and column)."""

    file: str
    data: object
    key_pos: dict = field(default_factory=dict)
    value_pos: dict = field(default_factory=dict)

    def where(self, path: PathKey, prefer_value: bool = True) -> tuple[int, int]:
        """Position of `path`, or of its nearest existing ancestor."""
        path = tuple(path)
        while True:
            table = (self.value_pos, self.key_pos) if prefer_value else (self.key_pos, self.value_pos)
            for positions in table:
                if path in positions:
                    return positions[path]
            if not path:
                return (1, 1)
            path = path[:-1]

    def issue(self, path: PathKey, message: str, prefer_value: bool = True) -> Issue:
        line, col = self.where(path, prefer_value)
        return Issue(self.file, line, col, dotted(path), message)


def dotted(path: PathKey) -> str:
    """('topology', 'workers', 'count') -> 'topology.workers.count'; list items as [i]."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _pos(mark) -> tuple[int, int]:
    return (mark.line + 1, mark.column + 1)


def read_text(path: str | Path) -> str:
    """The file's text, or a SpecError naming why it cannot be read."""
    name = str(path)
    p = Path(path)
    if not p.exists():
        raise SpecError([Issue(name, 1, 1, "", "no such file")])
    if p.is_dir():
        raise SpecError([Issue(name, 1, 1, "", "is a directory, not a spec file")])
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise SpecError([Issue(name, 1, 1, "", f"cannot read: {exc.strerror}")]) from None
    if len(raw) > MAX_FILE_BYTES:
        raise SpecError([Issue(name, 1, 1, "", f"file is {len(raw)} bytes; a spec may be at most {MAX_FILE_BYTES}")])
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = raw[: exc.start]
        line = before.count(b"\n") + 1
        col = exc.start - (before.rfind(b"\n") + 1) + 1
        raise SpecError([Issue(name, line, col, "", f"not UTF-8 text (byte 0x{raw[exc.start]:02x})")]) from None


def load_located(path: str | Path, text: str | None = None) -> Located:
    """Parse one YAML document; raise SpecError for syntax errors, empty files and bombs."""
    name = str(path)
    if text is None:
        text = read_text(path)
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = _pos(mark) if mark else (1, 1)
        problem = exc.problem or exc.context or "invalid YAML"
        if exc.context and exc.context_mark and exc.problem and exc.context_mark is not mark:
            start_line, start_col = _pos(exc.context_mark)
            problem += f" ({exc.context} at line {start_line}, column {start_col})"
        raise SpecError([Issue(name, line, col, "", f"YAML syntax error: {problem}")]) from None
    except yaml.YAMLError as exc:  # e.g. more than one document
        raise SpecError([Issue(name, 1, 1, "", f"YAML error: {exc}")]) from None
    if root is None:
        raise SpecError([Issue(name, 1, 1, "", "the file is empty; a spec is a YAML mapping (see `dtgen init`)")])
    located = Located(name, None)
    budget = [MAX_NODES]
    issues: list[Issue] = []
    located.data = _build(root, (), located, budget, issues)
    if issues:
        raise SpecError(issues)
    return located


def _build(node, path, located, budget, issues):
    budget[0] -= 1
    if budget[0] < 0:
        if budget[0] == -1:
            issues.append(Issue(located.file, *_pos(node.start_mark), "",
                                f"document expands to more than {MAX_NODES} nodes (alias bomb?)"))
        return None
    located.value_pos.setdefault(path, _pos(node.start_mark))
    if isinstance(node, yaml.MappingNode):
        out = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                issues.append(Issue(located.file, *_pos(key_node.start_mark), dotted(path), "merge keys ('<<') are not supported"))
                continue
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag != "tag:yaml.org,2002:str":
                issues.append(Issue(located.file, *_pos(key_node.start_mark), dotted(path), "keys must be plain strings"))
                continue
            key = key_node.value
            if key in out:
                issues.append(Issue(located.file, *_pos(key_node.start_mark), dotted(path + (key,)), "duplicate key"))
                continue
            located.key_pos[path + (key,)] = _pos(key_node.start_mark)
            out[key] = _build(value_node, path + (key,), located, budget, issues)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_build(item, path + (i,), located, budget, issues) for i, item in enumerate(node.value)]
    return yaml.SafeLoader(" ").construct_object(node, deep=True) if node.tag != "tag:yaml.org,2002:str" else node.value
