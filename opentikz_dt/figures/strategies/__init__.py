"""The figures side of the strategy plugins (opentikz_dt/plugins.py): one module per
strategy kind (parameter-server -> parameter_server.py, declaring KIND = "parameter-server")
answers every question the drawing code asks about a strategy. The hooks, their
signatures and defaults: figures/plugin.py (FiguresPlugin). Drawing code asks
`plugin_of(spec)`; it never compares a kind, an algorithm, a sync mode or a schedule
itself. A strategy from outside dtgen puts such a module at `<package>.figures`
(DTGEN_PLUGINS). Must not import torch.
"""

from __future__ import annotations

from ...plugins import SideRegistry

REGISTRY = SideRegistry("figures", __name__, "opentikz_dt.figures.plugin:FiguresPlugin")


def plugin(kind: str):
    """The figures plugin of `kind`, with the defaults for what it leaves out."""
    return REGISTRY.get(kind)


def plugin_of(spec):
    """The figures plugin of a spec's strategy."""
    return REGISTRY.get(spec.strategy.kind)
