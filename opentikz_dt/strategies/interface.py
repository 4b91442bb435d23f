"""The strategy side's plugin interface: `StrategyPlugin` lists every hook with its
signature. A plugin module (opentikz_dt/strategies/<kind>/strategy.py, or an outside
package's `strategy.py`) defines `KIND` and `STRATEGY` (required) and, where the default
below does not fit, a function of the hook's name; the registry (opentikz_dt/plugins.py)
builds a `StrategyPlugin` from the module's names, the defaults for the rest. mypy checks
every plugin module against it (tests/test_plugin_types.py).

The validated spec is typed `Spec = Any`: its type (spec_types) sits in a higher layer.
Must not import torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional

from ._base import Strategy

Spec = Any  # the validated spec (spec_types.Spec)
EditContext = Any  # edit/operations.py's context: ctx.kind, ctx.doc, ctx.model_blocks


def _descriptor(kind: str) -> Strategy:
    from . import strategy

    return strategy(kind)


# --- the defaults ----------------------------------------------------------------------------

def default_title(block: dict) -> str:
    """The descriptor's title."""
    return _descriptor(block["kind"]).title


def default_resolve_defaults(data: dict, given: dict) -> None:
    """Nothing follows the kind."""


def default_starter_block(kind: str) -> str:
    return f"strategy:\n  kind: {kind}"


def default_data_parallel_width(spec: Spec) -> int:
    """Every worker of a data-parallel kind, else one."""
    return spec.topology.workers.count if _descriptor(spec.strategy.kind).data_parallel else 1


def default_rules(spec: Spec, model_blocks: Callable[[], Any]) -> Iterable[tuple[str, str]]:
    return ()


def default_server_refusal(ctx: EditContext, verb: str) -> Optional[str]:
    """Refused where the descriptor allows no server or exactly one count of them."""
    described = _descriptor(ctx.kind)
    low, high = described.servers
    if high == 0:
        sharded = " or ".join(_kinds_with_shards()) or "a kind with servers"
        return (f"cannot {verb} a server: strategy '{ctx.kind}' has no parameter server "
                f"(set-strategy --kind {sharded} first)")
    if high == low:
        return f"cannot {verb} a server: {ctx.kind} takes exactly {high} server(s)"
    return None


def default_mesh_refusal(ctx: EditContext) -> Optional[str]:
    """Refused: only a kind with a `parallelism` option lays its workers out as a mesh."""
    from . import kinds_with

    meshes = " or ".join(kinds_with(lambda s: "parallelism" in s.options)) or "a kind with a mesh"
    return f"strategy '{ctx.kind}' has no mesh of degrees (set-strategy --kind {meshes} first)"


def _kinds_with_shards() -> list[str]:
    from . import kinds_with

    return kinds_with(lambda s: s.servers[1] is None)


def default_workers_changed(ctx: EditContext, count: int) -> None:
    """Nothing follows the worker count."""


def default_switch_workers(ctx: EditContext, kind: str) -> int:
    return _descriptor(kind).default_workers


def default_strategy_set(ctx: EditContext, args: dict, workers: int) -> None:
    """Nothing to fix."""


def default_node_spec_path(node: str, parts: list[str]) -> Optional[tuple]:
    return None


def default_expected_memory(spec: Spec, sizes: Any) -> list:
    """Every worker holds a replica of the whole model, its gradients and optimizer state."""
    return [sizes.rank("worker", w, sizes.params) for w in spec.topology.workers.ids]


def default_activation_plan(spec: Spec, rank: int) -> Any:
    """A data-parallel worker computing its whole slice at once."""
    from ..memory_model import ActivationPlan

    return ActivationPlan(micro_batch=spec.training.batch_size)


def default_tensor_degree(spec: Spec) -> int:
    """The mesh's tensor degree where the strategy has one (strategy.parallelism), else 1."""
    return int((spec.strategy.options.get("parallelism") or {}).get("tensor", 1))


