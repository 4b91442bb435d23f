"""Figures of sharded data parallelism (FSDP). So far: the timeline boxes its figures hold
(checked for colour vision), so a run's measured timeline (`dtgen figure RUN --kind
timeline`: its all-gathers and reduce-scatters are all-reduce phases) and the memory
figures draw. Its topology and expected schedule are still to come: until then those
say so in one line. Must not import torch."""

from __future__ import annotations

from ...errors import DtgenError

KIND = "fsdp"
# FSDP's all-gathers and reduce-scatters are traced as all-reduce phases
# (opentikz_dt/strategies/fsdp.py), drawn in the all-reduce's styles.
TIMELINE_BOXES = ("forward", "backward", "slowdown", "allreduce", "allreduce-b", "allreduce-c", "optimizer", "skipped",
                  "wait")


def _not_yet(*_args):
    raise DtgenError("dtgen cannot draw fsdp's topology or expected timeline yet (issue 22); a run's measured "
                     "timeline and the memory figures draw: dtgen figure RUN_DIR --kind timeline (or --kind memory)")


layout = spacing_needs = expected_timeline = _not_yet


def table_name(spec) -> str:
    return "FSDP"
