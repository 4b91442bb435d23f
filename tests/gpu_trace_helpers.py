"""Kineto traces in the shape torch.profiler writes for an NCCL run, from the profile-reading
benchmark's generator (benchmarks/bench_profile_read.py), for the tests that read GPU traces."""

from __future__ import annotations

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_profile_read.py"


def write_mesh_traces(folder: Path, mesh: tuple, steps: int, ops: int) -> Path:
    """One trace per rank of a `mesh` ((dimension, size), ...) into `folder`: `steps` profiled
    steps of `ops` operations each; returns the folder."""
    loaded = importlib.util.spec_from_file_location("bench_profile_read", BENCH)
    bench = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(bench)
    groups = bench.mesh_groups(mesh)
    world = 1
    for _, size in mesh:
        world *= size
    folder.mkdir(parents=True, exist_ok=True)
    for rank in range(world):
        bench.write_rank(folder, rank, world, steps, ops, groups)
    return folder
