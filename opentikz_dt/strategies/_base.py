"""The strategy descriptor: what every side of dtgen needs to know about a strategy as
data. Behaviour lives in the plugin modules (opentikz_dt/plugins.py)."""

from __future__ import annotations

from dataclasses import dataclass

# Spans every worker's compute records through the runner's RankContext (whatever the
# strategy), on the trace's compute thread.
COMMON_PHASES = ("forward", "backward", "slowdown")


@dataclass(frozen=True)
class Strategy:
    kind: str  # the spec's strategy.kind
    title: str  # the figure title when the spec gives none
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
    order: int = 100  # place in lists, messages and the schema's enum (built-ins 10, 20, ...)

    def drawer(self, algorithm: str) -> str:
        """The topology drawer (figures.topology) for this kind and algorithm."""
        return self.drawers[self.algorithms.index(algorithm)] if self.drawers else self.kind
