"""Each rank's order of operations under a multi-stage pipeline schedule, from torch's own
schedule class (its `pipeline_order`, the table its runtime executes), without a process
group: the class reads only the stages' indices and counts, so stand-in stages do.

`python -m opentikz_dt.runner.schedule_order SCHEDULE RANKS MICROBATCHES V` prints the
table as JSON ([[op, microbatch, stage], ...] per rank); the torch-free side
(opentikz_dt/strategies/pipeline_schedules.py) reads it from there. On failure: one line
on stderr, exit 1.
"""

from __future__ import annotations

import json
import sys

from opentikz_dt.strategies.pipeline_schedules import SCHEDULES, rank_stages


class _StandInStage:
    """What a schedule class's constructor reads of a PipelineStage."""

    submod = None

    def __init__(self, index: int, stages: int, ranks: int, rank: int):
        self.stage_index, self.num_stages, self.group_size, self.group_rank = index, stages, ranks, rank
        self.is_first, self.is_last = index == 0, index == stages - 1
        self.stage_index_to_group_rank: dict = {}


# The multi-stage schedules run from torch 2.13 on, the oldest release they were checked on:
# torch 2.10 has the classes, but its V schedules send a stage's shapes to the same rank
# over gloo ("Pair is not connected") and its stages call other chunk methods than the ones
# dtgen traces, so a run there would fail or draw no microbatch.
MULTI_STAGE_SINCE = (2, 13)


def schedule_class(name: str):
    """torch's class for `name`; None where this torch lacks it or predates MULTI_STAGE_SINCE
    for a multi-stage schedule."""
    import torch
    from torch.distributed.pipelining import schedules

    release = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])
    if SCHEDULES[name].placement != "one" and release < MULTI_STAGE_SINCE:
        return None
    return getattr(schedules, SCHEDULES[name].torch_class, None)


def torch_order(name: str, ranks: int, micro: int, v: int) -> list[list[tuple[str, int, int]]]:
    cls = schedule_class(name)
    if cls is None:
        import torch

        raise RuntimeError(f"torch {torch.__version__} has no {SCHEDULES[name].torch_class}")
    stages = [_StandInStage(i, ranks * v, ranks, 0) for i in rank_stages(name, 0, ranks, v)]
    table = cls(stages, micro, loss_fn=lambda output, target: output).pipeline_order
    return [_flatten(table[r]) for r in range(ranks)]


def _flatten(actions) -> list[tuple[str, int, int]]:
    """Compute actions only, an overlapped F+B pair (DualPipeV) as its parts in order."""
    out = []
    for a in actions:
        if a is None:
            continue
        parts = a.sub_actions if a.sub_actions else (a,)
        for part in parts:
            kind = part.computation_type.value
            if kind in ("F", "B", "I", "W"):
                out.append((kind, part.microbatch_index, part.stage_index))
    return out


def main(argv: list[str]) -> int:
    try:
        name, ranks, micro, v = argv[0], int(argv[1]), int(argv[2]), int(argv[3])
        print(json.dumps(torch_order(name, ranks, micro, v)))
    except Exception as e:  # one line for the torch-free caller, which reports it located
        print(f"torch's {argv[0] if argv else '?'} schedule refused: {e}".replace("\n", " "), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
