"""Repeats of one spec: find them, group them, and average them into one Run with its spread.

A repeat folder (`dtgen run --repeat N`) holds run directories r1..rN; several run
directories given to `dtgen compare` whose resolved specs are identical are repeats too.
The spread is min--max over the repeats (with the few repeats a CPU box affords, a
standard deviation would claim more than it knows). Must not import torch.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from pathlib import Path

from .run import Run, is_run_dir

_REPEAT = re.compile(r"^r([1-9][0-9]*)$")


def repeat_dirs(path: str | Path) -> list[Path]:
    """The run directories r1, r2, ... of a repeat folder, in order; [] when it is not one."""
    path = Path(path)
    if not path.is_dir() or is_run_dir(path):
        return []
    found = [(int(m.group(1)), p) for p in path.iterdir() if (m := _REPEAT.match(p.name)) and is_run_dir(p)]
    return [p for _, p in sorted(found)]


def expand(paths: list) -> list[Path]:
    """Run directories, with each repeat folder replaced by its repeats."""
    out = []
    for path in paths:
        out += repeat_dirs(path) or [Path(path)]
    return out


def group(runs: list) -> list[list]:
    """Runs of one resolved spec (measured and predicted apart), in order of first appearance."""
    groups: dict = {}
    for run in runs:
        key = (json.dumps(run.spec.data, sort_keys=True, default=str), run.info.get("predicted") is not None)
        groups.setdefault(key, []).append(run)
    return list(groups.values())


def name_apart(groups: list) -> None:
    """Groups of runs (`group`) that would be labelled alike (two specs of one name: a run
    with 60 steps and one with 30) are named by their run folder instead: a repeat folder's
    name for its repeats, else the run directory's (with its parent's where those coincide
    too), so no two legend entries or table rows read the same. Sets each run's `display`."""
    labels = [members[0].label for members in groups]
    clashing = [members for members, label in zip(groups, labels) if labels.count(label) > 1]

    def folder(members: list, parents: int) -> str:
        path = members[0].path.resolve()
        if len(members) > 1 or _REPEAT.match(path.name):  # r1, r2, ...: the repeat folder names them
            path = path.parent
        return "/".join(path.parts[len(path.parts) - 1 - parents:])

    for parents in range(4):
        names = [folder(members, parents) for members in clashing]
        if len(set(names)) == len(names):
            break
    for members, name in zip(clashing, names):
        for run in members:
            run.display = name


def _mean_range(values: list) -> tuple:
    values = [v for v in values if v is not None and math.isfinite(v)]
    if not values:
        return math.nan, math.nan, math.nan
    return statistics.fmean(values), min(values), max(values)


def aggregate(runs: list) -> Run:
    """One Run standing for repeats: per-step loss and wall time, samples/s and per-worker
    rates averaged; metrics["spread"] holds each one's (min, max); staleness pooled."""
    if len(runs) == 1:
        return runs[0]
    first = runs[0]
    metrics = dict(first.metrics)
    steps = max(len(r.metrics["loss"]) for r in runs)
    loss, loss_spread, wall = [], [], []
    for s in range(steps):
        mean, lo, hi = _mean_range([r.metrics["loss"][s] for r in runs if s < len(r.metrics["loss"])])
        loss.append(mean)
        loss_spread.append((lo, hi))
        wall.append(_mean_range([r.metrics["wall_s"][s] for r in runs if s < len(r.metrics["wall_s"])])[0])
    workers = list(dict.fromkeys(w for r in runs for w in r.metrics["per_worker_samples_per_s"]))
    rates = {w: _mean_range([r.metrics["per_worker_samples_per_s"].get(w) for r in runs]) for w in workers}
    total = _mean_range([r.metrics["samples_per_s"] for r in runs])
    metrics.update(loss=loss, wall_s=wall, samples_per_s=total[0],
                   per_worker_samples_per_s={w: v[0] for w, v in rates.items()},
                   staleness=[v for r in runs for v in r.metrics["staleness"]],
                   steps_per_worker={},  # differs per async repeat: the table and each run's own figures say it
                   spread={"loss": loss_spread, "samples_per_s": total[1:],
                           "per_worker_samples_per_s": {w: v[1:] for w, v in rates.items()}})
    info = dict(first.info, status=next((r.info["status"] for r in runs if r.failed), None) if any(r.failed for r in runs) else first.info.get("status", "ok"))
    return Run(first.path, first.spec, info, metrics, repeats=len(runs), display=first.display)
