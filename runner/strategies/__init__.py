"""Strategy modules: `strategy.kind` -> module with `roles(spec)` and `train(ctx)`.

Which module serves which kind is the strategy descriptor's `runner_module`
(opentikz_dt/strategies.py).

Modules are imported lazily so one broken or missing strategy only affects the specs
that use it. The interface is documented in docs/dev/runner-interface.md.
"""

from __future__ import annotations

import importlib

from ...strategies import STRATEGIES as DESCRIPTORS

STRATEGIES = {s.kind: s.runner_module for s in DESCRIPTORS}  # kind -> module name here


def load_strategy(kind: str):
    """The strategy module for a spec's `strategy.kind`."""
    from ...errors import RunError

    try:
        name = STRATEGIES[kind]
    except KeyError:
        raise RunError(f"no runner strategy for kind {kind!r}") from None
    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as exc:
        if exc.name == f"{__name__}.{name}":
            raise RunError(f"strategy {kind!r} is not implemented in the runner yet") from None
        raise
