"""How the toy strategy is drawn: the single-device topology, and a timeline of forward,
backward and optimizer boxes."""

from opentikz_dt.figures.schedule import STEPS, Sim, one_panel
from opentikz_dt.figures.spacing import single_needs
from opentikz_dt.figures.topology_peer import single_layout

KIND = "toy"
TIMELINE_BOXES = ("forward", "backward", "slowdown", "optimizer", "skipped")


def layout(spec, spacing):
    return single_layout(spec, spacing)


def spacing_needs(sizes):
    return single_needs(sizes)


def expected_timeline(spec, cost):
    sim = Sim(spec, cost)
    t = 0.0
    for _ in range(STEPS + 1):
        t = sim.compute("w1", t)
        t = sim.add("w1", t, t + cost.min_ms, "optimizer", "opt")
    return one_panel(spec, sim, t, "toy: forward, backward, optimizer step")
