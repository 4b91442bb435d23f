"""The model as the predictor sees it: blocks with parameters, FLOPs and activation sizes.

One block is the unit the calibration times (forward and backward) and the pipeline
splits over stages. Everything else (gradient bytes, shard sizes, activation bytes
between stages) follows from this table, so a new model kind only needs a new table.
Must not import torch.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Block:
    name: str
    params: int            # parameter elements (float32: 4 bytes each)
    tensors: int           # parameter tensors (the optimizer pays a fixed cost per tensor)
    flops: float           # forward FLOPs per sample (backward is about twice)
    out_elems: int         # activation elements per sample leaving the block (pipeline sends)


def model_blocks(spec) -> list[Block]:
    """The blocks of the spec's model, in forward order (the MLP: one Linear(+ReLU) each)."""
    widths = [int(w) for w in spec.training.layers]
    return [Block(f"layers.{i}", a * b + b, 2, 2.0 * a * b, b) for i, (a, b) in enumerate(zip(widths, widths[1:]))]


def model_signature(spec) -> dict:
    """What a calibration must match to be reused: the model and the per-worker batch."""
    return {"layers": [int(w) for w in spec.training.layers], "batch_size": spec.training.batch_size}


def param_bytes(blocks) -> int:
    return 4 * sum(b.params for b in blocks)


def stage_bounds(blocks: int, stages: int) -> list[int]:
    """Block boundaries of a pipeline: the first `blocks mod stages` stages get one more (as the runner)."""
    base, extra = divmod(blocks, stages)
    bounds = [0]
    for i in range(stages):
        bounds.append(bounds[-1] + base + (1 if i < extra else 0))
    return bounds
