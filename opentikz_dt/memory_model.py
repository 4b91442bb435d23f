"""The memory model: bytes a rank holds for training, from sizes alone (no torch).

Two parts, each a sum over named tensors rather than a fitted constant:

Model states (Rajbhandari et al., "ZeRO", SC'20; Megatron-LM's distributed optimizer).
A precision recipe says how many bytes each parameter costs in each category:

  recipe        weights  gradients  optimizer (main weights + main gradients + Adam's 2 moments)
  fp32             4         4        0 + 0 + 8            = 16 bytes per parameter
  autocast         4         4        0 + 0 + 8            = 16  (dtgen's bf16/fp16 today: fp32
                                                                 weights; the low-precision
                                                                 copies autocast makes live
                                                                 one step: counted as activations)
  mixed-bf16       2         4        4 + 0 + 8            = 18  (Megatron: bf16 weights, fp32
                                                                 gradients and main weights)
  mixed-fp16       2         2        4 + 4 + 8            = 20  (Megatron: fp16 gradients and
                                                                 their fp32 main copy)
  zero-fp16        2         2        4 + 0 + 8            = 16  (ZeRO's paper: K = 12)

with SGD's momentum one state value and plain SGD none instead of Adam's two. ZeRO
shards per data-parallel degree d: stage 1 (`optimizer`) the optimizer column, stage 2
(`gradients`) the gradients too, stage 3 (`parameters`) the weights too.

Activations per transformer layer (Korthikanti et al., "Reducing Activation
Recomputation in Large Transformer Models", 2022, section 4). The paper's GPT layer
stores, in units of s*b*h values (s sequence, b microbatch, h hidden, a heads):
the two layer norms' inputs (2), the QKV projection's input (1), Q, K and V (3), the
attention output projection's input (1), the MLP's first linear input (1), GeLU's input
(4) and output (4): 16 values; plus dropout masks (1 byte each) after attention and
after the MLP, and the attention core: softmax output (a*s/h values), its dropout mask
(a*s/h bytes) and output (a*s/h values). At 2 bytes per value that is
s*b*h*(34 + 5*a*s/h) bytes. With tensor parallelism t (no sequence parallelism) the
layer norms' inputs, the QKV and first MLP inputs and the two masks stay whole: 10
s*b*h of it; with sequence parallelism too everything is divided by t. Selective
recomputation drops the attention core; full recomputation keeps the layer's input.

dtgen's transformer (runner/model.py) differs from the paper's GPT, and `LayerStyle`
says how: no dropout (no masks); attention through torch's scaled_dot_product_attention,
whose fused kernel keeps a log-sum-exp per head and row (4*b*a*s bytes) instead of the
s*s scores; each layer norm's mean and inverse deviation (2 * 4*b*s bytes each); the
layer norms' inputs are the fp32 residual stream (4 bytes even under autocast); and
under autocast the bf16 copies of the 12*h*h matmul weights a layer's backward needs
(they are not the parameters, and live as long as the step's graph). In fp32 that is
64*s*b*h + 16*b*s + 4*b*a*s bytes per layer; in bf16 autocast 36*s*b*h + 16*b*s +
4*b*a*s + 24*h*h.

docs/memory.md states the whole model and its assumptions; tests/data/
published_memory.yaml holds the published rows it is tested against.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

SHARD_LEVELS = ("none", "optimizer", "gradients", "parameters")  # ZeRO stages 0 to 3
RECOMPUTE = ("none", "selective", "full")
FP32_BYTES = 4


@dataclass(frozen=True)
class Recipe:
    """Bytes per parameter value of a precision recipe (see the module docstring)."""

    name: str
    weights: int
    grads: int
    main_weights: int = 0  # an fp32 copy of low-precision weights, kept by the optimizer
    main_grads: int = 0  # an fp32 copy of low-precision gradients, kept by the optimizer
    state_bytes: int = FP32_BYTES  # each optimizer state value (Adam's moments, momentum)

    def optimizer(self, states: int) -> int:
        """Bytes per parameter of the optimizer's category with `states` state values."""
        return self.main_weights + self.main_grads + states * self.state_bytes

    def per_parameter(self, states: int = 2) -> int:
        return self.weights + self.grads + self.optimizer(states)


RECIPES = {
    "fp32": Recipe("fp32", 4, 4),
    "autocast": Recipe("autocast", 4, 4),
    "mixed-bf16": Recipe("mixed-bf16", 2, 4, main_weights=4),
    "mixed-fp16": Recipe("mixed-fp16", 2, 2, main_weights=4, main_grads=4),
    "zero-fp16": Recipe("zero-fp16", 2, 2, main_weights=4),
}


