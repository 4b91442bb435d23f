"""Figures of single-device training: one worker and its optimizer step, no communication.
Must not import torch."""

from __future__ import annotations

from ...figures.spacing import single_needs
from ...figures.topology_peer import single_layout

KIND = "single"
TIMELINE_BOXES = ("forward", "backward", "slowdown", "optimizer", "skipped")


def layout(spec, spacing):
    return single_layout(spec, spacing)


def spacing_needs(sizes):
    return single_needs(sizes)


def table_name(spec) -> str:
    return "single device"
