"""The runner side's plugin interface: `RunnerPlugin` lists every question the runner asks
about a strategy. A plugin module (runner/strategies/<kind>.py, or an outside package's
`runner.py`) defines `KIND`, `roles` and `train` (docs/dev/runner-interface.md) and, where
the default below does not fit, the others; the registry (opentikz_dt/plugins.py) builds
a `RunnerPlugin` from the module's names, the defaults for the rest. mypy checks every
plugin module against it (tests/test_plugin_types.py). The runner outside this package
never compares a kind, algorithm, sync mode or schedule name itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

Spec = Any  # the validated spec (opentikz_dt.spec_types.Spec)
RankContext = Any  # runner/context.py's RankContext


# --- the defaults ----------------------------------------------------------------------------

def default_check(*args: Any) -> None:
    """Nothing to refuse."""


def default_data_parallel_width(spec: Spec, roles: list) -> int:
    """Every `worker` rank takes its own slice of each global batch."""
    return sum(1 for role, _ in roles if role == "worker")


def default_figure_shards(spec: Spec, sizes: dict) -> dict:
    return {}


def default_sent(spec: Spec) -> str:
    return "gradients"


def default_process_environment(spec: Spec, backend: str) -> dict:
    return {}


def default_summary_variant(spec: Spec) -> str:
    return ""


def default_summary_facts(spec: Spec, metrics: dict) -> list[str]:
    return []


def default_divergence_hint(spec: Spec, metrics: dict) -> str:
    return ""


# --- the interface ---------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True, repr=False)
class RunnerPlugin:
    """How one strategy runs. Hooks without a default are required."""

    KIND: str  # the spec's strategy.kind it serves
    # roles(spec) -> [(role, id), ...]: every rank in rank order
    roles: Callable[[Spec], list[tuple[str, str]]]
    # train(ctx): one rank's part of the run (ctx: its RankContext)
    train: Callable[[RankContext], None]

    # Before anything is started (launch.py, placement.py, preflight.py)
    # check_nodes(spec, spec_path, nnodes): raise InputError if it cannot span nnodes machines
    check_nodes: Callable[[Spec, Any, int], None] = default_check
    # check_placement(placement, spec): raise InputError if it cannot run on these devices;
    # else None, or what running there costs (said in the run's first line)
    check_placement: Callable[[Any, Spec], Optional[str]] = default_check
    # data_parallel_width(spec, roles): ranks with their own slice of each global batch
    data_parallel_width: Callable[[Spec, list], int] = default_data_parallel_width
    # check_model(spec, model, names, where): raise InputError if the built model (parameter
    # `names`) cannot run it; `where` names the spec's model key
    check_model: Callable[[Spec, Any, list[str], str], None] = default_check
    # check_trial(spec, model, x, where): raise InputError if the model, run on the
    # preflight's trial samples `x`, shows it would train wrongly (before any rank starts)
    check_trial: Callable[[Spec, Any, Any, str], None] = default_check
    # figure_shards(spec, sizes): {server id: tensor names} for run.json when the figure
    # draws shards (sizes: {parameter name: numel}); {} without shards
    figure_shards: Callable[[Spec, dict], dict] = default_figure_shards
    # sent(spec): what the ranks send each other, for the run's first line ('' for nothing)
    sent: Callable[[Spec], str] = default_sent

    # In each rank (worker.py)
    # process_environment(spec, backend): environment a rank sets before its process group
    process_environment: Callable[[Spec, str], dict] = default_process_environment

    # The end-of-run summary (summary.py)
    # summary_variant(spec): what follows the kind in the first line (' (ring)'); '' for none
    summary_variant: Callable[[Spec], str] = default_summary_variant
    # summary_facts(spec, metrics): extra '; '-separated facts for the last line
    summary_facts: Callable[[Spec, dict], list[str]] = default_summary_facts
    # divergence_hint(spec, metrics): what the warning about a diverged loss adds
    divergence_hint: Callable[[Spec, dict], str] = default_divergence_hint

    def __repr__(self) -> str:
        return f"<{self.KIND} runner plugin>"
