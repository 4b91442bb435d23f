"""Figures of pipeline parallelism: the stages left to right, lanes named after the stages,
the schedules a `--kind schedules` figure compares, and the bubble a pipelined run's is
compared with. Must not import torch."""

from __future__ import annotations

from ..pipeline_schedules import SCHEDULES, schedule_of, stages_per_rank
from ...figures.spacing import pipeline_needs
from ...figures.texts import label_text
from ...figures.topology_peer import pipeline_layout

KIND = "pipeline"
TIMELINE_BOXES = ("forward", "backward", "wgrad", "slowdown", "send", "recv", "optimizer", "skipped", "wait")
LANE_ROLE = "stage"
PIPELINED = True
WINDOW_STEPS = 2
SCHEDULE_NAMES = {name: s.printed for name, s in SCHEDULES.items()}


def schedule_name(spec) -> str:
    """The schedule as printed: GPipe, 1F1B, Interleaved 1F1B, ZB-V, ..."""
    return SCHEDULE_NAMES.get(spec.strategy.schedule, spec.strategy.schedule)


# ---------------------------------------------------------------- topology


def layout(spec, spacing):
    return pipeline_layout(spec, spacing, schedule_name(spec))


def spacing_needs(sizes):
    return pipeline_needs(sizes)


# ---------------------------------------------------------------- lanes


def lane_label(spec, worker_id: str) -> str:
    """A worker's lane is its stage (figure.labels.stage_lane)."""
    return label_text(spec, "stage_lane", i=worker_id[1:])


def more_lanes_text(spec, hidden: int) -> str:
    return label_text(spec, "more_stages", n=f"{hidden:,}")


# ---------------------------------------------------------------- measured figures


def run_name(spec) -> str:
    return f"{schedule_name(spec)} pipeline"


def table_name(spec) -> str:
    return f"{schedule_name(spec)} pipeline"


# ---------------------------------------------------------------- schedules side by side

# The schedules a comparison of pipeline schedules draws (`dtgen figure SPEC --kind schedules`).
COMPARED = ("gpipe", "1f1b", "interleaved-1f1b", "zbv-zero-bubble", "dualpipev")


def compared_schedules(spec) -> tuple:
    """(the spec under each schedule of COMPARED, the schedules left out, the title): one
    panel each for the spec's stages, microbatches and model, simulated on one time axis
    (predict/expected.py). A schedule the spec's shape cannot take (DualPipeV's 2p
    microbatches, the model's blocks for p x 2 stages) is left out and said so in the note."""
    from dataclasses import replace

    from .strategy import microbatch_rules

    s = spec.strategy
    blocks = workload_blocks(spec)
    variants, left_out = [], []
    for name in COMPARED:
        options = {key: val for key, val in s.options.items() if key != "stages_per_rank"}
        if schedule_of(name).fixed_v is None:
            options["stages_per_rank"] = stages_per_rank(replace(s, schedule=name))
        one = replace(spec, strategy=replace(s, schedule=name, options=options))
        v = stages_per_rank(one.strategy)
        problems = [m for _, m in microbatch_rules(name, s.microbatches, s.stages)]
        if blocks is not None and s.stages * v > blocks:
            problems.append(f"{s.stages} x {v} stages, the model has {blocks} blocks")
        if problems:
            left_out.append(schedule_of(name).printed)
            continue
        variants.append(one)
    return tuple(variants), tuple(left_out), f"Pipeline schedules: {s.stages} stages, {s.microbatches} microbatches"


def workload_blocks(spec) -> int | None:
    """The model's blocks (layers) a stage is cut from; None for a python model."""
    from ...workload import workload_of

    w = workload_of(spec)
    return None if w is None else len(w.blocks)


def bubble_reference(spec, stages: int, microbatches: int) -> tuple[float, str, str]:
    """The spec's schedule's own reference bubble (pipeline_schedules.reference_bubble)."""
    from ...strategies.pipeline_schedules import reference_bubble, stages_per_rank

    return reference_bubble(spec.strategy.schedule, stages, microbatches, stages_per_rank(spec.strategy))
