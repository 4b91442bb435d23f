"""The model as the predictor sees it: units with parameters, FLOPs and activation sizes.

A unit is what the calibration times (forward and backward) and what a pipeline stage
holds: the workload's prologue (embedding, stem), its blocks and its epilogue (head),
from opentikz_dt.workload, the same description the runner builds and the figures draw,
so every built-in model kind (mlp, transformer, cnn) is predicted from one table.
Gradient bytes, shard sizes and stage boundaries follow from it.
Must not import torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import DtgenError
from ..workload import model_section, workload_of


@dataclass(frozen=True)
class Block:
    name: str
    params: int            # parameter elements (float32: 4 bytes each)
    tensors: int           # parameter tensors (the optimizer pays a fixed cost per tensor)
    flops: float           # forward FLOPs per sample (backward is about twice)


def _workload(spec):
    workload = workload_of(spec)
    if workload is None:
        raise DtgenError(f"{spec.source}: training.model kind 'python' is only known once imported; "
                         "predictions need a built-in model kind (mlp, transformer, cnn)")
    return workload


def model_blocks(spec) -> list[Block]:
    """The units of the spec's model, in forward order."""
    return [Block(u.name, u.params, len(u.tensors), u.flops) for u in _workload(spec).units]


def model_signature(spec) -> dict:
    """What a calibration must match to be reused: the model and the per-worker batch."""
    section = {k: v for k, v in model_section(spec).items() if k != "args"}
    return {"model": section, "batch_size": spec.training.batch_size}


def stage_units(spec, stages: int) -> list[int]:
    """Unit index boundaries of a pipeline: stage i runs units bounds[i]..bounds[i+1]-1 (the
    runner's split: blocks spread with the first `blocks mod stages` stages one more, the
    prologue on the first stage, the epilogue on the last)."""
    parts = _workload(spec).stage_units(stages)
    bounds = [0]
    for part in parts:
        bounds.append(bounds[-1] + len(part))
    return bounds


def boundary_values(spec, stages: int) -> list[int]:
    """Activation values per sample crossing each stage boundary."""
    return list(_workload(spec).boundary_values(stages))


def tensor_sizes(spec) -> dict[str, int]:
    return _workload(spec).tensor_sizes()


def tied_names(spec) -> tuple:
    """Tensors the first and last pipeline stage both hold (their gradients are summed)."""
    return tuple(_workload(spec).tied)
