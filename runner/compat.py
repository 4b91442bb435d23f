"""The torch releases dtgen supports, and the one place that copes with their differences.

GPU boxes run the torch their CUDA stack came with, rarely the newest. dtgen supports
torch 2.10 to 2.15 (TORCH_RANGE, the same as pyproject's `run` extra) and refuses any
other release in one line before anything is spawned. Within the range, a keyword or
function that appeared after 2.10 is feature-detected here (never by comparing version
numbers): `accepted` keeps only the keywords a callable takes, so the launcher's options
that newer releases added are used where they exist and left out where they do not.
CI runs the runner's core tests on the oldest release (`make test-oldest-torch`).
"""

from __future__ import annotations

import inspect
import re

from ..errors import ToolMissingError

TORCH_RANGE = ((2, 10), (2, 16))  # [oldest, first unsupported): 2.10 ... 2.15
RANGE_TEXT = "torch>=2.10,<2.16 (2.10 to 2.15)"


def torch_release(version: str) -> tuple[int, int] | None:
    """(major, minor) of a torch version string such as '2.11.0+cu130' or '2.16.0a0+git1234';
    None when it is not one. Pre-releases count as their release (2.16.0a0 is 2.16)."""
    found = re.match(r"\s*(\d+)\.(\d+)", version or "")
    return (int(found.group(1)), int(found.group(2))) if found else None


def check_torch(version: str | None = None) -> None:
    """Raise ToolMissingError (exit 4, as for a missing torch) naming the installed torch and
    the supported range when it is outside it."""
    if version is None:
        import torch

        version = torch.__version__
    release = torch_release(str(version))
    low, high = TORCH_RANGE
    if release is None or not low <= release < high:
        raise ToolMissingError(f"torch {version} is installed, but dtgen supports {RANGE_TEXT}: "
                       f"install a supported release (pip install 'torch>=2.10,<2.16')")


def accepted(func, **kwargs) -> dict:
    """The keyword arguments `func` (a function or class) accepts, out of `kwargs`.

    For options a newer torch added (e.g. LaunchConfig's `shutdown_timeout`, not in 2.11):
    passed where they exist, dropped where they do not. A callable taking **kwargs accepts all."""
    try:
        params = inspect.signature(func).parameters
    except (TypeError, ValueError):  # a builtin without a signature: pass nothing optional
        return {}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return dict(kwargs)
    return {k: v for k, v in kwargs.items() if k in params}
