"""What a figures plugin (this package's __init__ lists the hooks) answers when its module
says nothing. layout, spacing_needs and expected_timeline have no default: every strategy
draws its own. Must not import torch."""

from __future__ import annotations

from ..texts import label_text
from ..timeline_styles import BOX_STYLES

TIMELINE_BOXES = tuple(BOX_STYLES)  # any box may appear
LANE_ROLE = "worker"
PIPELINED = False
WINDOW_STEPS = 3


def barrier(spec) -> bool:
    return False


def flow_run(spec) -> bool:
    return False


def flow_labels_once(spec) -> bool:
    return False


def annotate_measured(spec, layout, run):
    return layout  # the measured annotation (bytes on links, step times) is all


def lane_label(spec, worker_id: str) -> str:
    return spec.topology.workers.label_of(worker_id)


def more_lanes_text(spec, hidden: int) -> str:
    return label_text(spec, "more_workers", n=f"{hidden:,}")


def asynchronous(spec) -> bool:
    return False


def run_name(spec) -> str:
    return spec.strategy.kind.replace("-", " ")


def table_name(spec) -> str:
    return spec.strategy.kind


def bubble_reference(spec, stages: int, microbatches: int) -> tuple[float, str, str]:
    """(fraction, its formula in TeX, its numbers or "") of the bubble a measured pipelined
    run is compared with: by default GPipe's (p-1)/(m+p-1)."""
    return (stages - 1) / (microbatches + stages - 1), "$(p-1)/(m+p-1)$", ""


def schedules_timeline(spec, cost):
    """The `--kind schedules` figure (pipeline schedules side by side); by default refused."""
    from ...errors import DtgenError

    raise DtgenError(f"strategy.kind: --kind schedules draws the pipeline schedules of a kind: pipeline spec, "
                     f"not {spec.strategy.kind}")
