"""The notes an edit result carries: what the arguments alone would not tell the user.

Three kinds, each found by comparing before and after rather than by trusting the
operation to announce itself:
- side effects: a resolved spec value changed that none of the edit's operations
  writes by name (set-strategy resetting `sync`, a default title following the kind);
- an edit no figure shows: the topology and timeline TeX render identically before and
  after (an all-reduce figure draws no weight flow, so recolouring it shows nothing);
- words that may have gone stale: a comment line mentioning a changed key's old value
  ("three workers" after add-worker), the end-of-line comment of a changed key, or a
  title or label the spec spells out that mentions it ("PS over 3 workers").
Must not import torch.
"""

from __future__ import annotations

import re

from ..contract import load_contract, schema_node
from ..errors import DtgenError
from ..figures.names import number_word
from ..spec import load_spec

MAX_SHOWN = 60  # characters of a value or comment quoted in a note


def edit_notes(name: str, old_text: str, new_text: str, old_data: dict, new_spec, operations: list[str]) -> list[str]:
    changes = _meaningful(changed_values(old_data, new_spec.data), new_spec.strategy.kind)
    written = _written_by(operations)
    # The keys the operations name come first, so a stale comment is pinned on them.
    changes = dict(sorted(changes.items(), key=lambda item: not _under(item[0], written)))
    notes = side_effects(changes, written, _written_in_file(old_text, new_text))
    notes += unchanged_figures(name, old_text, new_spec, changes)
    notes += stale_comments(new_text, new_spec, changes)
    notes += stale_strings(new_spec, changes)
    return notes


def flatten(data, prefix: str = "") -> dict:
    """{'a': {'b': 1}} -> {'a.b': 1}; lists stay values."""
    if not isinstance(data, dict) or (prefix and not data):
        return {prefix: data}
    out = {}
    for key, value in data.items():
        out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def changed_values(old: dict, new: dict) -> dict:
    """{dotted path: (old value, new value)} for every resolved leaf that differs (None: absent)."""
    before, after = flatten(old), flatten(new)
    return {path: (before.get(path), after.get(path)) for path in sorted(set(before) | set(after))
            if before.get(path) != after.get(path)}


def _shown(value) -> str:
    if value is None or value == {}:
        return "(unset)"
    text = repr(value)
    return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN - 3] + "..."


def _written_by(operations: list[str]) -> list[str]:
    contract_ops = load_contract()["edit_contract"]["operations"]
    return [path for operation in operations for path in contract_ops.get(operation, {}).get("writes", [])]


def _under(path: str, prefixes: list[str]) -> bool:
    return any(path == p or path.startswith(p + ".") for p in prefixes)


def _meaningful(changes: dict, kind: str) -> dict:
    # A strategy key another kind owns is a resolved default nobody reads (a
    # parameter-server spec's `stages` follows the worker count): not worth a note.
    from .operations import kind_keys

    owners = kind_keys()
    return {path: change for path, change in changes.items()
            if not (path.startswith("strategy.") and owners.get(path.split(".")[1], kind) != kind)}


def _written_in_file(old_text: str, new_text: str) -> list[str]:
    """The dotted keys whose text in the file the edit changed (not their resolved values)."""
    import yaml

    try:
        before, after = yaml.safe_load(old_text), yaml.safe_load(new_text)
    except yaml.YAMLError:
        return []
    if not isinstance(before, dict) or not isinstance(after, dict):
        return []
    return list(changed_values(before, after))


def side_effects(changes: dict, written: list[str], in_file: list[str] | None = None) -> list[str]:
    """A resolved value no operation names that changed. Said as a change only where the
    file shows it; a default that follows the edit is said to "now resolve" to its value."""
    notes = []
    for path, (old, new) in changes.items():
        if _under(path, written):
            continue
        if in_file is None or any(_under(path, [key]) or _under(key, [path]) for key in in_file):
            notes.append(f"side effect: {path} changed from {_shown(old)} to {_shown(new)}")
        else:
            notes.append(f"side effect: {path} now resolves to {_shown(new)} (was {_shown(old)}; a default, "
                         "not written in the file)")
    return notes


def unchanged_figures(name: str, old_text: str, new_spec, changes: dict) -> list[str]:
    from .texcheck import render_for_checks

    try:
        before = dict(render_for_checks(load_spec(name, text=old_text)))
    except DtgenError:  # the old spec broke a rule the edit fixed: nothing to compare
        return []
    after = dict(render_for_checks(new_spec))
    if any(drawn(before[figure]) != drawn(after[figure]) for figure in after):
        return []
    figures = " and ".join(after)
    if not changes:
        return [f"no figure changes: the edit only writes out values the spec already had (defaults), so the "
                f"{figures} figures are unchanged"]
    return [f"no figure changes: the {figures} figures render identically before and after "
            f"(the edit changes {', '.join(changes)}, which these figures do not show)"]


_STYLE_DEF = re.compile(r"^\s*([A-Za-z][\w-]*)/\.style\s*=")


