"""Spec -> topology Layout (model.py) for every strategy. Pure; no TeX text beyond labels.

Layouts, left to right as the seed template: the data source, the workers, then what
they synchronise through (a server, a collective, a ring, a tree, peers, hosts, or
the next pipeline stage). Past figure.max_workers_drawn the workers are elided to the
first few, an ellipsis and the last, and a brace with the true count stands for them,
so the number of drawn objects is bounded whatever the worker count is.

One module per strategy family (topology_ps, topology_allreduce, topology_peer) over
shared pieces (topology_common); the gaps come from spacing.effective_spacing: the
spec's colsep / rowsep, widened where labels or icons would collide.
Must not import torch.
"""

from __future__ import annotations

import dataclasses

from ..strategies import strategy
from .model import Layout
from .spacing import effective_spacing
from .topology_allreduce import allreduce_layout, hierarchical_layout, ring_layout, tree_layout
from .topology_peer import gossip_layout, pipeline_layout, single_layout
from .topology_fit import compact_spec, fitted
from .topology_ps import parameter_server_layout

_BUILDERS = {
    "parameter-server": parameter_server_layout,
    "central-storage": parameter_server_layout,
    "allreduce": allreduce_layout,
    "ring": ring_layout,
    "tree": tree_layout,
    "hierarchical": hierarchical_layout,
    "gossip": gossip_layout,
    "pipeline": pipeline_layout,
    "single": single_layout,
}


def build_layout(spec) -> Layout:
    """The drawable topology of a spec's strategy, at the effective spacing."""
    kind = layout_kind(spec)
    if fitted(spec):  # at a target width the gaps are the tightest the content allows: no notes
        spec = compact_spec(spec)
        return dataclasses.replace(_BUILDERS[kind](spec, effective_spacing(spec, kind)), notes=())
    return _BUILDERS[kind](spec, effective_spacing(spec, kind))


def layout_kind(spec) -> str:
    return strategy(spec.strategy.kind).drawer(spec.strategy.algorithm)