def recipe_of(precision: str) -> Recipe:
    """The recipe dtgen's runner uses for `training.precision`: fp32 and tf32 store fp32;
    bf16 and fp16 run under autocast with fp32 weights."""
    return RECIPES["autocast" if precision in ("bf16", "fp16") else "fp32"]


def states_of(optimizer: str, momentum: float = 0.0) -> int:
    """Optimizer state values per parameter value: Adam/AdamW 2, SGD with momentum 1, SGD 0."""
    if optimizer == "sgd":
        return 1 if momentum else 0
    return 2


def model_states(params: float, recipe: Recipe, states: int = 2, shard: str = "none",
                 degree: int = 1) -> dict:
    """Bytes of one rank's parameters, gradients and optimizer state for `params`
    parameter values held by a data-parallel group of `degree` ranks sharding `shard`
    (ZeRO stage: none, optimizer, gradients, parameters). Fractions are kept: a shard of
    a tensor is not rounded to rows here."""
    if shard not in SHARD_LEVELS:
        raise ValueError(f"shard {shard!r}: one of {', '.join(SHARD_LEVELS)}")
    level = SHARD_LEVELS.index(shard)
    d = max(1, int(degree))
    return {"params": params * recipe.weights / (d if level >= 3 else 1),
            "grads": params * recipe.grads / (d if level >= 2 else 1),
            "optimizer": params * recipe.optimizer(states) / (d if level >= 1 else 1)}


# ---------------------------------------------------------------- transformer activations

@dataclass(frozen=True)
class LayerStyle:
    """How a transformer layer stores its activations (see the module docstring)."""

    compute_bytes: int  # bytes of a value the matmuls and GeLU keep
    residual_bytes: int  # bytes of a layer norm's input (the residual stream)
    dropout: bool  # dropout masks (1 byte per value) after attention, after the MLP and on the scores
    fused_attention: bool  # log-sum-exp per head and row kept instead of the s*s scores
    norm_stats: bool  # each layer norm's fp32 mean and inverse deviation per row
    weight_copies: bool  # autocast's low-precision copies of the matmul weights (per microbatch)


PAPER_GPT = LayerStyle(compute_bytes=2, residual_bytes=2, dropout=True, fused_attention=False,
                       norm_stats=False, weight_copies=False)


def dtgen_style(precision: str) -> LayerStyle:
    """dtgen's own transformer layer (runner/model.py) in `training.precision`."""
    low = precision in ("bf16", "fp16")
    return LayerStyle(compute_bytes=2 if low else FP32_BYTES, residual_bytes=FP32_BYTES, dropout=False,
                      fused_attention=True, norm_stats=True, weight_copies=low)


def layer_activations(s: int, b: int, h: int, a: int, style: LayerStyle = PAPER_GPT, t: int = 1,
                      sequence_parallel: bool = False, recompute: str = "none") -> float:
    """Bytes one transformer layer keeps for its backward for one microbatch of b
    sequences (Korthikanti et al. section 4, in the layer's `style`), on one of t
    tensor-parallel ranks."""
    if recompute not in RECOMPUTE:
        raise ValueError(f"recompute {recompute!r}: one of {', '.join(RECOMPUTE)}")
    sbh = s * b * h
    c, r = style.compute_bytes, style.residual_bytes
    split = t if sequence_parallel else 1  # what tensor parallelism alone leaves whole: divided only with sequence parallelism
    if recompute == "full":
        return r * sbh / (t if sequence_parallel else 1)  # the layer's input alone
    whole = (2 * r + 2 * c + (2 if style.dropout else 0)) * sbh  # layer norm inputs, QKV and MLP inputs, masks
    sharded = (3 + 1 + 4 + 4) * c * sbh  # Q K V, attention output, GeLU input and output
    if style.norm_stats:
        whole += 2 * 2 * FP32_BYTES * s * b
    if recompute == "none":  # selective recomputes the attention core: none of this is kept
        if style.fused_attention:
            sharded += FP32_BYTES * a * s * b  # log-sum-exp per head and row
        else:
            sharded += (c + (1 + c if style.dropout else 0)) * a * s * s * b  # softmax, its mask and dropout
    out = whole / split + sharded / t
    if style.weight_copies:
        out += c * 12 * h * h / t
    return out


# ---------------------------------------------------------------- pipelines

