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
measurement leaves them out.

Activations: what one rank's backward needs kept at its peak, by
opentikz_dt.memory_model for the built-in kinds (each data-parallel worker its
batch_size; a pipeline stage its layers times the microbatches its schedule keeps in
flight; a tensor rank 1/t of what tensor parallelism splits; a server or storage rank
none). None where the model cannot say: a python model, or a pipeline's mlp or cnn in
bf16/fp16. docs/memory.md states the model.

The measured side (runner/memory.py, metrics.json's `memory`) uses the same categories.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import memory_model as mm
from .shards import assign_tensors
from .strategies import plugin
from .training_rules import optimizer_settings
from .workload import BYTES_PER_VALUE, model_section, stage_bounds, workload_of

CATEGORIES = ("params", "grads", "optimizer", "activations")


def optimizer_states(training) -> int:
    """Values of optimizer state kept per parameter value (see the module docstring)."""
    settings = optimizer_settings(training)
    if settings["kind"] == "sgd":
        return 1 if settings["momentum"] else 0
    return 2


@dataclass(frozen=True)
class RankMemory:
    """Expected bytes of one rank by category (activations None: not predicted)."""

    rank: int
    id: str
    role: str
    params: int
    grads: int
    optimizer: int
    activations: int | None = None

    def as_dict(self) -> dict:
        return {c: getattr(self, c) for c in CATEGORIES}

    @property
    def total(self) -> int:
        """Bytes of every category (activations 0 where not predicted)."""
        return self.params + self.grads + self.optimizer + (self.activations or 0)


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
                       optimizer=r["optimizer"],
                       activations=r["activations"] if "activations" in r else rank_activations(spec, i, r["role"]))
            for i, r in enumerate(ranks)]


def activation_plan(spec, rank: int) -> mm.ActivationPlan:
    """The plan of worker `rank` (the runner's rank order) for the spec's strategy: its
    plugin's `activation_plan` hook (data-parallel by default: the whole slice at once)."""
    return plugin(spec.strategy.kind).activation_plan(spec, rank)


def rank_activations(spec, rank: int, role: str) -> int | None:
    """Expected activation bytes of rank `rank` (see the module docstring)."""
    if role not in ("worker", "stage"):
        return 0  # servers and the central storage run no forward
    m = model_section(spec)
    kind, precision = m.get("kind", "mlp"), spec.training.precision
    plan = activation_plan(spec, rank)
    first, last = plan.stage == 0, plan.stage == plan.stages - 1
    if kind == "transformer":
        bounds = stage_bounds(int(m["layers"]), plan.stages)
        layers = bounds[plan.stage + 1] - bounds[plan.stage]
        one = mm.transformer_stage(m, plan.micro_batch, layers, first, last, precision, t=plan.tensor,
                                   recompute=spec.training.recompute).total
    elif plan.tensor > 1:
        return None  # an mlp's tensor-parallel pairs: not modelled
    elif plan.stages == 1:
        one = (mm.mlp_activations(m["layers"], plan.micro_batch, precision) if kind == "mlp"
               else mm.cnn_activations(m, plan.micro_batch, precision, spec.training.recompute) if kind == "cnn"
               else None)
        if one is None:
            return None
    else:
        one = _stage_activations(spec, m, kind, plan, first, last)
        if one is None:
            return None
    # A pipeline's microbatches are views of the step's batch: the first stage's inputs
    # (kept by its first layer) and the last stage's targets (kept by the loss) hold the
    # whole batch's storage from the first forward to the last backward, in flight or not.
    whole = (plan.microbatches - plan.in_flight) * (_input_bytes(m, kind, plan.micro_batch) * first
                                                    + mm.INDEX_BYTES * _targets(m, kind, plan.micro_batch) * last)
    return int(round(one * plan.in_flight + whole))


def _input_bytes(m: dict, kind: str, b: int) -> int:
    """Bytes of one microbatch's input as the first layer keeps it: token ids (int64), or
    fp32 features and images."""
    if kind == "transformer":
        return mm.INDEX_BYTES * b * int(m["seq_len"])
    if kind == "mlp":
        return mm.FP32_BYTES * b * int(m["layers"][0])
    return mm.FP32_BYTES * b * int(m["channels"]) * int(m["image_size"]) ** 2


