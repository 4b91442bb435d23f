"""Training data and the global-batch rule of docs/dev/runner-interface.md.

Step `s` of a run with data-parallel width D uses the global batch of `batch_size*D`
samples at positions `s*G .. s*G+G-1` of an endless sequence of seeded epoch
permutations (G = batch_size*D). The samples depend on G, not on D, so any split of
the same global batch sees the same data; worker k takes samples `k*B:(k+1)*B`. This
holds for every dataset kind: all of them are indexed the same way.

Kinds: synthetic (seeded, shaped for the model: rows with a linear teacher for the mlp
and python models, token streams from a seeded Markov chain for the transformer and
python models declared with `input: tokens`,
images labelled by a random convolutional teacher for the cnn), file (.npz or .pt with
tensors x and y; .pt is read with weights_only=True, never unpickling objects), text (a
UTF-8 file as byte tokens: sample i is bytes [i*T, i*T+T] shifted by one for targets)
and python (a user function returning a map-style Dataset of (x, y) pairs, collated
per batch).

`training.eval: {samples: H}` holds H samples out (held_out_split): the batch order
above then walks the other n - H, so no training step of any strategy sees them.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..errors import InputError
from ..workload import takes_tokens
from .entry import call_entry, resolve_entry, spec_location


def _synthetic_rows(gen, n: int, shape, classes: int):
    x = torch.randn(n, *shape, generator=gen)
    teacher = torch.randn(x[0].numel(), classes, generator=gen)
    return x, (x.reshape(n, -1) @ teacher).argmax(dim=1)


def _synthetic_tokens(gen, n: int, seq_len: int, vocab: int):
    """Sequences of a seeded Markov chain: each token is followed by one fixed successor
    80% of the time (so the loss can fall well below log(vocab)), else a random token."""
    successor = torch.randperm(vocab, generator=gen)
    tokens = torch.empty(n, seq_len + 1, dtype=torch.int64)
    tokens[:, 0] = torch.randint(vocab, (n,), generator=gen)
    for t in range(seq_len):
        follow = torch.rand(n, generator=gen) < 0.8
        noise = torch.randint(vocab, (n,), generator=gen)
        tokens[:, t + 1] = torch.where(follow, successor[tokens[:, t]], noise)
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def _synthetic_images(gen, n: int, channels: int, size: int, classes: int):
    """N(0,1) images labelled by the strongest of `classes` random 3x3 filters (after
    ReLU, averaged over the image): learnable by a small convolutional network."""
    x = torch.randn(n, channels, size, size, generator=gen)
    filters = torch.randn(classes, channels, 3, 3, generator=gen)
    scores = torch.cat([torch.relu(torch.nn.functional.conv2d(chunk, filters, padding=1)).mean(dim=(2, 3))
                        for chunk in x.split(1024)])
    return x, scores.argmax(dim=1)


def synthetic_arrays(spec):
    ds, m = spec.training.dataset, spec.training.model or {"kind": "mlp", "layers": list(spec.training.layers)}
    gen = torch.Generator().manual_seed(int(ds.get("seed", 0)))
    n, kind = int(ds.get("samples", 16384)), m["kind"]
    if kind == "mlp":
        return _synthetic_rows(gen, n, (m["layers"][0],), m["layers"][-1])
    if takes_tokens(m):  # the transformer, or a python model declared with input: tokens
        return _synthetic_tokens(gen, n, m["seq_len"], m["vocab"])
    if kind == "cnn":
        return _synthetic_images(gen, n, m["channels"], m["image_size"], m["classes"])
    return _synthetic_rows(gen, n, tuple(ds["shape"]), ds["classes"])


def _as_tensor(value, name: str, path: Path) -> torch.Tensor:
    try:
        t = torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError):
        raise InputError(f"{path}: {name} is not numeric (dtype {getattr(value, 'dtype', type(value).__name__)});"
                       " use float inputs and integer labels") from None
    if t.dtype == torch.bool or t.is_complex():
        raise InputError(f"{path}: {name} has dtype {t.dtype}; use float inputs and integer labels")
    return t.float() if t.is_floating_point() else t.long()


def load_file(path: Path):
    """(x, y) from a .npz or .pt; InputError naming the file otherwise."""
    try:
        if path.suffix == ".pt":
            obj = _load_pt(path)
            if not isinstance(obj, dict) or "x" not in obj or "y" not in obj:
                raise InputError(f"{path}: expected a dict with tensors 'x' and 'y', got {type(obj).__name__}"
                               + (f" with keys {sorted(obj)}" if isinstance(obj, dict) else ""))
            x, y = obj["x"], obj["y"]
        else:
            import numpy as np

            with np.load(path, allow_pickle=False) as arrays:
                x, y = arrays["x"], arrays["y"]
    except InputError:
        raise
    except (OSError, KeyError, ValueError, EOFError, RuntimeError) as exc:
        raise InputError(f"{path}: cannot read x and y from the dataset: {exc}") from None
    x, y = _as_tensor(x, "x", path), _as_tensor(y, "y", path)
    if x.ndim == 0 or y.ndim == 0 or x.shape[0] != y.shape[0]:
        raise InputError(f"{path}: x and y must hold one sample per row (the same count), "
                       f"got {tuple(x.shape)} and {tuple(y.shape)}")
    return x, y


def _load_pt(path: Path):
    import pickle

    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise InputError(f"{path}: refused: this .pt holds Python objects that only weights_only=False would load, "
                       f"and unpickling can run arbitrary code; save plain tensors (torch.save({{'x': x, 'y': y}})) "
                       f"or an .npz ({first[:120]})") from None


def load_text(path: Path, seq_len: int):
    """Byte tokens of a UTF-8 file: x [N, T], y [N, T] (y is x shifted by one)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise InputError(f"{path}:{line}: not UTF-8 text (byte {exc.start}: {raw[exc.start:exc.start + 1]!r}); "
                       "a text dataset is a UTF-8 file") from None
    n = (len(raw) - 1) // seq_len
    if n < 1:
        raise InputError(f"{path}: {len(raw)} bytes hold no sample of seq_len {seq_len} + 1 tokens")
    tokens = torch.frombuffer(bytearray(raw[:n * seq_len + 1]), dtype=torch.uint8).long()
    x = tokens[:-1].view(n, seq_len)
    y = tokens[1:].view(n, seq_len)
    return x.contiguous(), y.contiguous()


