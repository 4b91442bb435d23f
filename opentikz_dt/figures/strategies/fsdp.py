"""Figures of sharded data parallelism (FSDP): so far only what loading an fsdp spec asks
(the timeline boxes its figures can hold, checked for colour vision). Its topology and
expected schedule are still to come: until then `dtgen figure` says so in one line.
Must not import torch."""

from __future__ import annotations

from ...errors import DtgenError

KIND = "fsdp"
# FSDP's all-gathers and reduce-scatters are traced as all-reduce phases
# (opentikz_dt/strategies/fsdp.py), drawn in the all-reduce's styles.
TIMELINE_BOXES = ("forward", "backward", "slowdown", "allreduce", "allreduce-b", "allreduce-c", "optimizer", "skipped",
                  "wait")


def _not_yet(*_args):
    raise DtgenError("dtgen cannot draw fsdp figures yet (topology and expected timeline: issue 22); "
                     "`dtgen run` runs fsdp specs and writes their trace and metrics")


layout = spacing_needs = expected_timeline = _not_yet


def table_name(spec) -> str:
    return "FSDP"
