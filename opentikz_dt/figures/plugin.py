"""The figures side's plugin registry (opentikz_dt/plugins.py): the module
`opentikz_dt/strategies/<kind>/figures.py` of each kind (an outside package's
`figures.py`), seen as a `FiguresPlugin` (figures/interface.py: the hooks, their
signatures and defaults). Drawing code asks `plugin_of(spec)`; it never compares a kind,
an algorithm, a sync mode or a schedule itself. Must not import torch.
"""

from __future__ import annotations

from ..plugins import SideRegistry

REGISTRY = SideRegistry("figures", "opentikz_dt.strategies", "opentikz_dt.figures.interface:FiguresPlugin",
                        submodule="figures")


def plugin(kind: str):
    """The figures plugin of `kind`, with the defaults for what it leaves out."""
    return REGISTRY.get(kind)


def plugin_of(spec):
    """The figures plugin of a spec's strategy."""
    return REGISTRY.get(spec.strategy.kind)
