"""Environment variables set for a while, then put back as they were.

The launch sets a few for the ranks it starts (one math thread each, the rendezvous
store's settings, the run's own temporary folder) and must leave the caller's environment
as it found it: `dtgen calibrate`, the tests and the MCP server launch many runs from one
process. Imports no torch.
"""

from __future__ import annotations

import contextlib
import os


@contextlib.contextmanager
def environment(**values: str):
    """Set `values` in os.environ meanwhile; afterwards restore each one's old value, or its
    absence. Only these keys are restored: what else changes meanwhile is not ours to undo."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old
