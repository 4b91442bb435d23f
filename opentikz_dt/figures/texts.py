"""The words dtgen itself writes into figures, in the spec's language.

The legend's box names, the timeline's panel titles, axis title and note, and the
caption over a parameter server's shards come from `figure.labels` (the schema holds
their English defaults), so a spec whose labels are Chinese gets a figure that reads in
Chinese throughout. Every one goes through texsafe.render_label like the other labels
(the labels-safe invariant checks them on load), and spec_needs_cjk sees them in the
spec's data. Must not import torch.
"""

from __future__ import annotations

from ..texsafe import render_label
from .model import Tex


def label_tex(spec, key: str) -> Tex:
    """One of figure.labels as safe TeX (escaped text, allow-listed math)."""
    return Tex(render_label(spec.figure.labels[key]))


def legend_names(spec) -> dict:
    """Box kind -> the name the timeline's legend gives it."""
    return dict(spec.figure.labels["legend"])


def server_group_caption(spec, line_break: str = " ") -> Tex:
    """TeX of the caption over the box of the shards: figure.labels.server_group with {n}
    the shard count. A fitted figure passes a line break: the caption then wraps before its
    parenthesis ("Parameter server" over "(2 shards)"), as long as no math spans the break."""
    text = spec.figure.labels["server_group"].replace("{n}", f"{spec.topology.servers.count:,}")
    head, paren, tail = text.partition(" (")
    if line_break != " " and paren and "$" not in head:
        return Tex(render_label(head) + line_break + render_label("(" + tail))
    return Tex(render_label(text))
