"""Figures of sharded data parallelism (FSDP): so far only what loading an fsdp spec asks
(the timeline boxes its figures can hold, checked for colour vision). Its topology and
expected schedule (layout, spacing_needs, expected_timeline) are still to come, so
`dtgen figure` cannot draw an fsdp spec yet. Must not import torch."""

from __future__ import annotations

KIND = "fsdp"
# FSDP's all-gathers and reduce-scatters are traced as all-reduce phases
# (opentikz_dt/strategies/fsdp.py), drawn in the all-reduce's styles.
TIMELINE_BOXES = ("forward", "backward", "slowdown", "allreduce", "allreduce-b", "allreduce-c", "optimizer", "skipped",
                  "wait")


def table_name(spec) -> str:
    return "FSDP (reshard after forward)" if spec.strategy.options.get("reshard_after_forward", True) else "FSDP"
