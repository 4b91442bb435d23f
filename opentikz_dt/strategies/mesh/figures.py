"""Figures of hybrid parallelism on a device mesh (kind: mesh).

Topology (figures/topology_mesh.py): one grid per pipeline stage, tensor index across and
data index down, each dimension's groups outlined in their own colour and line style,
hosts as boxes, a legend; bounded at 1,024 workers. A run's topology adds each
dimension's bytes per worker and step to its legend line (annotate_measured).

Must not import torch."""

from __future__ import annotations

from .strategy import degrees
from ...figures.topology_mesh import bytes_per_dimension, measured_legend, mesh_layout

KIND = "mesh"
# Every collective is an all-reduce box whose phase names its dimension ("tensor
# all-reduce", "data reduce-scatter"): the timeline gives each phase its own fill (plain,
# dotted, crosshatched) and legend entry.
TIMELINE_BOXES = ("forward", "backward", "wgrad", "slowdown", "allreduce", "allreduce-b", "allreduce-c", "send", "wait",
                  "optimizer", "skipped")


def layout(spec, spacing):
    return mesh_layout(spec, spacing)


def annotate_measured(spec, layout, run):
    """A run's topology: each dimension's legend line with its bytes per worker and step,
    from the trace's collectives (their `dim`) and sends."""
    return measured_legend(spec, layout, bytes_per_dimension(run.trace.spans, len(run.trace.ranks)), run.metrics)


def spacing_needs(sizes):
    # The grid sets its own gaps (topology_mesh): colsep and rowsep are only the units its
    # positions are written in, so any the spec asks for will do.
    return 0.5, 0.5


def stage_lanes(spec) -> int:
    """Past figure.max_workers_drawn, one worker per pipeline stage stands for its data
    replicas and tensor peers (they run alike)."""
    d = degrees(spec)
    return d["data"] * d["tensor"] if d["pipeline"] > 1 else 0


def run_name(spec) -> str:
    d = degrees(spec)
    return " x ".join(dim for dim in ("pipeline", "data", "tensor") if d[dim] > 1) + " mesh"


def table_name(spec) -> str:
    return "mesh"
