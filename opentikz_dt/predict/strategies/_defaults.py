"""What a predict plugin (this package) answers when its module says nothing: a
data-parallel strategy whose ranks are the topology's workers (role `worker`), each
computing the whole model on its own slice of the batch. The interface is described in
this package's __init__.py.
"""

from __future__ import annotations

from ...errors import DtgenError
from ..fit import per_row

COMPUTE_ROLE = "worker"
SYNTHETIC_RUNS: tuple[str, ...] = ()


def roles(spec) -> list[tuple[str, str]]:
    return [("worker", w) for w in spec.topology.workers.ids]


def role_of(spec, ident: str) -> str:
    return "server" if ident.startswith("ps") else "worker"


def active_ranks(spec) -> float:
    return spec.topology.workers.count


def model_parts(spec) -> int:
    return 1


def resize(strategy: dict, workers: int) -> None:
    """Nothing else in the strategy block follows the worker count."""


def simulate_steps(sim, steps: int) -> None:
    raise DtgenError(f"strategy {sim.spec.strategy.kind!r}: its predict plugin does not say how a step runs "
                     "(simulate_steps)")


def synthetic_strategy(name: str, topology: dict, microbatches: int) -> dict:
    raise DtgenError(f"synthetic run {name!r}: its predict plugin writes no synthetic_strategy")


def fit_compute(fit) -> tuple[list, list]:
    return per_row(fit, fit.phases.get((fit.role, "forward"), 0.0), fit.phases.get((fit.role, "backward"), 0.0))


def fit_message_latency(fit, comm: dict) -> float | None:
    return None


def message_samples(fit) -> list:
    """(µs, bytes) of each steady single message the run traced (none known by default)."""
    return []


def gradients_per_update(spec) -> int:
    return 1


def fit_noise(fit) -> dict:
    return {}


def finish_fit(cal, run):
    return cal


def sweep_note(points: list) -> str | None:
    """A line under a `dtgen predict --sweep` figure saying why the strategy scales as it
    does; `points` is [(workers, spec, costs, step ms), ...]. Default: none."""
    return None


def shapes(spec, workers: int) -> list | None:
    """The layouts of `workers` workers `dtgen predict --sweep shapes` compares:
    [(label, (override, ...), refusal or None), ...] (a refusal: why the layout cannot be
    taken, beside what the spec rules refuse); None where the strategy has one layout per
    worker count (default)."""
    return None


def waits_as_ring_hops(spec) -> bool:
    """Lone messages by default: their wait for a core grows as (k - c)/c (transfer.crowd_wait)."""
    return False


def simulation_weight(spec) -> float:
    """How much one rank-step costs to simulate, in units of a plain data-parallel one
    (about 5 µs here: benchmarks/bench_predict_scale.py); predict.py's size bounds weigh
    ranks x steps by it. Default 1."""
    return 1.0


def cluster_layout(spec) -> tuple[int, int, int, str, bool, bool]:
    """(pipeline, data, tensor degrees, all-reduce algorithm, parameters sharded, gradient
    all-reduce overlapping the backward) of a datasheet cluster prediction (cluster.py):
    by default every worker data-parallel, NCCL's own algorithm, replicas, no overlap."""
    return 1, spec.topology.workers.count, 1, "native", False, False