def load_python_dataset(spec, spec_dir):
    ds = spec.training.dataset
    key = ("training", "dataset", "entry")
    fn = resolve_entry(ds["entry"], spec, key, spec_dir)
    dataset = call_entry(fn, dict(ds.get("args", {})), spec, key, ds["entry"])
    if not (hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")):
        raise InputError(f"{spec_location(spec, key)}: {ds['entry']} returned {type(dataset).__name__}, "
                       "not a map-style Dataset (it needs __len__ and __getitem__)")
    return dataset


def _check_mlp_rows(spec, path, x, y) -> None:
    widths = spec.training.layers
    if widths and (x.ndim != 2 or x.shape[1] != widths[0] or y.shape != (x.shape[0],)):
        raise InputError(f"{path}: x must be N x {widths[0]} and y N labels, got {tuple(x.shape)} and {tuple(y.shape)}")


def load_arrays(spec, dataset_path: str | None = None, spec_dir=None):
    """(x, y) on CPU for tensor-backed kinds (synthetic, file, text)."""
    ds = spec.training.dataset
    kind = ds.get("kind", "synthetic")
    if kind == "synthetic":
        return synthetic_arrays(spec)
    path = Path(dataset_path or Path(spec_dir or ".") / ds["path"])
    if kind == "text":
        return load_text(path, spec.training.model["seq_len"])  # a rule keeps text for models that take tokens
    x, y = load_file(path)
    _check_mlp_rows(spec, path, x, y)
    return x, y


def held_out_split(spec, n: int, seed: int):
    """(held-out indices, training indices or None) for `training.eval: {samples: H}`: H
    samples chosen by a seeded permutation of the whole dataset (its own stream, so the
    same H rows whatever the strategy or width), kept out of every training batch."""
    held = int((spec.data.get("training", {}).get("eval") or {}).get("samples", 0))
    if not held:
        return torch.empty(0, dtype=torch.int64), None
    where = spec_location(spec, ("training", "eval", "samples"))
    if held >= n:
        raise InputError(f"{where}: {held} held-out samples leave none of the dataset's {n} to train on")
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 1_000_003 + 999_983))
    return order[:held].sort().values, order[held:].sort().values


class Data:
    """The dataset plus the deterministic batch order; batches land on `device`.

    Tensor-backed kinds are copied to the device once, at start: a batch is then a
    gather on the device and never waits for the host. A python Dataset is collated on
    the host per batch; on a GPU into pinned memory and copied with non_blocking, so the
    copy is queued behind the previous step's kernels instead of stalling them."""

    def __init__(self, spec, device, dataset_path: str | None = None, spec_dir=None):
        self.device = torch.device(device)
        self.dataset = None
        if spec.training.dataset.get("kind") == "python":
            self.dataset = load_python_dataset(spec, spec_dir)
            self.n = len(self.dataset)
        else:
            x, y = load_arrays(spec, dataset_path, spec_dir)
            self.x, self.y = x.to(self.device), y.to(self.device)
            self.n = x.shape[0]
        if self.n < 1:
            raise InputError(f"{spec_location(spec, ('training', 'dataset'))}: the dataset is empty")
        self.batch_size = spec.training.batch_size
        self.seed = int(spec.training.dataset.get("seed", 0))
        self._perms: dict[int, torch.Tensor] = {}
        self.held_out, self._pool = held_out_split(spec, self.n, self.seed)
        if self._pool is not None:
            self.n = len(self._pool)  # training batches are drawn from the rest only

    def eval_batches(self, size: int = 256):
        """The held-out samples (training.eval), in chunks of `size`."""
        for start in range(0, len(self.held_out), size):
            yield self.take(self.held_out[start:start + size])

    def _perm(self, epoch: int) -> torch.Tensor:
        perm = self._perms.get(epoch)
        if perm is None:
            gen = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch + 1)
            perm = torch.randperm(self.n, generator=gen)
            if self._pool is not None:
                perm = self._pool[perm]  # positions in the training part -> dataset indices
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

    def take(self, idx: torch.Tensor):
        """The samples at `idx` as (x, y) on the device."""
        if self.dataset is None:
            idx = idx.to(self.x.device)
            return self.x[idx], self.y[idx]
        pairs = [self.dataset[i] for i in idx.tolist()]
        x = torch.stack([torch.as_tensor(p[0]) for p in pairs])
        y = torch.stack([torch.as_tensor(p[1]) for p in pairs])
        if self.device.type == "cuda":  # GPU-only path: page-locked staging, copy queued on the stream
            return x.pin_memory().to(self.device, non_blocking=True), y.pin_memory().to(self.device, non_blocking=True)
        return x, y

    def batch(self, step: int, part: int, parts: int):
        """Samples of worker `part` (of `parts`) for `step`; the global batch is batch_size*parts."""
        idx = self.indices(step, self.batch_size * parts)[part * self.batch_size:(part + 1) * self.batch_size]
        return self.take(idx)
