"""Figures of single-device training: one worker and its optimizer step, no communication.
Must not import torch."""

from __future__ import annotations

from ...figures.schedule import STEPS, Sim, one_panel
from ...figures.spacing import single_needs
from ...figures.topology_peer import single_layout

KIND = "single"
TIMELINE_BOXES = ("forward", "backward", "slowdown", "optimizer", "skipped")


def layout(spec, spacing):
    return single_layout(spec, spacing)


def spacing_needs(sizes):
    return single_needs(sizes)


def expected_timeline(spec, cost):
    sim, end = _schedule(spec, cost)
    return one_panel(spec, sim, end, "single device: forward, backward, optimizer step")


def _schedule(spec, cost) -> tuple[Sim, float]:
    sim = Sim(spec, cost)
    opt = max(cost.min_ms, 2 * sim.params / cost.flops_per_ms)
    t = 0.0
    for _ in range(STEPS + 1):
        t = sim.compute("w1", t)
        t = sim.add("w1", t, t + opt, "optimizer", "opt")
    return sim, t


def table_name(spec) -> str:
    return "single device"
