"""Figures of tensor parallelism: a STAND-IN until the tensor figures are drawn (issue 21:
layers cut horizontally into one slice per worker, the all-reduce points between them).

Until then the topology is the native all-reduce's (the workers meeting in one
collective, which is what every layer pair does), and the expected schedule one step as
the workers run it: each computes its slice of the forward, the layer pairs' all-reduces
follow (one box for all of them), the same for backward, then each updates its own slices.
Must not import torch."""

from __future__ import annotations

from ..schedule import STEPS, Sim, one_panel
from ..spacing import allreduce_needs
from ..topology_fit import fitted
from ..topology_tensor import tensor_layout

KIND = "tensor"
TIMELINE_BOXES = ("forward", "backward", "slowdown", "allreduce", "optimizer", "skipped")


def layout(spec, spacing):
    return tensor_layout(spec, spacing, fitted(spec))


def spacing_needs(sizes):
    return allreduce_needs(sizes)


def expected_timeline(spec, cost):
    sim, end = _schedule(spec, cost)
    return one_panel(spec, sim, end, "tensor parallel: each worker computes its slices; "
                                     "the layers' all-reduces sum them, forward and backward")


def _schedule(spec, cost) -> tuple[Sim, float]:
    sim = Sim(spec, cost)
    workers = spec.topology.workers.ids
    n, batch = len(workers), spec.training.batch_size
    widths = sim.workload.activations if sim.workload is not None and sim.workload.activations else (1,)
    pairs = max(1, len(widths))
    # one all-reduce per layer pair and pass, of the pair's output (its activations per sample)
    reduce = pairs * sim.link(4 * batch * max(widths) * 2 * (n - 1) / n)
    fwd = batch * sim.flops / n / cost.flops_per_ms
    opt = max(cost.min_ms, 2 * sim.params / n / cost.flops_per_ms)
    t = 0.0
    for _ in range(STEPS):
        for w in workers:
            end = sim.add(w, t, t + fwd, "forward", "fwd")
            end = sim.add(w, end, end + reduce, "allreduce", "all-reduce")
            end = sim.add(w, end, end + 2 * fwd, "backward", "bwd")
            end = sim.add(w, end, end + reduce, "allreduce", "all-reduce")
            end = sim.add(w, end, end + opt, "optimizer", "opt")
        t = end
    return sim, t


def run_name(spec) -> str:
    return "tensor parallel"


def table_name(spec) -> str:
    return "tensor parallel"
