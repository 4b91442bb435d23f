"""From a figure's node names back to the spec: which key (and line) a node comes from.

The TeX invariants speak in node ids ('w2-label' and 'w1-w2-grad-label' overlap); a
user or agent edits the spec. `locate_figure_problem` rewrites such a finding to name
the spec keys behind each node, with the line they sit on, and points the issue at the
first of them. Must not import torch.
"""

from __future__ import annotations

import re

from ..errors import Issue
from ..strategies import plugin
from ..yamlpos import dotted

_QUOTED = re.compile(r"'([A-Za-z][\w-]*)'")
_FLOW_LABEL = {"grad": ("figure", "labels", "grad"), "wts": ("figure", "labels", "weight"),
               "data": ("figure", "labels", "batch")}
SPACING_HINT = "make room with change-spacing (figure.colsep / figure.rowsep) or shorten a label"


def spec_path_of(node: str, spec) -> tuple | None:
    """The spec key that decides what node `node` shows (None: layout only)."""
    parts = node.split("-")
    head = parts[0]
    if len(parts) >= 3 and parts[-1] == "label" and parts[-2] in _FLOW_LABEL:
        return _FLOW_LABEL[parts[-2]]
    if node.endswith("-more"):
        return ("figure", "max_workers_drawn")
    if head == "title":
        return ("title",)
    if head == "data":
        return ("topology", "data", "label")
    if re.fullmatch(r"w[1-9][0-9]*", head):
        if head in spec.topology.workers.labels:
            return ("topology", "workers", "labels", head)
        return ("topology", "workers", "label")
    if re.fullmatch(r"ps[1-9]?[0-9]*|psgroup", head):
        return ("topology", "servers", "label")
    if re.fullmatch(r"h[1-9][0-9]*", head):
        return ("topology", "hosts")
    if re.fullmatch(r"s[1-9][0-9]*", head):
        return ("strategy", "stages")
    return plugin(spec.strategy.kind).node_spec_path(node, parts)  # nodes only one strategy draws


def locate_figure_problem(spec, invariant: str, message: str) -> Issue:
    """An Issue for one TeX-invariant finding, located at the spec key of its first node."""
    located = spec.located
    file = located.file if located else spec.source
    paths = []
    for node in _QUOTED.findall(message):
        path = spec_path_of(node, spec)
        if path is not None and located is not None:
            line, _ = located.where(path, prefer_value=False)
            paths.append((node, path, line))
    if not paths:
        anchor = _invariant_path(invariant)
        if anchor and located is not None:
            line, col = located.where(anchor, prefer_value=True)
            return Issue(file, line, col, dotted(anchor), f"{message} [invariant {invariant}]")
        return Issue(file, 1, 1, "", f"{message} [invariant {invariant}]")
    where = "; ".join(f"{node} comes from {dotted(path)} (line {line})" for node, path, line in paths)
    hint = f"; {SPACING_HINT}" if invariant == "no-overlaps" else ""
    first = paths[0][1]
    line, col = located.where(first, prefer_value=False)
    return Issue(file, line, col, dotted(first), f"{message}: {where}{hint} [invariant {invariant}]")


def _invariant_path(invariant: str) -> tuple | None:
    """The spec key an invariant is about, when its contract entry names one (spec_path)."""
    from ..contract import load_contract

    for entry in load_contract()["edit_contract"]["invariants"]:
        if entry["id"] == invariant and entry.get("spec_path"):
            return tuple(entry["spec_path"].split("."))
    return None
