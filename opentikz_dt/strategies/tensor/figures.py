"""Figures of tensor parallelism (issue 21): the topology draws every split layer cut
horizontally into one slice per worker and the all-reduce points between them
(topology_tensor.py); the expected schedule runs the layer pairs one by one, each
worker's 1/N of a pair's compute then the pair's all-reduce, forward and backward
(tensor_layers.py: the pairs, their FLOPs and what each all-reduce sums).
Must not import torch."""

from __future__ import annotations

from ...workload import model_section, tensor_plan
from ...figures.schedule import STEPS, Sim, one_panel
from ...figures.spacing import allreduce_needs
from ...figures.topology_fit import fitted
from ...figures.topology_tensor import tensor_layout

KIND = "tensor"
TIMELINE_BOXES = ("forward", "backward", "slowdown", "allreduce", "optimizer", "skipped", "wait")


def layout(spec, spacing):
    return tensor_layout(spec, spacing, fitted(spec))


def spacing_needs(sizes):
    return allreduce_needs(sizes)


def expected_timeline(spec, cost):
    sim, end, pairs = _schedule(spec, cost)
    n = spec.topology.workers.count
    return one_panel(spec, sim, end, f"tensor parallel: 1/{n:,} of every layer pair per worker, "
                                     f"{pairs} all-reduces per step")


def _schedule(spec, cost) -> tuple[Sim, float, int]:
    """Every worker runs the same layers in lockstep: per layer pair, its 1/N slice of the
    compute, then the all-reduce (it starts when the slowest worker arrives: the others'
    waits are drawn), forward in order, backward in reverse; the replicated parts (a
    transformer's embeddings and head) whole on every worker; then each updates its own slices."""
    sim = Sim(spec, cost)
    workers = spec.topology.workers
    ids, n, batch = workers.ids, workers.count, spec.training.batch_size
    plan = tensor_plan(model_section(spec), sim.flops)
    reduce = lambda values: sim.link(4 * batch * values * 2 * (n - 1) / n)
    opt = max(cost.min_ms, 2 * sim.params / n / cost.flops_per_ms)
    now = {w: 0.0 for w in ids}

    def compute(kind: str, flops: float, label: str) -> None:
        for w in ids:
            now[w] = sim.add(w, now[w], now[w] + _ms(spec, cost, w, flops), kind, label)

    def allreduce(values: int) -> None:
        if not values or n == 1:
            return
        ready = max(now.values())  # an all-reduce needs every worker's partial sum
        for w in ids:
            sim.add(w, now[w], ready, "wait", "")
            now[w] = sim.add(w, ready, ready + reduce(values), "allreduce", "AR")

    for _ in range(STEPS):
        compute("forward", plan.before, "")
        for pair in plan.pairs:
            compute("forward", pair.flops / n, "fwd")
            allreduce(pair.forward)
        compute("forward", plan.after, "")
        compute("backward", 2 * plan.after, "")
        for pair in reversed(plan.pairs):
            compute("backward", 2 * pair.flops / n, "bwd")
            allreduce(pair.backward)
        compute("backward", 2 * plan.before, "")
        for w in ids:
            now[w] = sim.add(w, now[w], now[w] + opt, "optimizer", "opt")
        step_end = max(now.values())
        now = {w: step_end for w in ids}
    return sim, step_end, 2 * len(plan.pairs)


def _ms(spec, cost, worker: str, flops_per_sample: float) -> float:
    """A worker's time for `flops_per_sample` on the whole batch, at its own slowdown."""
    return spec.training.batch_size * flops_per_sample / cost.flops_per_ms * spec.topology.workers.slowdown_of(worker)


def run_name(spec) -> str:
    return "tensor parallel"


def table_name(spec) -> str:
    return "tensor parallel"
