"""The predict side's plugin interface: `PredictPlugin` lists every question the predictor
asks about a strategy. A plugin module (opentikz_dt/strategies/<kind>/predict.py, or an
outside package's `predict.py`) defines `KIND` and `simulate_steps` and, where the default
below does not fit, the others; the registry (opentikz_dt/plugins.py) builds a
`PredictPlugin` from the module's names, the defaults for the rest (a data-parallel
strategy whose ranks are the topology's workers, role `worker`, each computing the whole
model on its slice of the batch). mypy checks every plugin module against it
(tests/test_plugin_types.py). The predictor never compares a kind, algorithm, sync mode
or schedule itself; a plugin may compare its own (`spec.strategy.algorithm == "ring"`).

Must not import torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from ..errors import DtgenError
from .fit import per_row

Spec = Any  # the validated spec (spec_types.Spec)
Fit = Any  # fit.RunFit: run, role, blocks, flops, phases, beta, spec, workers, params


# --- the defaults ----------------------------------------------------------------------------

def default_roles(spec: Spec) -> list[tuple[str, str]]:
    return [("worker", w) for w in spec.topology.workers.ids]


def default_role_of(spec: Spec, ident: str) -> str:
    return "server" if ident.startswith("ps") else "worker"


def default_active_ranks(spec: Spec) -> float:
    return spec.topology.workers.count


def default_model_parts(spec: Spec) -> int:
    return 1


def default_resize(strategy: dict, workers: int) -> None:
    """Nothing else in the strategy block follows the worker count."""


def default_synthetic_strategy(name: str, topology: dict, microbatches: int) -> dict:
    raise DtgenError(f"synthetic run {name!r}: its predict plugin writes no synthetic_strategy")


def default_fit_compute(fit: Fit) -> tuple[list, list]:
    return per_row(fit, fit.phases.get((fit.role, "forward"), 0.0), fit.phases.get((fit.role, "backward"), 0.0))


def default_fit_message_latency(fit: Fit, comm: dict) -> Optional[float]:
    return None


def default_message_samples(fit: Fit) -> list:
    return []


def default_gradients_per_update(spec: Spec) -> int:
    return 1


def default_fit_noise(fit: Fit) -> dict:
    return {}


def default_finish_fit(cal: Any, run: Any) -> Any:
    return cal


def default_sweep_note(points: list) -> Optional[str]:
    return None


def default_shapes(spec: Spec, workers: int) -> Optional[list]:
    return None


def default_waits_as_ring_hops(spec: Spec) -> bool:
    return False


def default_simulation_weight(spec: Spec) -> float:
    return 1.0


def default_cluster_layout(spec: Spec) -> tuple[int, int, int, str, str, bool]:
    """Every worker data-parallel, NCCL's own algorithm, replicas, no overlap."""
    return 1, spec.topology.workers.count, 1, "native", "", False


# --- the interface ---------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True, repr=False)
class PredictPlugin:
    """How one strategy is simulated and fitted. Hooks without a default are required."""

    KIND: str  # the spec's strategy.kind it serves

    # Ranks (simulate.py, phases.py; the runner numbers them the same way)
    # roles(spec) -> [(role, id), ...]: every rank in rank order, workers first
    roles: Callable[[Spec], list[tuple[str, str]]] = default_roles
    # role_of(spec, ident): the role of a traced rank from its id (default: ps* -> server)
    role_of: Callable[[Spec, str], str] = default_role_of
    COMPUTE_ROLE: str = "worker"  # the role whose ranks run forward/backward
    # active_ranks(spec): how many ranks compute at once, sharing the cores (a pipeline's
    # bubble idles some)
    active_ranks: Callable[[Spec], float] = default_active_ranks
    # model_parts(spec): over how many ranks one copy of the parameters is split
    model_parts: Callable[[Spec], int] = default_model_parts
    # simulation_weight(spec): the cost of simulating one rank-step over a plain
    # data-parallel one's (about 5 µs: benchmarks/bench_predict_scale.py); the size bounds
    # weigh ranks x steps by it (a mesh: its microbatches x collectives)
    simulation_weight: Callable[[Spec], float] = default_simulation_weight

    # Simulation (simulate.py)
    # simulate_steps(sim, steps): play `steps` steps of the schedule into `sim.rec`
    # (engine.Recorder) with the costs in `sim.costs`; `sim` is a simulate.Simulation (ids,
    # blocks, params, stragglers, and sim.start, sim.compute, sim.optimizer)
    simulate_steps: Callable[[Any, int], None]

    # Overrides (predict.py)
    # resize(strategy, workers): `dtgen predict --workers N`: set what else in the strategy
    # block (plain data) follows the worker count (a pipeline's stages)
    resize: Callable[[dict, int], None] = default_resize

    # Carried to more processes than cores (transfer.py)
    # waits_as_ring_hops(spec): its messages wait for a core as a ring's hops do (the
    # crowded run's wait grows as (1 - c/k), not as (k - c)/c: lone messages)
    waits_as_ring_hops: Callable[[Spec], bool] = default_waits_as_ring_hops

    # Synthetic runs (synthetic.py: tests and benchmarks of the measured figures)
    SYNTHETIC_RUNS: tuple[str, ...] = ()  # the synthetic run names this kind writes
    # synthetic_strategy(name, topology, microbatches) -> the strategy block of synthetic run
    # `name`; may add to `topology` (plain data, e.g. a server)
    synthetic_strategy: Callable[[str, dict, int], dict] = default_synthetic_strategy

    # Sweeps (sweep.py, `dtgen predict --sweep ...`)
    # sweep_note(points): a line under the scaling figure saying why it scales as it does;
    # points: [(workers, spec, costs, step ms)]
    sweep_note: Callable[[list], Optional[str]] = default_sweep_note
    # shapes(spec, workers): `--sweep shapes`: the layouts of `workers` workers to compare,
    # [(label, (override, ...), refusal or None)]; None: one layout per worker count
    shapes: Callable[[Spec, int], Optional[list]] = default_shapes

    # Calibration fit from a run (fit.py, `dtgen calibrate --from RUN`)
    # fit_compute(fit) -> (fwd, bwd): per block, forward and backward µs per sample
    fit_compute: Callable[[Fit], tuple[list, list]] = default_fit_compute
    # fit_message_latency(fit, comm): the message latency (s) the run shows, or None (the
    # base calibration's stays); may set collectives' latencies in `comm` itself
    fit_message_latency: Callable[[Fit, dict], Optional[float]] = default_fit_message_latency
    # message_samples(fit) -> [(µs, bytes)]: each steady single message the run traced
    message_samples: Callable[[Fit], list] = default_message_samples
    # gradients_per_update(spec): gradients one server update sums
    gradients_per_update: Callable[[Spec], int] = default_gradients_per_update
    # fit_noise(fit): extra `noise` entries of the calibration
    fit_noise: Callable[[Fit], dict] = default_fit_noise
    # finish_fit(cal, run) -> Calibration: a last adjustment of the fitted calibration
    finish_fit: Callable[[Any, Any], Any] = default_finish_fit
    # cluster_layout(spec) -> (p, d, t, algorithm, shard, overlap): a datasheet cluster
    # prediction's (cluster.py) pipeline, data and tensor degrees, all-reduce algorithm
    # (ring, tree, native), what the data dimension shards (ZeRO's stage: "" none,
    # optimizer, gradients, parameters; datasheet.Layout), gradient all-reduce under the backward
    cluster_layout: Callable[[Spec], tuple[int, int, int, str, str, bool]] = default_cluster_layout

    def __repr__(self) -> str:
        return f"<{self.KIND} predict plugin>"
