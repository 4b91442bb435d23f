"""Training data and the global-batch rule of docs/dev/runner-interface.md.

Step `s` of a run with data-parallel width D uses the global batch of `batch_size*D`
rows at positions `s*G .. s*G+G-1` of an endless sequence of seeded epoch permutations
(G = batch_size*D). The rows depend on G, not on D, so any split of the same global batch
sees the same data; worker k takes rows `k*B:(k+1)*B`.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..errors import RunError


def load_arrays(spec, dataset_path: str | None = None):
    """(x float32 [N, in], y int64 [N]) on CPU: synthetic, or the spec's .npz file."""
    ds, widths = spec.training.dataset, spec.training.layers
    if ds.get("kind", "synthetic") == "file":
        import numpy as np

        path = Path(dataset_path or ds["path"])
        try:
            arrays = np.load(path)
            x, y = torch.as_tensor(arrays["x"], dtype=torch.float32), torch.as_tensor(arrays["y"], dtype=torch.int64)
        except (OSError, KeyError, ValueError) as exc:
            raise RunError(f"{path}: cannot read x and y from the dataset: {exc}") from None
        if x.ndim != 2 or x.shape[1] != widths[0] or y.shape != (x.shape[0],):
            raise RunError(f"{path}: x must be N x {widths[0]} and y N labels, got {tuple(x.shape)} and {tuple(y.shape)}")
        return x, y
    gen = torch.Generator().manual_seed(int(ds.get("seed", 0)))
    n, d_in, classes = int(ds.get("samples", 16384)), widths[0], widths[-1]
    x = torch.randn(n, d_in, generator=gen)
    teacher = torch.randn(d_in, classes, generator=gen)
    y = (x @ teacher).argmax(dim=1)
    return x, y


class Data:
    """The dataset on one device plus the deterministic batch order."""

    def __init__(self, spec, device, dataset_path: str | None = None):
        x, y = load_arrays(spec, dataset_path)
        self.x, self.y = x.to(device), y.to(device)
        self.n = x.shape[0]
        self.batch_size = spec.training.batch_size
        self.seed = int(spec.training.dataset.get("seed", 0))
        self._perms: dict[int, torch.Tensor] = {}

    def _perm(self, epoch: int) -> torch.Tensor:
        perm = self._perms.get(epoch)
        if perm is None:
            gen = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch + 1)
            perm = torch.randperm(self.n, generator=gen)
            self._perms = {epoch: perm}  # keep one epoch: steps walk forward
        return perm

    def indices(self, step: int, global_size: int) -> torch.Tensor:
        start = step * global_size
        first, last = start // self.n, (start + global_size - 1) // self.n
        if first == last:  # the common case: one epoch, one slice
            return self._perm(first)[start % self.n:start % self.n + global_size]
        pos = torch.arange(start, start + global_size)
        epochs = pos // self.n
        out = torch.empty(global_size, dtype=torch.int64)
        for epoch in epochs.unique().tolist():
            mask = epochs == epoch
            out[mask] = self._perm(epoch)[pos[mask] % self.n]
        return out

    def batch(self, step: int, part: int, parts: int):
        """Rows of worker `part` (of `parts`) for `step`; the global batch is batch_size*parts."""
        idx = self.indices(step, self.batch_size * parts)[part * self.batch_size:(part + 1) * self.batch_size]
        idx = idx.to(self.x.device)
        return self.x[idx], self.y[idx]
