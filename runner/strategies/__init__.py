"""The runner's strategy plugins: one module per `strategy.kind` (named after it, '-' as
'_'; DTGEN_PLUGINS adds `<package>.runner` modules), each with `KIND`, `roles(spec)` and
`train(ctx)` (docs/dev/runner-interface.md).

Modules are imported on lookup, so one broken or missing strategy only affects the specs
that use it.
"""

from __future__ import annotations

from ...plugins import SideRegistry

REGISTRY = SideRegistry("runner", __name__)


def load_strategy(kind: str):
    """The runner plugin for a spec's `strategy.kind`."""
    from ...errors import InputError, RunError

    try:
        return REGISTRY.raw(kind)
    except InputError:
        raise RunError(f"strategy {kind!r} is not implemented in the runner") from None
