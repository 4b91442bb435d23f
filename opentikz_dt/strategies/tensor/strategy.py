"""Tensor parallelism (the horizontal model split, seed 002's Figure 3): every worker holds
a slice of every split layer and the workers sum their partial results inside the layer
(Megatron-LM's column- then row-parallel pairs). Every worker sees the same batch.

The split follows the model: the built-in transformer's attention by heads and its MLP by
hidden units, the built-in mlp's Linear layers in column/row pairs, a python model by
`strategy.plan` (or its own tp_plan). The runner's module (runner/strategies/tensor.py)
does the split; the rules below refuse, before anything starts, the sizes it cannot split.
"""

from __future__ import annotations

import re

from math import gcd

from .._base import Strategy

KIND = "tensor"
STRATEGY = Strategy(KIND, "Tensor-parallel training", ("allreduce", "optimizer"),
                    options=("plan",), workers=(2, None), default_workers=2, data_parallel=False, order=80)

# The plan values a spec may give (torch.distributed.tensor.parallel's styles by their
# short names); schemas/spec.schema.json lists the same.
PLAN_STYLES = ("colwise", "rowwise", "replicate")


def rules(spec, model_blocks):
    """Yield (spec path, message) for sizes the workers cannot split evenly (the hook the
    spec rules ask every strategy; a python model's plan is checked once it is built)."""
    if spec.training.compile:
        yield ("training", "compile"), ("strategy tensor cannot run compiled: its trace sees each collective where "
                                        "DTensor issues it eagerly, which a compiled graph would hide")
    workers = spec.topology.workers.count
    model = spec.training.model or {"kind": "mlp", "layers": list(spec.training.layers)}
    kind = model.get("kind", "mlp")
    if kind == "cnn":
        yield ("strategy", "kind"), ("tensor parallelism does not split the built-in cnn: torch's tensor-parallel "
                                     "styles split Linear and Embedding layers, not convolutions (use kind: pipeline "
                                     "or allreduce for the cnn)")
        return
    if kind == "python" and "plan" in spec.strategy.options:
        return  # its module names are known only once the model is built (the runner checks them)
    if kind != "python" and "plan" in spec.strategy.options:
        yield ("strategy", "plan"), (f"strategy.plan applies to a python model; the built-in {kind} has its own plan "
                                     "(remove plan)")
        return
    for path, what, size in split_sizes(model):
        if size % workers:
            yield path, f"{what.format(size)} do not split over {workers} workers ({nearest_counts(model, workers)})"
            return


def split_sizes(model: dict) -> list[tuple[tuple, str, int]]:
    """(spec path, what ('{}' for the size), size) of every dimension the built-in model's split divides by
    the worker count: the transformer's heads (the MLP's 4 x d_model hidden units follow,
    d_model being heads x head size), the mlp's widths after each column-parallel layer
    (layers 0, 2, 4, ...: each pairs with the row-parallel layer after it; an odd last
    layer stays whole)."""
    kind = model.get("kind", "mlp")
    if kind == "transformer":
        return [(("training", "model", "heads"), "{} attention heads (each worker takes whole heads)", model["heads"])]
    if kind == "mlp":
        widths = list(model["layers"])
        pairs = (len(widths) - 1) // 2
        return [(("training", "model", "layers"), f"the {{}} hidden units of layers[{2 * i + 1}]", widths[2 * i + 1])
                for i in range(pairs)]
    return []


def nearest_counts(model: dict, workers: int) -> str:
    """The worker counts (at least 2) closest to `workers` that split every size evenly."""
    common = 0
    for _, _, size in split_sizes(model):
        common = gcd(common, size)
    fits = [n for n in range(2, common + 1) if common % n == 0]
    if not fits:
        return "no count of 2 or more workers splits it"
    fits.sort(key=lambda n: (abs(n - workers), n))
    best = sorted(fits[:3])
    return "counts that work: " + ", ".join(map(str, best))


def expected_memory(spec, sizes) -> list:
    """Every worker holds 1/N of the split tensors (the built-in plans: runner/strategies/
    tensor.py's builtin_plan) and the rest whole, with their gradients and optimizer state."""
    workers = spec.topology.workers.count
    split = sum(n for name, n in sizes.tensors.items() if _split_tensor(spec, name))
    held = split // workers + sizes.params - split
    return [sizes.rank("worker", w, held) for w in spec.topology.workers.ids]


def _split_tensor(spec, name: str) -> bool:
    """Whether the built-in model's parameter `name` is split over the workers: the weights
    of every column- and row-parallel layer and the column-parallel layers' biases (a
    row-parallel layer's bias is added once, after the sum: every worker holds it whole)."""
    model = spec.training.model or {"kind": "mlp", "layers": list(spec.training.layers)}
    parts = name.split(".")
    if model.get("kind", "mlp") == "transformer":
        layer = ".".join(parts[2:4]) if parts[0] == "blocks" else ""
        return layer in ("attn.qkv", "mlp.fc") or (layer in ("attn.proj", "mlp.proj") and parts[-1] == "weight")
    if parts[0] == "layers":
        index, pairs = int(parts[1]), (len(model["layers"]) - 1) // 2
        return index < 2 * pairs and (index % 2 == 0 or parts[-1] == "weight")
    return False


def node_spec_path(node: str, parts: list[str]) -> tuple | None:
    """The topology's slices (w2-attn1: worker 2's slice of block 1's attention), its
    all-reduce bars (ar-N) and its layer names (note-attn1) come from the model: how many
    layers, and how they pair."""
    if re.fullmatch(r"ar|note", parts[0]) or (len(parts) == 2 and re.fullmatch(r"(attn|mlp|l)[0-9]+|col|row", parts[1])):
        return ("training", "model")
    return None


def starter_block(kind: str) -> str:
    return """\
strategy:
  kind: tensor                # model parallelism: every worker holds a slice of every layer
  # plan:                     # python models only: module name -> colwise | rowwise | replicate
  #   layers.0: colwise"""


def activation_plan(spec, rank: int):
    """Every worker holds its 1/n of the whole batch's split activations."""
    from ...memory_model import ActivationPlan

    return ActivationPlan(tensor=spec.topology.workers.count, micro_batch=spec.training.batch_size)


def tensor_degree(spec) -> int:
    """One tensor-parallel group spans every worker."""
    return spec.topology.workers.count
