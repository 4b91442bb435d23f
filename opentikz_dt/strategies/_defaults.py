"""What a strategy plugin (this package) answers when its module says nothing.

Each function here is one hook of the strategy plugin interface (documented in this
package's __init__); a plugin module defines a function of the same name to answer
differently. Defaults read the strategy's descriptor (STRATEGY) where they need facts.
"""

from __future__ import annotations

# JSON-schema properties of the strategy keys only this kind reads, merged into the spec
# schema's `strategy` block for specs of this kind (built-ins keep theirs in
# schemas/spec.schema.json, so theirs is empty).
SCHEMA: dict = {}


def _descriptor(kind: str):
    from . import strategy

    return strategy(kind)


# --- the spec loader (spec.py) ------------------------------------------------------------

def title(block: dict) -> str:
    """The figure title of a spec that gives none; `block` is the resolved strategy block."""
    return _descriptor(block["kind"]).title


def resolve_defaults(data: dict, given: dict) -> None:
    """Fill the defaults that follow this kind into `data` (resolved, schema defaults in);
    `given` is the spec as written, to tell a default from the user's own value."""


def starter_block(kind: str) -> str:
    """The commented `strategy:` block of `dtgen init --strategy KIND`."""
    return f"strategy:\n  kind: {kind}"


def data_parallel_width(spec) -> int:
    """How many workers take their own slice of each global batch (the global batch is
    batch_size times this): every worker of a data-parallel kind, else one."""
    return spec.topology.workers.count if _descriptor(spec.strategy.kind).data_parallel else 1


# --- the rules (rules.py) -----------------------------------------------------------------

def rules(spec, model_blocks):
    """Yield (spec path, message) for what this kind cannot run. `model_blocks()` gives
    (how many blocks the model splits into, what one is called), or None for a python
    model (known only once built)."""
    return ()


# --- the edit operations (edit/operations.py) ---------------------------------------------

def server_refusal(ctx, verb: str) -> str | None:
    """Why add-server / remove-server (`verb` add or remove) cannot apply to a spec of this
    kind, or None when the server count is this kind's to change."""
    described = _descriptor(ctx.kind)
    low, high = described.servers
    if high == 0:
        sharded = " or ".join(_kinds_with_shards()) or "a kind with servers"
        return (f"cannot {verb} a server: strategy '{ctx.kind}' has no parameter server "
                f"(set-strategy --kind {sharded} first)")
    if high == low:
        return f"cannot {verb} a server: {ctx.kind} takes exactly {high} server(s)"
    return None


def mesh_refusal(ctx) -> str | None:
    """Why set-mesh (degrees per dimension) cannot apply to a spec of this kind, or None
    when this kind lays its workers out as a mesh."""
    from . import kinds_with

    meshes = " or ".join(kinds_with(lambda s: "parallelism" in s.options)) or "a kind with a mesh"
    return f"strategy '{ctx.kind}' has no mesh of degrees (set-strategy --kind {meshes} first)"


def _kinds_with_shards() -> list[str]:
    from . import kinds_with

    return kinds_with(lambda s: s.servers[1] is None)


def workers_changed(ctx, count: int) -> None:
    """add-worker / remove-worker set the worker count to `count`: adjust the keys that
    follow it in ctx.doc."""


def switch_workers(ctx, kind: str) -> int:
    """The worker count set-strategy gives a spec that switches to `kind` with fewer
    workers than it needs (ctx.model_blocks: the model's block count, or None)."""
    return _descriptor(kind).default_workers


def strategy_set(ctx, args: dict, workers: int) -> None:
    """set-strategy switched the spec to this kind with `args` (kind, algorithm, schedule:
    None where not given) and `workers` workers: fix what the new kind needs in ctx.doc."""


def node_spec_path(node: str, parts: list[str]) -> tuple | None:
    """The spec key behind a figure node only this kind draws (edit/nodepaths.py), or None."""
    return None


def expected_memory(spec, sizes) -> list:
    """Memory per rank, in the runner's rank order (opentikz_dt.memory): by default every
    worker holds a replica of the whole model, its gradients and its optimizer state."""
    return [sizes.rank("worker", w, sizes.params) for w in spec.topology.workers.ids]


def activation_plan(spec, rank: int):
    """What decides worker `rank`'s activations (memory_model.ActivationPlan): by
    default a data-parallel worker computing its whole slice at once."""
    from ..memory_model import ActivationPlan

    return ActivationPlan(micro_batch=spec.training.batch_size)


def tensor_degree(spec) -> int:
    """GPUs one tensor-parallel group spans: the mesh's tensor degree where the strategy
    has one (strategy.parallelism), else 1."""
    return int((spec.strategy.options.get("parallelism") or {}).get("tensor", 1))


def method_words(strategy) -> str:
    """The strategy as a summary line names it: the kind, its algorithm and sync mode
    where they are not the defaults (native, sync)."""
    return (strategy.kind + (f" ({strategy.algorithm})" if strategy.algorithm != "native" else "")
            + (f", {strategy.sync}" if strategy.sync != "sync" else ""))
