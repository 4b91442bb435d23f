"""The runner's strategy plugins: one module per `strategy.kind` (named after it, '-' as
'_'; DTGEN_PLUGINS adds `<package>.runner` modules), each with `KIND`, `roles(spec)` and
`train(ctx)` (docs/dev/runner-interface.md), and where the default (interface.py:
RunnerPlugin) does not fit, the runner's other questions about the strategy:

  check_nodes(spec, spec_path, nnodes)       can it span nnodes machines (launch.py)
  check_placement(placement, spec)           can it run on these devices, at what cost (placement.py)
  data_parallel_width(spec, roles)           ranks with their own batch slice (preflight)
  check_model(spec, model, names, where)     can the built model run it (preflight)
  figure_shards(spec, sizes)                 {server id: tensor names} for run.json
  sent(spec)                                 what its ranks send (the run's first line)
  process_environment(spec, backend)         environment a rank sets first (worker.py)
  summary_variant(spec)                      ' (algorithm)' after the kind (summary.py)
  summary_facts(spec, metrics)               extra facts for the summary's last line
  divergence_hint(spec, metrics)             what a diverged-loss warning adds

The runner outside this package asks these; it never compares a kind, algorithm, sync
mode or schedule name itself.

Modules are imported on lookup, so one broken or missing strategy only affects the specs
that use it.
"""

from __future__ import annotations

from ...plugins import SideRegistry

REGISTRY = SideRegistry("runner", __name__, "opentikz_dt.runner.strategies.interface:RunnerPlugin")


def load_strategy(kind: str):
    """The runner plugin for a spec's `strategy.kind` (with interface.py's defaults for
    what it leaves out)."""
    from ...errors import InputError, RunError

    try:
        return REGISTRY.get(kind)
    except InputError:
        raise RunError(f"strategy {kind!r} is not implemented in the runner") from None
