"""What the spec's model is, without building it: tensors, sizes and FLOPs.

The figures (topology note, parameter-server shards, expected timeline) and the spec
rules need the model's parameter tensors (names and shapes, in model order), its bytes
per gradient and its forward FLOPs per sample, per block and per pipeline stage. This
module derives them from `training.model` for the built-in kinds (mlp, transformer,
cnn); the runner's modules (runner/model.py) use the same names, and a test checks
that the two agree tensor for tensor. A `python` model is only known once imported, so
`workload_of` returns None for it (the runner reports its real size in run.json).
Must not import torch.

A model is a prologue (embedding, stem), a run of blocks, and an epilogue (head). A
pipeline splits the blocks over the stages (the first `blocks mod stages` stages one
block more); the first stage also runs the prologue and the last the epilogue.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

BYTES_PER_VALUE = 4  # float32 parameters and gradients


@dataclass(frozen=True)
class Unit:
    """One piece of the model a pipeline cannot cut: its tensors and forward FLOPs per sample."""

    name: str
    tensors: tuple  # ((tensor name, shape tuple), ...) in model order
    flops: float

    @property
    def params(self) -> int:
        return sum(math.prod(shape) for _, shape in self.tensors)


@dataclass(frozen=True)
class Workload:
    kind: str
    blocks: tuple  # Units a pipeline distributes
    prologue: Unit | None = None  # runs on the first stage
    epilogue: Unit | None = None  # runs on the last stage
    tied: tuple = ()  # tensor names the epilogue reuses from the prologue (not counted twice)
    block_word: str = "layer"  # what the figures call one block
    activations: tuple = ()  # values per sample leaving each block (what a stage boundary carries)

    @property
    def units(self) -> tuple:
        return tuple(u for u in (self.prologue, *self.blocks, self.epilogue) if u is not None)

    @property
    def tensors(self) -> list[tuple[str, tuple]]:
        """(name, shape) of every parameter tensor, in model (state-dict) order."""
        return [t for unit in self.units for t in unit.tensors]

    @property
    def param_tensors(self) -> list[str]:
        return [name for name, _ in self.tensors]

    def tensor_sizes(self) -> dict[str, int]:
        return {name: math.prod(shape) for name, shape in self.tensors}

    @property
    def params(self) -> int:
        return sum(unit.params for unit in self.units)

    @property
    def grad_bytes(self) -> int:
        """Bytes of one full gradient (= of the parameters), float32."""
        return BYTES_PER_VALUE * self.params

    @property
    def flops_per_sample(self) -> float:
        """Forward FLOPs of one sample through the whole model (backward is about twice)."""
        return sum(unit.flops for unit in self.units)

    def stage_units(self, stages: int) -> list[list[Unit]]:
        """The units each pipeline stage runs (see the module docstring)."""
        bounds = stage_bounds(len(self.blocks), stages)
        parts = [list(self.blocks[bounds[i]:bounds[i + 1]]) for i in range(stages)]
        if self.prologue is not None:
            parts[0].insert(0, self.prologue)
        if self.epilogue is not None:
            parts[-1].append(self.epilogue)
        return parts

    def stage_costs(self, stages: int) -> list[float]:
        """Forward FLOPs per sample of each pipeline stage."""
        return [sum(u.flops for u in part) for part in self.stage_units(stages)]

    def stage_params(self, stages: int) -> list[int]:
        """Parameters each stage holds (the last stage's tied copy included)."""
        sizes = self.tensor_sizes()
        out = [sum(u.params for u in part) for part in self.stage_units(stages)]
        if stages > 1:
            out[-1] += sum(sizes[name] for name in self.tied)
        return out

    def stage_blocks(self, stages: int) -> list[tuple[int, int]]:
        """1-based inclusive (first, last) block of each stage."""
        bounds = stage_bounds(len(self.blocks), stages)
        return [(bounds[i] + 1, bounds[i + 1]) for i in range(stages)]

    def boundary_values(self, stages: int) -> list[int]:
        """Activation values per sample crossing each stage boundary (stages - 1 of them)."""
        return [self.activations[b - 1] for b in stage_bounds(len(self.blocks), stages)[1:-1]]


def stage_bounds(blocks: int, stages: int) -> list[int]:
    """Block index boundaries: stage i runs blocks bounds[i]..bounds[i+1]-1."""
    base, extra = divmod(blocks, stages)
    bounds = [0]
    for i in range(stages):
        bounds.append(bounds[-1] + base + (1 if i < extra else 0))
    return bounds


# ---------------------------------------------------------------- the built-in kinds

MODEL_DEFAULTS = {
    "mlp": {"layers": [32, 128, 128, 10]},
    "transformer": {"layers": 2, "d_model": 64, "heads": 4, "seq_len": 32, "vocab": 256},
    "cnn": {"layers": 2, "channels": 3, "image_size": 32, "width": 16, "classes": 10},
    "python": {"args": {}},
}
# Keys of training.model that mean something for each kind (a rule refuses the others).
# A python model says it takes token ids with `input: tokens` and their vocab and seq_len.
PYTHON_KEYS = {"entry", "loss", "input", "vocab", "seq_len"}
MODEL_KEYS = {kind: {"kind", *defaults} | (PYTHON_KEYS if kind == "python" else set())
              for kind, defaults in MODEL_DEFAULTS.items()}


def takes_tokens(m: dict) -> bool:
    """True when the model takes token ids [batch, seq_len] below `vocab`: the built-in
    transformer, or a python model declared with `input: tokens`."""
    kind = m.get("kind", "mlp")
    return kind == "transformer" or (kind == "python" and m.get("input") == "tokens")


def _mlp(m: dict) -> Workload:
    widths = [int(w) for w in m["layers"]]
    blocks = []
    for i, (a, b) in enumerate(zip(widths, widths[1:])):
        # 2 FLOPs per multiply-add, the bias add counted as one more MAC per output.
        blocks.append(Unit(f"layer {i + 1}", ((f"layers.{i}.weight", (b, a)), (f"layers.{i}.bias", (b,))),
                           2.0 * (a * b + b)))
    return Workload("mlp", tuple(blocks), activations=tuple(widths[1:]))


def _transformer(m: dict) -> Workload:
    layers, d, t, v = int(m["layers"]), int(m["d_model"]), int(m["seq_len"]), int(m["vocab"])
    embed = Unit("embedding", (("tok.weight", (v, d)), ("pos.weight", (t, d))), float(t * d))
    blocks = []
    for i in range(layers):
        p = f"blocks.{i}."
        tensors = ((p + "ln1.weight", (d,)), (p + "ln1.bias", (d,)),
                   (p + "attn.qkv.weight", (3 * d, d)), (p + "attn.qkv.bias", (3 * d,)),
                   (p + "attn.proj.weight", (d, d)), (p + "attn.proj.bias", (d,)),
                   (p + "ln2.weight", (d,)), (p + "ln2.bias", (d,)),
                   (p + "mlp.fc.weight", (4 * d, d)), (p + "mlp.fc.bias", (4 * d,)),
                   (p + "mlp.proj.weight", (d, 4 * d)), (p + "mlp.proj.bias", (d,)))
        linear = 12 * d * d
        # Per token: the linear layers; per sequence: scores Q K^T and their product with V.
        blocks.append(Unit(f"block {i + 1}", tensors, 2.0 * t * linear + 4.0 * t * t * d))
    head = Unit("head", (("norm.weight", (d,)), ("norm.bias", (d,))), 2.0 * t * d * v)
    return Workload("transformer", tuple(blocks), embed, head, tied=("tok.weight",), block_word="block",
                    activations=(t * d,) * layers)


def _cnn(m: dict) -> Workload:
    layers, c, s, w, k = (int(m[key]) for key in ("layers", "channels", "image_size", "width", "classes"))
    pixels = s * s
    stem = Unit("stem", (("stem.weight", (w, c, 3, 3)), ("stem.bias", (w,))), 2.0 * pixels * 9 * c * w)
    blocks = []
    for i in range(layers):
        p = f"blocks.{i}."
        tensors = ((p + "conv1.weight", (w, w, 3, 3)), (p + "conv1.bias", (w,)),
                   (p + "conv2.weight", (w, w, 3, 3)), (p + "conv2.bias", (w,)))
        blocks.append(Unit(f"block {i + 1}", tensors, 2 * 2.0 * pixels * 9 * w * w))
    head = Unit("head", (("head.weight", (k, w)), ("head.bias", (k,))), float(pixels * w + 2 * w * k))
    return Workload("cnn", tuple(blocks), stem, head, block_word="block", activations=(pixels * w,) * layers)


_BUILDERS = {"mlp": _mlp, "transformer": _transformer, "cnn": _cnn}


def model_section(spec_or_data) -> dict:
    """The resolved `training.model` mapping of a Spec or of resolved spec data."""
    data = spec_or_data.data if hasattr(spec_or_data, "data") else spec_or_data
    return data["training"]["model"]


def workload_of(spec) -> Workload | None:
    """The Workload of a spec's built-in model; None for a `python` model."""
    m = model_section(spec)
    builder = _BUILDERS.get(m.get("kind", "mlp"))
    return builder(m) if builder else None


DATASET_DEFAULTS = {"synthetic": {"samples": 16384}, "python": {"args": {}}}


def fill_kind_defaults(training: dict) -> dict:
    """Kind-specific defaults of training.model and training.dataset (the schema holds
    none for these keys: they differ per kind, and a key of another kind is an error)."""
    for section, defaults, fallback in (("model", MODEL_DEFAULTS, "mlp"), ("dataset", DATASET_DEFAULTS, "synthetic")):
        part = training[section]
        kind = part.setdefault("kind", fallback)
        for key, value in defaults.get(kind, {}).items():
            part.setdefault(key, copy.deepcopy(value))
    return training


def human_count(n: float) -> str:
    """1234 -> '1.2 k', 3_300_000 -> '3.3 M'."""
    for div, suffix in ((1e9, " G"), (1e6, " M"), (1e3, " k")):
        if n >= div:
            return f"{n / div:.1f}{suffix}"
    return f"{int(n)}"


def human_bytes(value: float) -> str:
    """88104 -> '88.1 kB': SI units, 3 significant digits; the one byte format of every
    figure and summary, so a figure never mixes kB and KiB."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if value >= size:
            return f"{value / size:.3g} {unit}"
    return f"{value:.0f} B"


def describe_model(spec) -> str:
    """One line for figure notes and run summaries, e.g.
    'transformer (2 blocks, d_model 64): 109.6 k parameters, 438 kB per gradient'."""
    m = model_section(spec)
    kind = m.get("kind", "mlp")
    if kind == "python":
        return f"python model {m['entry']} (size known at run time)"
    wl = workload_of(spec)
    shape = {
        "mlp": lambda: "widths " + "-".join(str(w) for w in m["layers"]),
        "transformer": lambda: f"{m['layers']} blocks, d_model {m['d_model']}, seq {m['seq_len']}",
        "cnn": lambda: f"{m['layers']} blocks, width {m['width']}, {m['image_size']}px",
    }[kind]()
    return f"{kind} ({shape}): {human_count(wl.params)} parameters, {human_bytes(wl.grad_bytes)} per gradient"


def abbreviate_tensors(names: list[str], keep: int = 4) -> list[str]:
    """A shard's tensor names for a figure: blocks collapsed to 'blocks.3.*', and past
    `keep` entries the first ones, '...' and the last."""
    out: list[str] = []
    for name in names:
        parts = name.split(".")
        short = ".".join(parts[:2]) + ".*" if len(parts) > 3 and parts[1].isdigit() else name
        if short not in out:
            out.append(short)
    return out if len(out) <= keep else out[:keep - 2] + ["..."] + out[-1:]


# ---------------------------------------------------------------- tensor parallelism's layer pairs

# A python model's layer pairs are its plan's, known at run time: the expected figures draw
# one nominal pair whose all-reduces sum this many values per sample.
NOMINAL_TENSOR_VALUES = 1024


@dataclass(frozen=True)
class TensorPair:
    """A column- then row-parallel pair of Linear layers as tensor parallelism splits them
    (runner/strategies/tensor.py): forward FLOPs per sample of the whole pair, and the
    values per sample its forward all-reduce (the row-parallel output) and its backward one
    (the column-parallel input gradient; 0 where the input needs none: an mlp's data) sum."""

    name: str
    flops: float
    forward: int
    backward: int
    forward_layer: str = ""  # the module whose forward all-reduce it is (the runner's span arg `layer`)
    backward_layer: str = ""  # and whose backward one


@dataclass(frozen=True)
class TensorPlan:
    before: float  # forward FLOPs per sample computed whole on every worker before the pairs
    pairs: tuple  # TensorPairs in forward order
    after: float  # and after them (a transformer's head, an mlp's odd last layer)


def tensor_plan(m: dict, nominal_flops: float = 0.0, nominal_values: int = NOMINAL_TENSOR_VALUES) -> TensorPlan:
    """The layer pairs of a built-in model (`training.model`) as the tensor runner splits
    them; a python model's: one nominal pair of `nominal_flops` whose all-reduces sum
    `nominal_values` per sample."""
    kind = m.get("kind", "mlp")
    if kind == "transformer":
        d, t, v = int(m["d_model"]), int(m["seq_len"]), int(m["vocab"])
        attention = 2.0 * t * 4 * d * d + 4.0 * t * t * d  # qkv and proj; scores and their product with V
        mlp = 2.0 * t * 8 * d * d
        pairs = []
        for b in range(int(m["layers"])):
            pairs += [TensorPair(f"attn{b + 1}", attention, t * d, t * d, f"blocks.{b}.attn.proj", f"blocks.{b}.attn.qkv"),
                      TensorPair(f"mlp{b + 1}", mlp, t * d, t * d, f"blocks.{b}.mlp.proj", f"blocks.{b}.mlp.fc")]
        return TensorPlan(float(t * d), tuple(pairs), 2.0 * t * d * v)
    if kind == "mlp":
        widths = [int(w) for w in m["layers"]]
        flops = [2.0 * (a * b + b) for a, b in zip(widths, widths[1:])]
        pairs = tuple(TensorPair(f"l{2 * i + 1}", flops[2 * i] + flops[2 * i + 1], widths[2 * i + 2],
                                 widths[2 * i] if i else 0, f"layers.{2 * i + 1}", f"layers.{2 * i}")
                      for i in range(len(flops) // 2))
        return TensorPlan(0.0, pairs, flops[-1] if len(flops) % 2 else 0.0)
    return TensorPlan(0.0, (TensorPair("plan", nominal_flops, nominal_values, nominal_values),), 0.0)
