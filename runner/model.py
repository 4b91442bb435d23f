"""The models a run trains: the built-in mlp, transformer and cnn, or the user's own.

Built-in parameter names and shapes are exactly those of opentikz_dt.workload (what the
figures draw and parameter-server shards own; tests/test_runner_workloads.py checks it).
Every rank builds the same initial parameters: on CPU, from `training.seed`, then moved.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.checkpoint import checkpoint

from ..errors import InputError
from .entry import call_entry, resolve_entry


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


def _recomputed(fn, *args):
    """`fn(*args)` keeping only its inputs for the backward, which runs it again
    (torch.utils.checkpoint, non-reentrant: the form torch's own checkpoint wrapper uses)."""
    return checkpoint(fn, *args, use_reentrant=False)


def _attention_core(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class Attention(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.recompute_core = False  # training.recompute: selective

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = _recomputed(_attention_core, q, k, v) if self.recompute_core else _attention_core(q, k, v)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class FeedForward(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.fc = nn.Linear(d, 4 * d)
        self.proj = nn.Linear(4 * d, d)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x)))


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(ln1(x)), then + mlp(ln2(x))."""

    def __init__(self, d: int, heads: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = Attention(d, heads)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = FeedForward(d)
        self.recompute = False  # training.recompute: full

    def forward(self, x):
        return _recomputed(self._forward, x) if self.recompute else self._forward(x)

    def _forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Transformer(nn.Module):
    """Decoder-only language model: token + position embedding, blocks, final norm, and
    an output layer tied to the token embedding. Input [B, T] token ids, output
    [B, T, vocab] logits for the next token."""

    def __init__(self, layers: int, d_model: int, heads: int, seq_len: int, vocab: int):
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(seq_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(d_model)
        for emb in (self.tok, self.pos):  # N(0, 1) would make the tied logits huge
            nn.init.normal_(emb.weight, std=0.02)

    def embed(self, x):
        return self.tok(x) + self.pos(torch.arange(x.shape[1], device=x.device))

    def head(self, h):
        return F.linear(self.norm(h), self.tok.weight)

    def forward(self, x):
        h = self.embed(x)
        for block in self.blocks:
            h = block(h)
        return self.head(h)


class ResBlock(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.conv1 = nn.Conv2d(width, width, 3, padding=1)
        self.conv2 = nn.Conv2d(width, width, 3, padding=1)
        self.recompute = False  # training.recompute: full

    def forward(self, x):
        return _recomputed(self._forward, x) if self.recompute else self._forward(x)

    def _forward(self, x):
        return torch.relu(x + self.conv2(torch.relu(self.conv1(x))))


class CNN(nn.Module):
    """Residual image classifier: 3x3 stem, residual blocks at full resolution, global
    average pool, linear head. No batch norm: its batch statistics would make a
    data-parallel step differ from one step on the global batch."""

    def __init__(self, layers: int, channels: int, image_size: int, width: int, classes: int):
        super().__init__()
        self.stem = nn.Conv2d(channels, width, 3, padding=1)
        self.blocks = nn.ModuleList(ResBlock(width) for _ in range(layers))
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        x = torch.relu(self.stem(x))
        for block in self.blocks:
            x = block(x)
        return self.head(x.mean(dim=(2, 3)))


def _builtin(m: dict) -> nn.Module:
    kind = m["kind"]
    if kind == "mlp":
        return MLP(list(m["layers"]))
    if kind == "transformer":
        return Transformer(m["layers"], m["d_model"], m["heads"], m["seq_len"], m["vocab"])
    return CNN(m["layers"], m["channels"], m["image_size"], m["width"], m["classes"])


def _user_model(spec, spec_dir) -> nn.Module:
    m = spec.training.model
    key = ("training", "model", "entry")
    factory = resolve_entry(m["entry"], spec, key, spec_dir)
    model = call_entry(factory, dict(m.get("args", {})), spec, key, m["entry"])
    if not isinstance(model, nn.Module):
        from .entry import spec_location

        raise InputError(f"{spec_location(spec, key)}: {m['entry']} returned {type(model).__name__}, "
                       "not a torch nn.Module")
    return model


def build_model(spec, device="cpu", spec_dir=None) -> nn.Module:
    """The same initial parameters on every rank: built on CPU from `training.seed`."""
    m = spec.training.model or {"kind": "mlp", "layers": list(spec.training.layers)}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.training.seed)
        model = _user_model(spec, spec_dir) if m["kind"] == "python" else _builtin(m)
    apply_recompute(model, getattr(spec.training, "recompute", "none"))
    return model.to(device)


def apply_recompute(model: nn.Module, policy: str) -> None:
    """training.recompute on a built-in model (the spec rules refuse the others): full, every
    block (transformer, cnn) keeps only its input; selective, every attention core. Names
    and parameters are unchanged, so every strategy's plans and state dicts still apply."""
    for module in model.modules():
        if policy == "full" and isinstance(module, (Block, ResBlock)):
            module.recompute = True
        if policy == "selective" and isinstance(module, Attention):
            module.recompute_core = True


def build_optimizer(spec, params):
    """The spec's optimizer (runner/optim.py; kept here for the calibration probe)."""
    from .optim import build_optimizer as build

    return build(spec, params)


def logits_of(output):
    """The logits tensor of a model's output: the tensor itself, or the `logits` of an
    object or mapping (a Hugging Face ModelOutput has both), or the first element of a
    tuple (such a model with return_dict=False). InputError naming what it got otherwise."""
    if torch.is_tensor(output):
        return output
    logits = getattr(output, "logits", None)
    if logits is None and isinstance(output, dict):
        logits = output.get("logits")
    if logits is None and isinstance(output, (tuple, list)) and output and torch.is_tensor(output[0]):
        logits = output[0]
    if not torch.is_tensor(logits):
        raise InputError(f"the model returned {type(output).__name__}, with no logits tensor: return the logits, "
                       "an object or mapping with .logits, or name your own loss (training.model.loss)")
    return logits


def loss_fn(output, y):
    """Mean cross-entropy of the model's logits (logits_of); sequence outputs [B, T, C]
    against [B, T] targets count every position (equal positions per sample keep
    data-parallel means exact). A model's own loss (Hugging Face's, from labels) is
    not used: it shifts the targets again, and dtgen's are already the next tokens."""
    logits = logits_of(output)
    if logits.dim() > 2:
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    return F.cross_entropy(logits, y)


def make_loss(spec, spec_dir=None):
    """The spec's loss: a python model's `loss: module:fn`, else cross-entropy."""
    entry = spec.training.model.get("loss") if spec.training.model else None
    if not entry:
        return loss_fn
    return resolve_entry(entry, spec, ("training", "model", "loss"), spec_dir)
