"""Spec -> topology Layout (model.py) for every strategy. Pure; no TeX text beyond labels.

Layouts, left to right as the seed template: the data source, the workers, then what
they synchronise through (a server, a collective, a ring, a tree, peers, hosts, or
the next pipeline stage). Past figure.max_workers_drawn the workers are elided to the
first few, an ellipsis and the last, and a brace with the true count stands for them,
so the number of drawn objects is bounded whatever the worker count is.

Each strategy's figures plugin (strategies/<kind>/figures.py) draws its layout, mostly
through one module per strategy family (topology_ps, topology_allreduce, topology_peer)
over shared pieces (topology_common); the gaps come from spacing.effective_spacing: the
spec's colsep / rowsep, widened where labels or icons would collide (the plugin's
spacing_needs).
Must not import torch.
"""

from __future__ import annotations

import dataclasses

from .model import Layout
from .spacing import effective_spacing
from .plugin import plugin_of
from .topology_fit import compact_spec, fitted


def build_layout(spec) -> Layout:
    """The drawable topology of a spec's strategy (its figures plugin's layout), at the effective spacing."""
    plugin = plugin_of(spec)
    if fitted(spec):  # at a target width the gaps are the tightest the content allows: no notes
        spec = compact_spec(spec)
        return dataclasses.replace(plugin.layout(spec, effective_spacing(spec, plugin.spacing_needs)), notes=())
    return plugin.layout(spec, effective_spacing(spec, plugin.spacing_needs))
