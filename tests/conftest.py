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


@pytest.fixture
def netcluster():
    """Factory for emulated clusters (scripts/netcluster.sh): `netcluster(hosts, link)`.
    Every cluster it made is torn down afterwards, also when the test failed, and the
    test fails if any of their namespaces is left."""
    from opentikz_dt.runner.netcluster import NetCluster, namespaces, unavailable_reason

    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    made = []

    def make(hosts: int, link: str = "200mbit"):
        cluster = NetCluster(hosts, link)
        made.append(cluster)
        return cluster.up()

    yield make
    for cluster in made:
        cluster.down()
    left = [ns for cluster in made for ns in namespaces(cluster.name + "-")]
    assert not left, f"namespaces left behind: {left}"
