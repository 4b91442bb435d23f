"""The strategies, one plugin module each (this package's modules; DTGEN_PLUGINS adds
more, opentikz_dt/plugins.py): the descriptor `STRATEGY` and the answers to the
questions the spec's loader, the rules and the edit contract ask about the strategy.

Must not import torch (the runner imports this, never the other way round).
"""

from __future__ import annotations

from ..plugins import SideRegistry
from ._base import COMMON_PHASES, Strategy

REGISTRY = SideRegistry("strategy", __name__, defaults=f"{__name__}._defaults")

__all__ = ["COMMON_PHASES", "Strategy", "REGISTRY", "all_strategies", "kinds", "strategy", "plugin", "kinds_with"]


def all_strategies() -> tuple[Strategy, ...]:
    """Every registered strategy's descriptor, in `order`."""
    found = [REGISTRY.raw(kind).STRATEGY for kind in REGISTRY.kinds()]
    return tuple(sorted(found, key=lambda s: (s.order, s.kind)))


def kinds() -> tuple[str, ...]:
    return tuple(s.kind for s in all_strategies())


def strategy(kind: str) -> Strategy:
    """The descriptor of `kind` (a validated spec's kind always has one)."""
    return REGISTRY.raw(kind).STRATEGY


def plugin(kind: str):
    """The strategy-side plugin of `kind` (rules, defaults, edit and caption hooks)."""
    return REGISTRY.get(kind)


def kinds_with(predicate) -> list[str]:
    """Kinds whose descriptor satisfies `predicate`, in registry order (for messages)."""
    return [s.kind for s in all_strategies() if predicate(s)]


def __getattr__(name):
    # The tables older code reads; computed on use so DTGEN_PLUGINS' strategies are in them.
    if name == "STRATEGIES":
        return all_strategies()
    if name == "KINDS":
        return kinds()
    if name == "BY_KIND":
        return {s.kind: s for s in all_strategies()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
