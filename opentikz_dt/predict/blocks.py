"""The model as the predictor sees it: units with parameters, FLOPs and activation sizes.

A unit is what the calibration times (forward and backward) and what a pipeline stage
holds: the workload's prologue (embedding, stem), its blocks and its epilogue (head),
from opentikz_dt.workload, the same description the runner builds and the figures draw,
so every built-in model kind (mlp, transformer, cnn) is predicted from one table.
Gradient bytes, shard sizes and stage boundaries follow from it. A `python` model is
described by the calibration or run that built it (`learn_model`).
Must not import torch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..errors import DtgenError
from ..workload import Unit, Workload, model_section, workload_of


@dataclass(frozen=True)
class Block:
    name: str
    params: int            # parameter elements (float32: 4 bytes each)
    tensors: int           # parameter tensors (the optimizer pays a fixed cost per tensor)
    flops: float           # forward FLOPs per sample (backward is about twice)


# `python` models, as a calibration or a run described them once built (runner/describe.py),
# keyed by their training.model section: a process learns one when it loads such a file.
_LEARNED: dict[str, Workload] = {}
# and, where it was counted, one trial step's FLOPs per sample ({"forward", "backward"},
# runner/describe.step_flops): what the datasheet costs of such a model use
_STEP_FLOPS: dict[str, dict] = {}


def _key(model: dict) -> str:
    return json.dumps(model, sort_keys=True)


def learn_model(model: dict, description: dict) -> None:
    """Make the python model `model` (a training.model section) known to predictions."""
    blocks = tuple(Unit(str(b["name"]), tuple((str(n), tuple(shape)) for n, shape in b["tensors"]),
                        float(b["flops"])) for b in description["blocks"])
    _LEARNED[_key(model)] = Workload("python", blocks, activations=tuple(description.get("activations", ())))
    if description.get("step"):
        _STEP_FLOPS[_key(model)] = {"forward": float(description["step"]["forward"]),
                                    "backward": float(description["step"]["backward"])}


def step_flops(spec) -> dict | None:
    """A python model's counted trial step ({"forward", "backward"} FLOPs per sample), or None."""
    return _STEP_FLOPS.get(_key(model_section(spec)))


def _workload(spec):
    workload = workload_of(spec) or _LEARNED.get(_key(model_section(spec)))
    if workload is None:
        raise DtgenError(f"{spec.source}: training.model kind 'python' is only known once built: calibrate it "
                         "(dtgen calibrate SPEC), then predict with that calibration")
    return workload


def is_known(spec) -> bool:
    """Whether predictions can describe the spec's model (built in, or a learned python model)."""
    return workload_of(spec) is not None or _key(model_section(spec)) in _LEARNED


def model_blocks(spec) -> list[Block]:
    """The units of the spec's model, in forward order."""
    return [Block(u.name, u.params, len(u.tensors), u.flops) for u in _workload(spec).units]


def model_signature(spec) -> dict:
    """What a calibration must match to be reused: the model and the per-worker batch."""
    return {"model": model_section(spec), "batch_size": spec.training.batch_size}


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
