"""Figures of hybrid data x tensor parallelism (kind: mesh).

Topology: a STAND-IN until the mesh figure is drawn (issue 23: the workers as a grid,
each dimension's groups outlined in their own colour and style, hosts as boxes): the
native all-reduce's figure, the workers meeting in one collective.

Expected schedule: one step as every worker runs it, each collective labelled with its
dimension (an all-reduce box whose phase names it, e.g. "tensor all-reduce"): its slice
of the forward, its tensor group's all-reduces (`tp AR`), the backward and its tensor
all-reduces, then the data dimension (`dp AR`: one gradient all-reduce; with fsdp the
all-gather `dp AG` before the forward and the reduce-scatter `dp RS`, whole-model here
for simplicity: the runner gathers and scatters unit by unit, overlapped with the
passes), then the update of its slices. Must not import torch."""

from __future__ import annotations

from ...strategies.mesh import data_method, degrees
from ..schedule import STEPS, Sim, one_panel
from ..topology_mesh import mesh_layout

KIND = "mesh"
# Every collective is an all-reduce box whose phase names its dimension ("tensor
# all-reduce", "data reduce-scatter"): the timeline gives each phase its own fill (plain,
# dotted, crosshatched) and legend entry.
TIMELINE_BOXES = ("forward", "backward", "slowdown", "allreduce", "allreduce-b", "allreduce-c", "optimizer", "skipped")


def layout(spec, spacing):
    return mesh_layout(spec, spacing)


def spacing_needs(sizes):
    return 0.0, 0.0  # the grid sets its own gaps (topology_mesh): colsep and rowsep are only its units


def expected_timeline(spec, cost):
    sim, end = _schedule(spec, cost)
    d = degrees(spec)
    return one_panel(spec, sim, end, f"{d['data']} data x {d['tensor']} tensor: each collective in its dimension's "
                                     "group (tp: tensor, dp: data)")


def _fsdp(spec) -> bool:
    return data_method(spec) == "fsdp"


def _schedule(spec, cost) -> tuple[Sim, float]:
    sim = Sim(spec, cost)
    d = degrees(spec)
    tp, dp = d["tensor"], d["data"]
    batch = spec.training.batch_size
    widths = sim.workload.activations if sim.workload is not None and sim.workload.activations else (1,)
    pairs = max(1, len(widths))
    reduce_tp = pairs * sim.link(4 * batch * max(widths) * 2 * (tp - 1) / tp) if tp > 1 else 0.0
    held = sim.params / tp  # a rank's slice of the parameters (4 bytes each)
    # one all-reduce of the gradient slice; fsdp: an all-gather and a reduce-scatter (half each)
    reduce_dp = sim.link(4 * held * 2 * (dp - 1) / dp) if dp > 1 else 0.0
    fwd = batch * sim.flops / tp / cost.flops_per_ms
    opt = max(cost.min_ms, 2 * held / (dp if _fsdp(spec) else 1) / cost.flops_per_ms)
    t = 0.0
    for _ in range(STEPS):
        for w in spec.topology.workers.ids:
            end = t
            if _fsdp(spec):
                end = sim.add(w, end, end + reduce_dp / 2, "allreduce", "dp AG", phase="data all-gather")
            end = sim.add(w, end, end + fwd, "forward", "fwd")
            end = sim.add(w, end, end + reduce_tp, "allreduce", "tp AR", phase="tensor all-reduce")
            end = sim.add(w, end, end + 2 * fwd, "backward", "bwd")
            end = sim.add(w, end, end + reduce_tp, "allreduce", "tp AR", phase="tensor all-reduce")
            if _fsdp(spec):
                end = sim.add(w, end, end + reduce_dp / 2, "allreduce", "dp RS", phase="data reduce-scatter")
            else:
                end = sim.add(w, end, end + reduce_dp, "allreduce", "dp AR", phase="data all-reduce")
            end = sim.add(w, end, end + opt, "optimizer", "opt")
        t = end
    return sim, t


def run_name(spec) -> str:
    return "data x tensor mesh"


def table_name(spec) -> str:
    return "mesh"
