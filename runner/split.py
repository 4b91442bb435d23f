"""Cut a model into pipeline stages that keep the full model's parameter names.

- mlp: its Linear layers (ReLU between), `stage_bounds` over the layers;
- transformer / cnn: the blocks over the stages; the first stage also runs the
  embedding (stem), the last the final norm and output layer (pool and head). The
  transformer's output layer is tied to the token embedding: the last stage keeps its
  own copy of `tok.weight`, and pipeline.py sums the two copies' gradients every step
  (as Megatron-LM does), so both copies stay equal and the update equals `single`'s;
- a python model that is an nn.Sequential: its children, `stage_bounds` over them.
Any other python model cannot be cut without knowing its forward: `stage_module`
raises one line saying how to make it splittable.
"""

from __future__ import annotations

from collections import OrderedDict

import torch
from torch import nn

from ..errors import InputError
from ..workload import stage_bounds
from .model import CNN, MLP, Transformer

TIED = {"transformer": ("tok.weight",)}  # parameters the first and last stage both hold


class MLPStage(nn.Module):
    """Layers lo..hi-1 of the MLP, keeping their names (`layers.{i}.*`) and ReLUs."""

    def __init__(self, model: MLP, lo: int, hi: int):
        super().__init__()
        self.last_layer = len(model.layers) - 1
        self.layers = nn.ModuleDict({str(i): model.layers[i] for i in range(lo, hi)})

    def forward(self, x):
        for name, layer in self.layers.items():
            x = layer(x)
            if int(name) < self.last_layer:
                x = torch.relu(x)
        return x


class TransformerStage(nn.Module):
    def __init__(self, model: Transformer, lo: int, hi: int, first: bool, last: bool):
        super().__init__()
        self.first, self.last = first, last
        if first or last:
            self.tok = model.tok  # the embedding, or the tied output layer's copy
        if first:
            self.pos = model.pos
        self.blocks = nn.ModuleDict({str(i): model.blocks[i] for i in range(lo, hi)})
        if last:
            self.norm = model.norm

    def forward(self, x):
        if self.first:
            x = self.tok(x) + self.pos(torch.arange(x.shape[1], device=x.device))
        for block in self.blocks.values():
            x = block(x)
        if self.last:
            x = nn.functional.linear(self.norm(x), self.tok.weight)
        return x


class CNNStage(nn.Module):
    def __init__(self, model: CNN, lo: int, hi: int, first: bool, last: bool):
        super().__init__()
        self.first, self.last = first, last
        if first:
            self.stem = model.stem
        self.blocks = nn.ModuleDict({str(i): model.blocks[i] for i in range(lo, hi)})
        if last:
            self.head = model.head

    def forward(self, x):
        if self.first:
            x = torch.relu(self.stem(x))
        for block in self.blocks.values():
            x = block(x)
        if self.last:
            x = self.head(x.mean(dim=(2, 3)))
        return x


def _blocks(model) -> int:
    if isinstance(model, MLP):
        return len(model.layers)
    if isinstance(model, (Transformer, CNN)):
        return len(model.blocks)
    return len(model)


def check_splittable(model, stages: int, where: str = "training.model") -> None:
    """InputError unless `model` can be cut into `stages` pipeline stages."""
    if not isinstance(model, (MLP, Transformer, CNN, nn.Sequential)):
        raise InputError(f"{where}: a pipeline cuts a python model only when it is an nn.Sequential (its layers in "
                       f"order); {type(model).__name__} is not: return nn.Sequential(...) of its layers from the "
                       "factory, or use a data-parallel strategy")
    if _blocks(model) < stages:
        raise InputError(f"{where}: {stages} pipeline stages need at least {stages} layers; "
                       f"the nn.Sequential has {_blocks(model)}")


def stage_module(model, rank: int, stages: int) -> nn.Module:
    """Stage `rank`'s part of `model`, parameter names as in the full model."""
    check_splittable(model, stages)
    bounds = stage_bounds(_blocks(model), stages)
    lo, hi = bounds[rank], bounds[rank + 1]
    first, last = rank == 0, rank == stages - 1
    if isinstance(model, MLP):
        return MLPStage(model, lo, hi)
    if isinstance(model, Transformer):
        return TransformerStage(model, lo, hi, first, last)
    if isinstance(model, CNN):
        return CNNStage(model, lo, hi, first, last)
    children = list(model.named_children())
    return nn.Sequential(OrderedDict(children[lo:hi]))
