"""Read a YAML file into plain data plus the file:line:col of every key and value.

We walk PyYAML's node tree ourselves (as pre-commit does) so every later message can
point at the exact spot, and so an alias bomb is stopped by a node budget instead of
being expanded into gigabytes. Composing recurses once per nesting level, so a file
nested thousands deep would end in a RecursionError: its depth is bounded on the event
stream (which the parser produces without recursion) before anything is composed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from .errors import Issue, SpecError

MAX_FILE_BYTES = 1_000_000
MAX_NODES = 20_000  # a real spec has ~100; aliases count every time they are used
MAX_DEPTH = 64  # a real spec nests 3 or 4 deep; Python's recursion limit is ~1000

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
        too_deep = first_too_deep(yaml.parse(text, Loader=yaml.SafeLoader))
        if too_deep:
            mark, path = too_deep
            raise SpecError([Issue(name, *_pos(mark), dotted(path[:1]), f"nested more than {MAX_DEPTH} levels deep")])
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


def first_too_deep(events) -> tuple | None:
    """(start mark, key path) of the first collection nested deeper than MAX_DEPTH, else None.

    Works on PyYAML's and ruamel.yaml's events alike (same class names and marks), so
    both the loader and the round-trip editor check depth before they compose.
    """
    frames: list[list] = []  # per open collection: [is_mapping, waiting_for_key, key or index]
    for event in events:
        kind = type(event).__name__
        if kind in ("MappingEndEvent", "SequenceEndEvent"):
            frames.pop()
            continue
        if kind not in ("ScalarEvent", "AliasEvent", "MappingStartEvent", "SequenceStartEvent"):
            continue
        if frames:
            parent = frames[-1]
            if not parent[0]:
                parent[2] += 1
            elif parent[1]:
                parent[1], parent[2] = False, event.value if kind == "ScalarEvent" else "?"
            else:
                parent[1] = True
        if kind.endswith("StartEvent"):
            if len(frames) >= MAX_DEPTH:
                return event.start_mark, tuple(frame[2] for frame in frames)
            frames.append([True, True, None] if kind == "MappingStartEvent" else [False, False, -1])
    return None


def _build(node, path, located, budget, issues):
    budget[0] -= 1
    if budget[0] < 0:
        if budget[0] == -1:
            issues.append(Issue(located.file, *_pos(node.start_mark), "",
                                f"document expands to more than {MAX_NODES} nodes (alias bomb?)"))
        return None
    if len(path) >= MAX_DEPTH and isinstance(node, (yaml.MappingNode, yaml.SequenceNode)):
        # Only aliases get here: each one reuses a whole nested node, so depths add up.
        # The node's own mark is where its anchor was defined: point at the top-level value.
        issues.append(Issue(located.file, *located.where(path[:1]), dotted(path[:1]),
                            f"nested more than {MAX_DEPTH} levels deep (through aliases)"))
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
