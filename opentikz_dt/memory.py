"""Memory per rank expected from the spec, without torch: what each rank holds, by category.

The model's tensors come from opentikz_dt.workload (the built-in kinds; a `python` model
is known only once the runner builds it, so it has no expectation). Where they live is
the strategy's answer: its plugin's `expected_memory(spec, sizes)` hook
(opentikz_dt/strategies/<kind>/strategy.py, default in strategies/interface.py: every worker a replica)
lists the ranks in the runner's rank order, each made with `sizes.rank(...)`.

Bytes per value: the runner keeps weights, gradients and optimizer state in float32 in
every precision (bf16/fp16 run the forward under autocast), so 4. Optimizer state per
parameter value: sgd without momentum 0, sgd with momentum 1 (the momentum buffer),
adam/adamw 2 (the two moments); the scalar step counters are left out, as the runner's
measurement leaves them out. Activations are not predicted (None).

The measured side (runner/memory.py, metrics.json's `memory`) uses the same categories.
"""

from __future__ import annotations

from dataclasses import dataclass

from .shards import assign_tensors
from .strategies import plugin
from .training_rules import optimizer_settings
from .workload import BYTES_PER_VALUE, workload_of

CATEGORIES = ("params", "grads", "optimizer", "activations")


def optimizer_states(training) -> int:
    """Values of optimizer state kept per parameter value (see the module docstring)."""
    settings = optimizer_settings(training)
    if settings["kind"] == "sgd":
        return 1 if settings["momentum"] else 0
    return 2


@dataclass(frozen=True)
class RankMemory:
    """Expected bytes of one rank by category (activations: not predicted)."""

    rank: int
    id: str
    role: str
    params: int
    grads: int
    optimizer: int
    activations: int | None = None

    def as_dict(self) -> dict:
        return {c: getattr(self, c) for c in CATEGORIES}


@dataclass(frozen=True)
class ModelSizes:
    """What a strategy's `expected_memory` hook needs about the model (no imports on its side)."""

    spec: object
    tensors: dict  # tensor name -> elements, model order
    stage_sizes: object  # stages -> parameters each pipeline stage holds (workload.stage_params)
    bytes_per_value: int
    optimizer_states: int
    stage_names: object = None  # stages -> the tensor names each pipeline stage holds (its tied copy included)

    @property
    def params(self) -> int:
        """Elements of the whole model."""
        return sum(self.tensors.values())

    def server_shards(self) -> dict:
        """Server id -> elements of the tensors it owns (opentikz_dt.shards' assignment)."""
        owned = assign_tensors(self.tensors, self.spec.topology.servers.ids)
        return {sid: sum(self.tensors[name] for name in names) for sid, names in owned.items()}

    def stage_params(self, stages: int) -> list:
        return list(self.stage_sizes(stages))

    def stage_tensors(self, stages: int) -> list[list[str]]:
        """The tensor names each of `stages` pipeline stages holds, in model order."""
        return [list(names) for names in self.stage_names(stages)]

    def rank(self, role: str, ident: str, elements: int, optimizer: bool = True) -> dict:
        """One rank holding `elements` parameter values, their gradients and (when it
        updates them) their optimizer state."""
        size = elements * self.bytes_per_value
        return {"id": ident, "role": role, "params": size, "grads": size,
                "optimizer": size * self.optimizer_states if optimizer else 0}


def model_sizes(spec) -> ModelSizes | None:
    """The spec's model sizes; None for a `python` model (known only once built)."""
    workload = workload_of(spec)
    if workload is None:
        return None
    return ModelSizes(spec, workload.tensor_sizes(), workload.stage_params, BYTES_PER_VALUE,
                      optimizer_states(spec.training), lambda stages: _stage_names(workload, stages))


def _stage_names(workload, stages: int) -> list[list[str]]:
    """Tensor names per pipeline stage (as workload.stage_params counts them: the last
    stage also holds a copy of the tied tensors)."""
    parts = [[name for unit in part for name, _ in unit.tensors] for part in workload.stage_units(stages)]
    if stages > 1:
        parts[-1] += [name for name in workload.tied if name not in parts[-1]]
    return parts


def expected_memory(spec) -> list[RankMemory] | None:
    """Expected bytes per rank, in rank order; None where the model's sizes are unknown."""
    sizes = model_sizes(spec)
    if sizes is None:
        return None
    ranks = plugin(spec.strategy.kind).expected_memory(spec, sizes)
    return [RankMemory(rank=i, id=r["id"], role=r["role"], params=r["params"], grads=r["grads"],
                       optimizer=r["optimizer"], activations=r.get("activations")) for i, r in enumerate(ranks)]
