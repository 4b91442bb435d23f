"""Per-rank checkpoints for restarts: checkpoints/step<k>/rank<r>.pt.

A step's checkpoint counts only when every rank wrote its file, so a crash in the
middle of a save falls back to the previous one. Each rank keeps its last KEEP files.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import torch

KEEP = 2


def checkpoint_every(spec) -> int:
    every = spec.runtime.checkpoint_every
    if every == 0 and spec.runtime.restarts > 0:
        return 10
    return every


def latest_complete(run_dir: Path, world_size: int) -> int | None:
    """The last step with a checkpoint from every rank, or None."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return None
    steps = []
    for d in root.glob("step*"):
        if d.name[4:].isdigit() and sum(1 for _ in d.glob("rank*.pt")) == world_size:
            steps.append(int(d.name[4:]))
    return max(steps, default=None)


def save(run_dir: Path, step: int, rank: int, state: dict) -> None:
    root = Path(run_dir) / "checkpoints"
    d = root / f"step{step}"
    d.mkdir(parents=True, exist_ok=True)
    tmp = d / f".rank{rank}.pt.tmp"
    torch.save(state, tmp)
    os.replace(tmp, d / f"rank{rank}.pt")
    mine = sorted((int(p.parent.name[4:]), p) for p in root.glob(f"step*/rank{rank}.pt") if p.parent.name[4:].isdigit())
    for _, old in mine[:-KEEP]:
        old.unlink(missing_ok=True)
        try:
            old.parent.rmdir()
        except OSError:
            pass


def load(run_dir: Path, step: int, rank: int) -> dict:
    return torch.load(Path(run_dir) / "checkpoints" / f"step{step}" / f"rank{rank}.pt", weights_only=False)


def remove_all(run_dir: Path) -> None:
    shutil.rmtree(Path(run_dir) / "checkpoints", ignore_errors=True)
