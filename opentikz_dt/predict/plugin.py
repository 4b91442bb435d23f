"""The predict side's plugin registry (opentikz_dt/plugins.py): the module
`opentikz_dt/strategies/<kind>/predict.py` of each kind (an outside package's
`predict.py`), seen as a `PredictPlugin` (predict/interface.py: the hooks, their
signatures and defaults). The predictor asks `REGISTRY.get(kind)`; it never compares a
kind, algorithm, sync mode or schedule itself. Must not import torch.
"""

from __future__ import annotations

from ..plugins import SideRegistry

REGISTRY = SideRegistry("predict", "opentikz_dt.strategies", "opentikz_dt.predict.interface:PredictPlugin",
                        submodule="predict")
