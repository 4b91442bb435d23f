"""The model every strategy trains: a seeded MLP built from `training.model.layers`.

State-dict keys are `layers.{i}.weight` / `layers.{i}.bias`, the names in
`spec.training.param_tensors` (what parameter-server shards own).
"""

from __future__ import annotations

import torch
from torch import nn


class MLP(nn.Module):
    """Linear layers with ReLU between them (none after the last)."""

    def __init__(self, widths):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))

    def forward(self, x):
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < last:
                x = torch.relu(x)
        return x


def build_model(spec, device="cpu") -> MLP:
    """The same initial parameters on every rank: built on CPU from `training.seed`."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.training.seed)
        model = MLP(list(spec.training.layers))
    return model.to(device)


def build_optimizer(spec, params):
    return torch.optim.SGD(params, lr=spec.training.lr, momentum=spec.training.momentum)


def loss_fn(logits, y):
    return nn.functional.cross_entropy(logits, y)
