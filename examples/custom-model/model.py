"""Your own model, dataset and loss for dtgen: plain PyTorch, nothing dtgen-specific.

spec.yaml names them as 'module:function'; dtgen looks the module up in the spec's
folder first, then on sys.path. Every rank calls the factory under the same seed, so
all ranks start from the same parameters.

The model is an nn.Sequential, so a pipeline can cut it between layers; any other
nn.Module trains with every data-parallel and parameter-server strategy.
"""

import torch
from torch import nn


def build(inputs: int = 16, hidden: int = 64, classes: int = 4) -> nn.Module:
    return nn.Sequential(
        nn.Linear(inputs, hidden), nn.LayerNorm(hidden), nn.GELU(),
        nn.Linear(hidden, hidden), nn.GELU(),
        nn.Linear(hidden, classes),
    )


class Blobs(torch.utils.data.Dataset):
    """Gaussian blobs: class k is a cloud around its own seeded centre."""

    def __init__(self, samples: int, inputs: int, classes: int, seed: int):
        gen = torch.Generator().manual_seed(seed)
        centres = 2.0 * torch.randn(classes, inputs, generator=gen)
        self.y = torch.randint(classes, (samples,), generator=gen)
        self.x = centres[self.y] + torch.randn(samples, inputs, generator=gen)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def blobs(samples: int = 4096, inputs: int = 16, classes: int = 4, seed: int = 0):
    return Blobs(samples, inputs, classes, seed)


def smooth_loss(logits, y):
    """Cross-entropy with label smoothing: a loss of your own, fn(output, y) -> scalar."""
    return nn.functional.cross_entropy(logits, y, label_smoothing=0.1)
