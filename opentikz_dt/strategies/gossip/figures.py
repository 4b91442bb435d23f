"""Figures of decentralized gossip: a ring of peers. Must not import torch."""

from __future__ import annotations

from ...figures.spacing import gossip_needs
from ...figures.topology_peer import gossip_layout

KIND = "gossip"
TIMELINE_BOXES = ("forward", "backward", "slowdown", "gossip", "optimizer", "skipped", "wait")


def layout(spec, spacing):
    return gossip_layout(spec, spacing)


def spacing_needs(sizes):
    return gossip_needs(sizes)


def table_name(spec) -> str:
    return "gossip"
