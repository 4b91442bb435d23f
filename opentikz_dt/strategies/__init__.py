"""The strategies, one plugin module each (this package's modules; DTGEN_PLUGINS adds
more, opentikz_dt/plugins.py): the descriptor `STRATEGY` and the answers to the
questions the spec's loader, the rules and the edit contract ask about the strategy.

The strategy plugin interface. A module `<kind with '-' as '_'>.py` here (or an outside
package's `strategy.py`) holds:

  KIND = "<kind>"                  the spec's strategy.kind it serves
  STRATEGY = Strategy(...)         the descriptor (_base.py): title, worker and server
                                   bounds, algorithms, sync modes, own keys, ...
  SCHEMA = {key: json-schema}      its own strategy keys (outside plugins; built-ins keep
                                   theirs in schemas/spec.schema.json), merged into the
                                   spec schema's strategy block for specs of this kind

and, where the default (interface.py: StrategyPlugin, which types and documents each)
does not fit, hooks:

  title(block)                     the default figure title for a resolved strategy block
  resolve_defaults(data, given)    defaults that follow the kind (spec.resolve)
  starter_block(kind)              the `strategy:` block of `dtgen init`
  data_parallel_width(spec)        workers with their own slice of the global batch
  rules(spec, model_blocks)        yields (spec path, message) for what the kind refuses
  server_refusal(ctx, verb)        why add-server / remove-server cannot apply (or None)
  mesh_refusal(ctx)                why set-mesh cannot apply (or None)
  workers_changed(ctx, count)      add-worker / remove-worker changed the worker count
  switch_workers(ctx, kind)        the worker count set-strategy gives when too few
  strategy_set(ctx, args, workers) set-strategy switched to this kind: fix what it needs
  node_spec_path(node, parts)      the spec key behind a figure node only this kind draws
  expected_memory(spec, sizes)     memory per rank by category, in rank order (opentikz_dt/memory.py)
  activation_plan(spec, rank)      what decides a worker's activations (memory_model.ActivationPlan)
  tensor_degree(spec)              GPUs one tensor-parallel group spans (rules' hardware warnings)
  method_words(strategy)           the strategy in a summary line: kind, non-default algorithm, sync

Code outside the plugins asks these; it never compares a kind, algorithm, sync mode or
schedule name itself. Must not import torch (the runner imports this, never the other
way round).
"""

from __future__ import annotations

import copy

from .. import resources
from ..errors import InputError
from ..plugins import SideRegistry
from ._base import COMMON_PHASES, Strategy

REGISTRY = SideRegistry("strategy", __name__, "opentikz_dt.strategies.interface:StrategyPlugin", submodule="strategy")

__all__ = ["COMMON_PHASES", "Strategy", "REGISTRY", "all_strategies", "kinds", "strategy", "plugin", "kinds_with",
           "outside_kinds", "spec_schema"]


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


def outside_kinds() -> list[str]:
    """The kinds served by plugins from outside dtgen (DTGEN_PLUGINS, `REGISTRY.register`):
    those the shipped schema's strategy.kind enum does not list."""
    listed = resources.spec_schema()["properties"]["strategy"]["properties"]["kind"]["enum"]
    return [k for k in REGISTRY.kinds() if k not in listed]


def spec_schema(kind: str | None = None) -> dict:
    """The spec schema (schemas/spec.schema.json) with the kinds of outside plugins in
    strategy.kind's enum and, for a spec of `kind`, that plugin's SCHEMA keys in the
    strategy block. Without outside plugins: the shipped schema itself (do not change it)."""
    shipped = resources.spec_schema()
    extra = outside_kinds()
    if not extra:
        return shipped
    own = dict(getattr(REGISTRY.raw(kind), "SCHEMA", None) or {}) if kind in extra else {}
    schema = copy.deepcopy(shipped)
    block = schema["properties"]["strategy"]
    block["properties"]["kind"]["enum"] += extra
    for key, node in own.items():
        if key in block["properties"]:
            raise InputError(f"the {kind} strategy plugin's SCHEMA redefines strategy.{key}, "
                             "a key every spec has; name its own keys differently")
        block["properties"][key] = node
    return schema


def __getattr__(name):
    # The tables older code reads; computed on use so DTGEN_PLUGINS' strategies are in them.
    if name == "STRATEGIES":
        return all_strategies()
    if name == "KINDS":
        return kinds()
    if name == "BY_KIND":
        return {s.kind: s for s in all_strategies()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
