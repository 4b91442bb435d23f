"""What the fork server (runner/forkserver.py) imports once for every rank on the CPU.

The environment is recorded last, after torch has set what it sets on import (its compile
cache folder): a rank compares its own with it to tell what the elastic launcher set for
it (forkserver.adopt_launch_environment).
"""

import os

import torch  # noqa: F401
import torch._dynamo  # noqa: F401  (torch.optim imports it at a rank's first step)
import torch.distributed  # noqa: F401
import torch.optim  # noqa: F401

from . import worker  # noqa: F401


def _rank_side() -> None:
    """What a rank imports next: the spec's validation (jsonschema; the figures side, whose
    palette rules a spec's check includes), the built-in strategies' rank and figure sides
    and the torch packages they use (torch.distributed.optim alone, for
    ZeroRedundancyOptimizer, takes 0.35 s). Eight ranks importing these at once on two
    cores cost about a second each before their process group exists. A strategy module
    that fails to import is left to fail in the rank that uses it, with its own message
    (runner/strategies: load_strategy)."""
    import torch.distributed.optim  # noqa: F401
    import torch.distributed.pipelining  # noqa: F401

    from .. import spec  # noqa: F401
    from ..figures.plugin import REGISTRY as FIGURES
    from .strategies import REGISTRY as RUNNER

    for registry in (RUNNER, FIGURES):
        try:
            kinds = registry.kinds()
        except Exception:  # noqa: BLE001  (a plugin package that fails: reported by the rank that needs it)
            continue
        for kind in kinds:
            try:
                registry.get(kind)
            except Exception:  # noqa: BLE001  (reported by the rank that needs it)
                pass


_rank_side()
SERVER_ENV = dict(os.environ)