@dataclass(frozen=True)
class ActivationPlan:
    """What decides one rank's activations: its pipeline stage (of `stages`), its tensor
    degree, the samples of one microbatch and how many microbatches it keeps at once
    (the strategy plugin's `activation_plan` hook builds it; the microbatches in flight
    per schedule: strategies/pipeline_schedules.in_flight)."""

    stage: int = 0
    stages: int = 1
    tensor: int = 1
    micro_batch: int = 1
    in_flight: int = 1
    microbatches: int = 1  # of one step: the first stage's inputs and the last's targets are views of its batch


# ---------------------------------------------------------------- whole models (dtgen's built-ins)

INDEX_BYTES = 8  # int64 token ids and targets


@dataclass(frozen=True)
class StageActivations:
    """Bytes one microbatch leaves on a stage: its layers, the first stage's embedding,
    the last stage's head and loss."""

    layers: float
    embedding: float = 0.0
    head: float = 0.0

    @property
    def total(self) -> float:
        return self.layers + self.embedding + self.head


def transformer_stage(m: dict, b: int, layers: int, first: bool, last: bool, precision: str = "fp32",
                      t: int = 1, recompute: str = "none") -> StageActivations:
    """dtgen's transformer (runner/model.py): `layers` blocks of one stage for a microbatch
    of b sequences. The embedding keeps its token ids and position ids (int64); the head
    its final norm's input and statistics, the tied projection's input (and under
    autocast the low-precision copy of the token embedding), and the loss its fp32
    log-probabilities, targets and a 4-byte total weight."""
    s, h, a, v = int(m["seq_len"]), int(m["d_model"]), int(m["heads"]), int(m["vocab"])
    style = dtgen_style(precision)
    per_layer = layer_activations(s, b, h, a, style, t=t, recompute=recompute)
    embedding = (b * s + s) * INDEX_BYTES if first else 0.0
    head = 0.0
    if last:
        c = style.compute_bytes
        head = (FP32_BYTES * s * b * h + 2 * FP32_BYTES * s * b + c * s * b * h
                + (c * v * h if style.weight_copies else 0)
                + FP32_BYTES * s * b * v + INDEX_BYTES * s * b + FP32_BYTES)
    return StageActivations(per_layer * layers, embedding, head)


def _compute_bytes(precision: str) -> int:
    return 2 if precision in ("bf16", "fp16") else FP32_BYTES


def mlp_activations(widths: list, b: int, precision: str = "fp32") -> float:
    """dtgen's mlp (runner/model.py) for b samples: each linear layer keeps its input (the
    data, then each ReLU's output, which ReLU keeps too: one storage), and the loss its
    fp32 log-probabilities, int64 targets and a 4-byte total weight. Under autocast the
    inputs are low-precision copies, and so is every weight but the first layer's (whose
    input, the data, needs no gradient, so its backward needs no weight)."""
    widths = [int(w) for w in widths]
    c = _compute_bytes(precision)
    copies = c * sum(x * y for x, y in zip(widths[1:], widths[2:])) if c < FP32_BYTES else 0
    return c * b * sum(widths[:-1]) + copies + FP32_BYTES * b * widths[-1] + INDEX_BYTES * b + FP32_BYTES


def cnn_activations(m: dict, b: int, precision: str = "fp32", recompute: str = "none") -> float:
    """dtgen's cnn (runner/model.py) for b images: the stem keeps its input image, every
    ReLU its output (which the next convolution keeps too), two per block; the head its
    pooled input; the loss as the mlp's. Under autocast the values are low-precision and
    every convolution's and the head's weight has a low-precision copy kept. With full
    recomputation a block keeps only its input (the stem's ReLU output for the first):
    one activation per block, none of its convolutions' weight copies."""
    layers, ch, px, w, k = (int(m[key]) for key in ("layers", "channels", "image_size", "width", "classes"))
    pixels = px * px
    c = _compute_bytes(precision)
    kept = max(layers, 1) if recompute == "full" else 1 + 2 * layers  # ReLU outputs (block inputs) kept
    values = ch * pixels + w * pixels * kept + w
    block_copies = 0 if recompute == "full" else layers * 2 * w * w * 9
    copies = c * (w * ch * 9 + block_copies + k * w) if c < FP32_BYTES else 0
    return c * b * values + copies + FP32_BYTES * b * k + INDEX_BYTES * b + FP32_BYTES


def scaled(stage: StageActivations, microbatches: int) -> StageActivations:
    """`microbatches` in flight at once."""
    return replace(stage, layers=stage.layers * microbatches, embedding=stage.embedding * microbatches,
                   head=stage.head * microbatches)
