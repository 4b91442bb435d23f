"""What a runner plugin (this package) answers when its module says nothing.

Each function is one question the runner asks a strategy besides `roles` and `train`
(this package's __init__ lists them); a plugin module defines a function of the same
name to answer differently.
"""

from __future__ import annotations


# --- before anything is started (launch.py, placement.py, preflight.py) -------------------

def check_nodes(spec, spec_path, nnodes: int) -> None:
    """Raise InputError if this strategy cannot spread over `nnodes` machines (> 1)."""


def check_placement(placement, spec) -> str | None:
    """Raise InputError if `spec`'s strategy cannot run on `placement` (runner/placement.py);
    else None, or what running there costs (said in the run's first line)."""


def data_parallel_width(spec, roles) -> int:
    """How many ranks take their own slice of each global batch: every `worker`."""
    return sum(1 for role, _ in roles if role == "worker")


def check_model(spec, model, names: list[str], where: str) -> None:
    """Raise InputError if the built model (parameter `names`) cannot run this strategy;
    `where` names the spec's model key for the message."""


def check_trial(spec, model, x, where: str) -> None:
    """Raise InputError if the built model, run on the preflight's trial samples `x`, shows
    that this strategy would train it wrongly (before any rank is spawned); `where` names
    the spec's model key. Default: nothing to check."""


def figure_shards(spec, sizes: dict) -> dict:
    """{server id: tensor names} for run.json, when the figure draws shards (sizes: the
    built model's {parameter name: numel}); {} when the strategy has no shards."""
    return {}


def sent(spec) -> str:
    """What the ranks send each other, for the run's first line ('' when nothing)."""
    return "gradients"


# --- in each rank (worker.py) -------------------------------------------------------------

def process_environment(spec, backend: str) -> dict:
    """Environment variables a rank sets before its process group starts (backend: the
    resolved one, e.g. nccl)."""
    return {}


# --- the end-of-run summary (summary.py) --------------------------------------------------

def summary_variant(spec) -> str:
    """What follows the kind in the summary's first line (e.g. ' (ring)'); '' for none."""
    return ""


def summary_facts(spec, metrics: dict) -> list[str]:
    """Extra '; '-separated facts for the summary's last line."""
    return []


def divergence_hint(spec, metrics: dict) -> str:
    """What the warning about a diverged loss adds about this strategy ('' for nothing)."""
    return ""
