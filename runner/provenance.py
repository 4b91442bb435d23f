"""What a run directory records about its data and the machine it ran on.

- The run's spec.yaml names its dataset by absolute path, so the spec stays meaningful
  wherever the run directory is read from (a relative path would be read against the run
  directory); run.json's `dataset` adds the file's size and SHA-256, so a copy of the
  run on a machine without the data still says which data it trained on.
- run.json's `hardware`: the CPU model and the cores this process may use, and the model
  of each GPU the ranks used, which the measured figures print in their footer.
Imports torch only to name GPUs (runner/).
"""

from __future__ import annotations

import copy
import hashlib
import os
from pathlib import Path

from ..predict.calibration import cpu_model
from .capacity import cpu_cores

CHUNK = 1 << 20


def dataset_file(spec, spec_dir: str | Path) -> str | None:
    """The absolute path of a file or text dataset (relative paths are read beside the spec)."""
    dataset = spec.training.dataset
    if dataset.get("kind") not in ("file", "text") or "path" not in dataset:
        return None
    return str((Path(spec_dir) / dataset["path"]).resolve())


def run_spec_data(data: dict, dataset_path: str | None) -> dict:
    """The resolved spec as the run directory keeps it: its dataset named by absolute path."""
    if dataset_path is None:
        return data
    data = copy.deepcopy(data)
    data["training"]["dataset"]["path"] = dataset_path
    return data


def dataset_record(dataset_path: str | None) -> dict | None:
    """{path, bytes, sha256} of the dataset file the run read (None without one)."""
    if dataset_path is None:
        return None
    digest = hashlib.sha256()
    size = 0
    with open(dataset_path, "rb") as handle:
        while block := handle.read(CHUNK):
            digest.update(block)
            size += len(block)
    return {"path": dataset_path, "bytes": size, "sha256": digest.hexdigest()}


def hardware(ranks: list) -> dict:
    """run.json's `hardware` of this node: its CPU and cores, and the GPUs the ranks used
    (index -> model), from the devices the ranks recorded (cuda:0, ...)."""
    out = {"cpu": cpu_model(), "cores": cpu_cores(), "cores_total": os.cpu_count() or 1}
    used = sorted({int(d.split(":")[1]) for d in (r.get("device") or "" for r in ranks)
                   if d.startswith("cuda:") and d.split(":")[1].isdigit()})
    if used:
        import torch

        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        out["gpus"] = {str(i): torch.cuda.get_device_name(i) for i in used if i < count}
    return out
