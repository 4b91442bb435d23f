"""Figures of tensor parallelism (issue 21): the topology draws every split layer cut
horizontally into one slice per worker and the all-reduce points between them
(topology_tensor.py). Must not import torch."""

from __future__ import annotations

from ...figures.spacing import allreduce_needs
from ...figures.topology_fit import fitted
from ...figures.topology_tensor import tensor_layout

KIND = "tensor"
TIMELINE_BOXES = ("forward", "backward", "slowdown", "allreduce", "optimizer", "skipped", "wait")


def layout(spec, spacing):
    return tensor_layout(spec, spacing, fitted(spec))


def spacing_needs(sizes):
    return allreduce_needs(sizes)


def run_name(spec) -> str:
    return "tensor parallel"


def table_name(spec) -> str:
    return "tensor parallel"
