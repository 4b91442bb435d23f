"""How the toy strategy is drawn: the single-device topology (its expected timeline is its
predict plugin's simulation, as every strategy's)."""

from opentikz_dt.figures.spacing import single_needs
from opentikz_dt.figures.topology_peer import single_layout

KIND = "toy"
TIMELINE_BOXES = ("forward", "backward", "slowdown", "optimizer", "skipped")


def layout(spec, spacing):
    return single_layout(spec, spacing)


def spacing_needs(sizes):
    return single_needs(sizes)
