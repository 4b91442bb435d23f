"""A user's `python` model as the predictor sees it: units, tensors, FLOPs, activations.

The built-in model kinds are described without torch (opentikz_dt/workload.py). A
`python` model is known only once built, so the probe (`dtgen calibrate`) and the
launcher's preflight (for run.json) describe it here, in the same shape: an
nn.Sequential is one unit per child, what a pipeline cuts (runner/split.py); any other
module is one unit. opentikz_dt.predict.blocks.learn_model reads the description back.
"""

from __future__ import annotations

import torch
from torch import nn


def model_units(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """(parameter-name prefix, module) of each unit, in forward order."""
    if isinstance(model, nn.Sequential):
        return [(f"{name}.", child) for name, child in model.named_children()]
    return [("", model)]


def _forward_flops(module: nn.Module, x: torch.Tensor) -> tuple[float, torch.Tensor]:
    """(forward FLOPs of `module` on x, its output), counted by torch's FlopCounterMode."""
    from torch.utils.flop_counter import FlopCounterMode

    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        out = module(x)
    return float(counter.get_total_flops()), out


def describe_model(model: nn.Module, x: torch.Tensor) -> dict:
    """{"blocks": [{name, tensors: [[name, shape]], flops}], "activations": [...]}: FLOPs and
    activation values per sample, from a forward pass of the samples `x`."""
    rows = max(1, len(x))
    blocks, activations = [], []
    h = x
    for index, (prefix, unit) in enumerate(model_units(model)):
        flops, h = _forward_flops(unit, h)
        name = prefix.rstrip(".") or type(model).__name__
        tensors = [[prefix + n, list(p.shape)] for n, p in unit.named_parameters()]
        blocks.append({"name": f"{name} ({type(unit).__name__})" if prefix else name, "tensors": tensors,
                       "flops": flops / rows})
        activations.append(h[0].numel() if torch.is_tensor(h) and h.dim() > 0 else 0)
    return {"blocks": blocks, "activations": activations}
