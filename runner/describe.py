"""A user's `python` model as the predictor sees it: units, tensors, FLOPs, activations.

The built-in model kinds are described without torch (opentikz_dt/workload.py). A
`python` model is known only once built, so the probe (`dtgen calibrate`) and the
launcher's preflight (for run.json) describe it here, in the same shape: an
nn.Sequential is one unit per child, what a pipeline cuts (runner/split.py); any other
module is one unit. opentikz_dt.predict.blocks.learn_model reads the description back.
"""

from __future__ import annotations

from pathlib import Path

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


def step_flops(model: nn.Module, loss_fn, x: torch.Tensor, y: torch.Tensor) -> dict:
    """{"forward": F, "backward": B, "samples": n}: FLOPs per sample of one trial training
    step on (x, y), the forward with the loss and the backward each counted by torch's
    FlopCounterMode (what autograd really runs: a frozen layer's weight gradient is not
    counted, an input gradient the first layer does not need is not either)."""
    from torch.utils.flop_counter import FlopCounterMode

    model.zero_grad(set_to_none=True)
    with FlopCounterMode(display=False) as forward:
        loss = loss_fn(model(x), y)
    with FlopCounterMode(display=False) as backward:
        loss.backward()
    model.zero_grad(set_to_none=True)
    rows = max(1, len(x))
    return {"forward": float(forward.get_total_flops()) / rows,
            "backward": float(backward.get_total_flops()) / rows, "samples": rows}


def count_python_model(spec, spec_path) -> dict:
    """A python model built on the CPU and one trial step counted on one sample of its
    dataset: describe_model's description with "step" (step_flops) added, learned by the
    predictor (opentikz_dt.predict.blocks.learn_model) so its datasheet costs can use it."""
    from ..predict.blocks import learn_model
    from ..workload import model_section
    from .data import Data
    from .model import build_model, make_loss

    spec_dir = Path(spec_path).resolve().parent  # the model's module and a dataset file: beside the spec
    dataset = spec.training.dataset
    dataset_path = str((spec_dir / dataset["path"]).resolve()) if dataset.get("kind") in ("file", "text") else None
    torch.manual_seed(spec.training.seed)
    data = Data(spec, "cpu", dataset_path, str(spec_dir))
    x, y = data.take(data.indices(0, 1))
    model = build_model(spec, "cpu", spec_dir)
    description = describe_model(model, x)
    description["step"] = step_flops(model, make_loss(spec, spec_dir), x, y)
    learn_model(model_section(spec), description)
    return description