def _targets(m: dict, kind: str, b: int) -> int:
    """Target values of one microbatch: one per token of a transformer, one per sample otherwise."""
    return b * int(m["seq_len"]) if kind == "transformer" else b


def _stage_activations(spec, m: dict, kind: str, plan: mm.ActivationPlan, first: bool, last: bool):
    """One microbatch on a pipeline stage of an mlp or cnn in fp32: its layers' inputs as
    a whole model keeps them, plus the input it received (kept by its first layer); None
    in bf16/fp16 or with recomputation (not modelled per stage)."""
    if spec.training.precision in ("bf16", "fp16") or spec.training.recompute != "none":
        return None
    b = plan.micro_batch
    if kind == "mlp":
        widths = [int(w) for w in m["layers"]]
        lo, hi = (stage_bounds(len(widths) - 1, plan.stages)[plan.stage + i] for i in (0, 1))
        values = widths[lo] + sum(widths[j + 1] for j in range(lo, hi) if j + 1 < len(widths) - 1)
        loss = mm.FP32_BYTES * b * widths[-1] + mm.INDEX_BYTES * b + mm.FP32_BYTES if last else 0
        return mm.FP32_BYTES * b * values + loss
    if kind == "cnn":
        layers, ch, px, w, k = (int(m[key]) for key in ("layers", "channels", "image_size", "width", "classes"))
        lo, hi = (stage_bounds(layers, plan.stages)[plan.stage + i] for i in (0, 1))
        pixels = px * px
        values = 2 * (hi - lo) * w * pixels + ((ch + w) * pixels if first else w * pixels)
        loss = mm.FP32_BYTES * b * k + mm.INDEX_BYTES * b + mm.FP32_BYTES if last else 0
        return mm.FP32_BYTES * b * (values + (w if last else 0)) + loss
    return None


# ---------------------------------------------------------------- does it fit the device

KNOBS = "lower batch_size / raise tensor or pipeline / recompute / shard"


@dataclass(frozen=True)
class Fit:
    """The expected memory against a device's capacity: the fullest rank and by how much
    it is over (negative: the room left)."""

    rank: RankMemory
    capacity: int

    @property
    def over(self) -> int:
        return self.rank.total - self.capacity

    @property
    def fits(self) -> bool:
        return self.over <= 0

    def message(self) -> str:
        gb = 1e9
        if self.fits:
            return (f"fits: the fullest rank, {self.rank.id} (rank {self.rank.rank}), needs "
                    f"{self.rank.total / gb:.3g} GB of {self.capacity / gb:.3g} GB")
        return (f"over by {self.over / gb:.3g} GB on rank {self.rank.rank} ({self.rank.id}: "
                f"{self.rank.total / gb:.3g} GB expected, {self.capacity / gb:.3g} GB on the device): {KNOBS}")


def fit_check(ranks: list[RankMemory] | None, capacity_bytes: int | None) -> Fit | None:
    """The fullest rank of `ranks` (expected_memory) against `capacity_bytes`; None where
    either is unknown. Ties: the lowest rank."""
    if not ranks or not capacity_bytes:
        return None
    fullest = max(ranks, key=lambda r: (r.total, -r.rank))
    return Fit(fullest, int(capacity_bytes))


def device_capacity(spec) -> int | None:
    """Bytes of memory on the spec's device (its `hardware:` preset), None without one."""
    hardware = getattr(spec, "hardware", None)
    return None if hardware is None else int(hardware.device_preset.memory_bytes)


def spec_fit(spec) -> Fit | None:
    """The spec's expected memory against its device; None where either is unknown."""
    capacity = device_capacity(spec)
    return fit_check(expected_memory(spec), capacity) if capacity else None


def fit_warning(spec) -> str | None:
    """A located line when the spec's fullest rank does not fit its device, else None
    (validate and figure print it; run refuses with it unless --force)."""
    fit = spec_fit(spec)
    if fit is None or fit.fits:
        return None
    return str(spec.located.issue(("hardware", "device"), f"{spec.hardware.device}: {fit.message()}"))


def predicted_memory(spec) -> dict:
    """metrics.json's `memory` of a prediction: the measured runs' keys per rank, from the
    model (source "model"; peak None: no allocator ran). {} where sizes are unknown."""
    ranks = expected_memory(spec)
    return {str(r.rank): {**r.as_dict(), "peak": None, "source": "model"} for r in ranks or []}