def drawn(tex: str) -> str:
    """The TeX without definitions of styles nothing uses: recolouring a flow the figure
    does not draw changes only such a definition, and that shows nothing."""
    lines = tex.splitlines()
    defined = {m.group(1): i for i, line in enumerate(lines) if (m := _STYLE_DEF.match(line))}
    body = "\n".join(line for i, line in enumerate(lines) if i not in defined.values())
    unused = {i for name, i in defined.items() if not re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", body)}
    return "\n".join(line for i, line in enumerate(lines) if i not in unused)


_COMMENT = re.compile(r"(?:^|\s)#(.*)$")


def _identifier(path: str) -> bool:
    """Whether the key at `path` takes one of a list of names (an icon, a palette, a kind)."""
    node = schema_node(path)
    return isinstance(node, dict) and "enum" in node


def _value_patterns(value, path: str, prose: bool = False) -> list[re.Pattern]:
    """How a mention of `value` (the old value of `path`) looks in a comment, or with
    `prose` in a title or label the spec spells out.

    The old value of a key that takes a name from a list (figure.icons.server: server)
    is an identifier: it counts only as a whole name, never as part of a hyphenated one
    ('parameter-server' does not mention the icon 'server'); never where it is also the
    key's own name (the server role keeps its name when its icon changes: 'server' then
    names the role); and in prose only when it cannot be an ordinary word (a hyphenated
    name such as 'parameter-server'), since 'Parameter server' in a label is English; but
    a strategy's names (ring, tree, gpipe) do count in prose: a title saying "Ring
    all-reduce" names the method, and goes stale when the method changes."""
    if isinstance(value, str) and _identifier(path):
        plain_word = prose and not re.search(r"[-_]", value) and not path.startswith("strategy.")
        if value in path.split(".") or plain_word:
            return []
        return [re.compile(rf"(?<![\w-]){re.escape(value)}(?![\w-])", re.IGNORECASE)]
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, int):
        words = [str(value)] + ([number_word(value)] if 0 <= value < 10000 else [])
        if value in (0, 1):
            # "one process each", "1-based index": 0 and 1 are everywhere in prose, so they
            # count only next to what the key counts ("one server", "1 parameter server")
            noun = _counted(path)
            return [re.compile(rf"(?<![\w.]){re.escape(w)}(?:\s+[\w-]+){{0,2}}?\s+{noun}s?\b", re.IGNORECASE)
                    for w in words]
        return [re.compile(rf"(?<![\w.]){re.escape(w)}(?![\w.])", re.IGNORECASE) for w in words]
    if isinstance(value, float):
        return [re.compile(rf"(?<![\w.]){re.escape(format(value, 'g'))}(?![\w.])")]
    if isinstance(value, str) and len(value) >= 2:
        return [re.compile(rf"(?<!\w){re.escape(value)}(?!\w)", re.IGNORECASE)]
    return []


def _counted(path: str) -> str:
    """What a number at `path` counts, singular: topology.servers.count -> server."""
    parts = path.split(".")
    noun = parts[-2] if parts[-1] == "count" and len(parts) > 1 else parts[-1]
    noun = noun.replace("_", " ")
    return re.escape(noun[:-1] if noun.endswith("s") else noun)


def stale_comments(new_text: str, new_spec, changes: dict) -> list[str]:
    lines = new_text.splitlines()
    comments = {}
    for number, line in enumerate(lines, 1):
        match = _COMMENT.search(line)
        if match and not _inside_quotes(line, match.start()):
            comments[number] = match.group(1).strip()
    notes, seen = [], set()
    located = new_spec.located
    for path, (old, new) in changes.items():
        key_line = located.key_pos.get(tuple(path.split("."))) if located else None
        own = key_line[0] if key_line else None
        for number, comment in comments.items():
            if number in seen:  # one note per comment line, for the first key it may contradict
                continue
            found = next((m.group(0) for p in _value_patterns(old, path) if (m := p.search(comment))), None)
            if found or number == own:
                seen.add(number)
                why = (f"mentions {found!r}, the old value of {path}" if found
                       else f"sits on the changed line of {path}")
                notes.append(f"comment on line {number} {why} (now {_shown(new)}); check it still holds: "
                             f"# {comment[:MAX_SHOWN]}")
    return notes


def stale_strings(new_spec, changes: dict) -> list[str]:
    """Titles and labels written in the spec that mention a changed key's old value: the
    edit does not rewrite prose, so "over 3 workers" would stay in a 4-worker figure."""
    located = new_spec.located
    if located is None:
        return []
    notes = []
    for keys, (line, _) in sorted(located.value_pos.items(), key=lambda item: item[1]):
        value = _lookup(located.data, keys)
        if not isinstance(value, str) or not keys:
            continue
        key = ".".join(str(k) for k in keys)
        for path, (old, new) in changes.items():
            if path == key:
                continue
            found = next((m.group(0) for p in _value_patterns(old, path, prose=True) if (m := p.search(value))), None)
            if found:
                notes.append(f"{key} on line {line} mentions {found!r}, the old value of {path} (now {_shown(new)}); "
                             f"check it still holds: {_shown(value)}")
                break
    return notes


def _lookup(data, keys: tuple):
    for key in keys:
        try:
            data = data[key]
        except (KeyError, IndexError, TypeError):
            return None
    return data


def _inside_quotes(line: str, position: int) -> bool:
    # '#' inside a quoted scalar ("Worker #{i}") is not a comment.
    before = line[:position]
    return before.count('"') % 2 == 1 or before.count("'") % 2 == 1
