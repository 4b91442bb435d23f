"""Shared fixtures and the skip rules for markers (gpu skips without CUDA; latex without pdflatex)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))


def pytest_collection_modifyitems(config, items):
    no_tex = shutil.which("pdflatex") is None
    for item in items:
        if "latex" in item.keywords and no_tex:
            item.add_marker(pytest.mark.skip(reason="pdflatex not installed (see README: TeX packages)"))
        if "gpu" in item.keywords and not _cuda_available():
            item.add_marker(pytest.mark.skip(reason="no CUDA device on this machine"))


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.fixture
def repo() -> Path:
    return REPO
