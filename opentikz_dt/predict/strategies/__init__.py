"""The predict side's strategy plugins: one module per `strategy.kind` (named after it,
'-' as '_': parameter-server -> parameter_server.py; DTGEN_PLUGINS adds `<package>.predict`
modules, opentikz_dt/plugins.py). The predictor never compares a kind, algorithm, sync
mode or schedule itself: it asks the kind's plugin, `REGISTRY.get(kind)`. The hooks, their
signatures and defaults: predict/plugin.py (PredictPlugin); a plugin module writes
`KIND`, `simulate_steps` and only what differs from the defaults.

Must not import torch.
"""

from __future__ import annotations

from ...plugins import SideRegistry

REGISTRY = SideRegistry("predict", __name__, "opentikz_dt.predict.plugin:PredictPlugin")