def default_method_words(strategy: Any) -> str:
    """The kind, its algorithm and sync mode where they are not the defaults (native, sync)."""
    return (strategy.kind + (f" ({strategy.algorithm})" if strategy.algorithm != "native" else "")
            + (f", {strategy.sync}" if strategy.sync != "sync" else ""))


# --- the interface ---------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True, repr=False)
class StrategyPlugin:
    """One strategy's answers to the spec loader (spec.py), the rules (rules.py), the edit
    contract (edit/operations.py, edit/nodepaths.py) and the memory model (memory.py)."""

    KIND: str  # the spec's strategy.kind it serves
    STRATEGY: Strategy  # the descriptor (_base.py): title, bounds, algorithms, own keys, ...
    # JSON-schema properties of the strategy keys only this kind reads (outside plugins;
    # built-ins keep theirs in schemas/spec.schema.json), merged into the spec schema.
    SCHEMA: dict = field(default_factory=dict)
    # title(block): the figure title of a spec that gives none (block: the resolved strategy block)
    title: Callable[[dict], str] = default_title
    # resolve_defaults(data, given): fill the defaults that follow this kind into the resolved
    # `data`; `given` is the spec as written, to tell a default from the user's own value
    resolve_defaults: Callable[[dict, dict], None] = default_resolve_defaults
    # starter_block(kind): the commented `strategy:` block of `dtgen init --strategy KIND`
    starter_block: Callable[[str], str] = default_starter_block
    # data_parallel_width(spec): workers with their own slice of each global batch
    data_parallel_width: Callable[[Spec], int] = default_data_parallel_width
    # rules(spec, model_blocks): yield (spec path, message) for what this kind cannot run;
    # model_blocks() gives (block count, what one is called), or None for a python model
    rules: Callable[[Spec, Callable[[], Any]], Iterable[tuple[str, str]]] = default_rules
    # server_refusal(ctx, verb): why add-server / remove-server (verb add or remove) cannot
    # apply to a spec of this kind, or None when the server count is this kind's to change
    server_refusal: Callable[[EditContext, str], Optional[str]] = default_server_refusal
    # mesh_refusal(ctx): why set-mesh cannot apply, or None for a kind laid out as a mesh
    mesh_refusal: Callable[[EditContext], Optional[str]] = default_mesh_refusal
    # workers_changed(ctx, count): add-worker / remove-worker set the worker count to
    # `count`: adjust the keys that follow it in ctx.doc
    workers_changed: Callable[[EditContext, int], None] = default_workers_changed
    # switch_workers(ctx, kind): the worker count set-strategy gives a spec switching to
    # `kind` with fewer workers than it needs (ctx.model_blocks: the block count or None)
    switch_workers: Callable[[EditContext, str], int] = default_switch_workers
    # strategy_set(ctx, args, workers): set-strategy switched to this kind with `args`
    # (kind, algorithm, schedule; None where not given): fix what it needs in ctx.doc
    strategy_set: Callable[[EditContext, dict, int], None] = default_strategy_set
    # node_spec_path(node, parts): the spec key behind a figure node only this kind draws
    node_spec_path: Callable[[str, list[str]], Optional[tuple]] = default_node_spec_path
    # expected_memory(spec, sizes): memory per rank by category, in rank order (memory.py)
    expected_memory: Callable[[Spec, Any], list] = default_expected_memory
    # activation_plan(spec, rank): what decides worker `rank`'s activations
    # (memory_model.ActivationPlan: microbatch, microbatches in flight, tensor degree, ...)
    activation_plan: Callable[[Spec, int], Any] = default_activation_plan
    # tensor_degree(spec): GPUs one tensor-parallel group spans (the rules' hardware warnings)
    tensor_degree: Callable[[Spec], int] = default_tensor_degree
    # method_words(strategy): the strategy as a summary line names it
    method_words: Callable[[Any], str] = default_method_words

    def __repr__(self) -> str:
        return f"<{self.KIND} strategy plugin>"
