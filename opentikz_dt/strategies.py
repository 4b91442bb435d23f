"""One descriptor per distribution strategy: what every side of dtgen needs to know.

The loader's defaults and rules, the CLI, `dtgen edit`, the figures and the runner all
read `STRATEGIES` instead of keeping their own table, so adding a strategy starts here.
What cannot be a table (a drawer, a rank's train loop) is named here and checked by
tests/test_strategies.py: it fails when one side has no entry for a kind. CONTRIBUTING.md
lists the remaining places by hand.

Must not import torch (the runner imports this, never the other way round).
"""

from __future__ import annotations

from dataclasses import dataclass

# Spans every worker's compute records through the runner's RankContext (whatever the
# strategy), on the trace's compute thread.
COMMON_PHASES = ("forward", "backward", "slowdown")


@dataclass(frozen=True)
class Strategy:
    kind: str  # the spec's strategy.kind
    title: str  # the figure title when the spec gives none
    runner_module: str  # opentikz_dt.runner.strategies.<runner_module>: roles(spec), train(ctx)
    phases: tuple[str, ...]  # span names its ranks record beyond COMMON_PHASES (trace vocabulary)
    algorithms: tuple[str, ...] = ("native",)  # strategy.algorithm values it accepts
    sync_modes: tuple[str, ...] = ("sync",)  # strategy.sync values it accepts
    options: tuple[str, ...] = ()  # strategy keys only this kind reads (edit drops them on a switch)
    workers: tuple[int, int | None] = (1, None)  # least and most workers (None: no limit)
    default_workers: int = 3
    servers: tuple[int, int | None] = (0, 0)  # least and most server shards; the least is the default
    server_label: str = "Parameter server"  # default topology.servers.label
    drawers: tuple[str, ...] = ()  # topology drawer per algorithm (same order); default: the kind
    data_parallel: bool = True  # every worker takes its own slice of the global batch (not pipeline)

    def drawer(self, algorithm: str) -> str:
        """The topology drawer (figures.topology) for this kind and algorithm."""
        return self.drawers[self.algorithms.index(algorithm)] if self.drawers else self.kind


STRATEGIES = (
    Strategy("single", "Single-device training", "single", ("optimizer",),
             workers=(1, 1), default_workers=1),
    Strategy("parameter-server", "Parameter-server training", "parameter_server",
             ("push", "fetch", "wait", "update"), sync_modes=("sync", "async"), servers=(1, None)),
    Strategy("central-storage", "Central-storage training", "central_storage",
             ("push", "fetch", "wait", "update"), servers=(1, 1), server_label="Central storage"),
    Strategy("allreduce", "All-reduce data-parallel training", "allreduce", ("allreduce", "optimizer", "wait"),
             algorithms=("native", "ring", "tree", "hierarchical"), options=("algorithm",), workers=(2, None),
             drawers=("allreduce", "ring", "tree", "hierarchical")),
    Strategy("gossip", "Decentralized gossip training", "gossip", ("gossip", "optimizer"),
             options=("peers",), workers=(2, None)),
    Strategy("pipeline", "Pipeline-parallel training", "pipeline", ("send", "recv", "optimizer"),
             options=("microbatches", "schedule", "stages"), workers=(2, None), data_parallel=False),
)

BY_KIND = {s.kind: s for s in STRATEGIES}
KINDS = tuple(BY_KIND)


def strategy(kind: str) -> Strategy:
    """The descriptor of `kind` (a validated spec's kind always has one)."""
    return BY_KIND[kind]


def kinds_with(predicate) -> list[str]:
    """Kinds whose descriptor satisfies `predicate`, in registry order (for messages)."""
    return [s.kind for s in STRATEGIES if predicate(s)]
