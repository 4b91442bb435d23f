"""A calibration: what the predictor needs to know about one machine and one model.

Written by `dtgen calibrate` (measured by processes on this machine, runner/calibrate.py)
or fitted from a finished run's trace (fit.py), read by `load_calibration`, which
checks every value and says what differs when the calibration was made for another
model or machine. Times are seconds. Must not import torch.

Cost forms (fitted, so a prediction can go beyond the measured sizes):
  block forward / backward  c0 + c1 * samples          (per block, solo: one process)
  optimizer step            c0 * tensors + c1 * params (SGD with momentum)
  gradient add (server)     c1 * params per gradient summed
  point-to-point message    alpha + bytes * beta       (between two processes)
  all-reduce over n         2(n-1) alpha + 2(n-1)/n * bytes * beta
  broadcast / reduce over n ceil(log2 n) * (alpha + bytes * beta)
  step overhead             fixed time per step the trace does not cover (Python, loss.item, ...)
Compute of `k` processes that run at once on `cores_effective` cores takes
max(1, k / cores_effective) times as long as alone.
"""

from __future__ import annotations

import json
import math
import os
import platform
from dataclasses import dataclass
from pathlib import Path

from ..errors import DtgenError

FORMAT = 1
COMM_KINDS = ("p2p", "allreduce", "broadcast", "reduce")


class CalibrationError(DtgenError):
    """A calibration file is missing, malformed, or made for another model."""


@dataclass(frozen=True)
class Calibration:
    data: dict
    path: str = "<calibration>"
    warnings: tuple = ()

    @property
    def blocks(self) -> list:
        return self.data["compute"]["blocks"]

    @property
    def cores(self) -> float:
        return float(self.data["cores_effective"])

    def comm(self, kind: str) -> tuple[float, float]:
        c = self.data["comm"][kind]
        return float(c["alpha_s"]), float(c["beta_s_per_byte"])

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.data, indent=1), encoding="utf-8")
        os.replace(tmp, path)
        return path


def machine_info() -> dict:
    """What identifies this machine for a calibration (compared on load, warning only)."""
    return {"host": platform.node(), "cpus": os.cpu_count() or 1, "python": platform.python_version(),
            "machine": platform.machine()}


# ---------------------------------------------------------------- checking


def _number(data, key_path: str, where: str, minimum: float = 0.0) -> float:
    node = data
    for key in key_path.split("."):
        if isinstance(node, list):
            if not key.isdigit() or int(key) >= len(node):
                raise CalibrationError(f"{where}: {key_path}: missing")
            node = node[int(key)]
        elif isinstance(node, dict):
            if key not in node:
                raise CalibrationError(f"{where}: {key_path}: missing")
            node = node[key]
        else:
            raise CalibrationError(f"{where}: {key_path}: missing")
    if isinstance(node, bool) or not isinstance(node, (int, float)) or not math.isfinite(node):
        raise CalibrationError(f"{where}: {key_path}: {node!r} is not a number")
    if node < minimum:
        raise CalibrationError(f"{where}: {key_path}: {node!r} is less than {minimum:g}")
    return float(node)


def check_calibration(data, where: str) -> None:
    """Raise CalibrationError naming the first missing or bad value."""
    if not isinstance(data, dict):
        raise CalibrationError(f"{where}: expected a JSON object")
    if data.get("dtgen_calibration") != FORMAT:
        raise CalibrationError(f"{where}: dtgen_calibration: expected {FORMAT} (not a dtgen calibration file?)")
    _number(data, "cores_effective", where, 1e-3)
    _number(data, "ranks", where, 1)
    blocks = data.get("compute", {}).get("blocks") if isinstance(data.get("compute"), dict) else None
    if not isinstance(blocks, list) or not blocks:
        raise CalibrationError(f"{where}: compute.blocks: missing (a list with one entry per model block)")
    for i in range(len(blocks)):
        for part in ("forward", "backward"):
            for j in (0, 1):
                _number(data, f"compute.blocks.{i}.{part}.{j}", where)
    for j in (0, 1):
        _number(data, f"compute.optimizer.{j}", where)
    _number(data, "compute.add_per_param_s", where)
    _number(data, "compute.step_overhead_s", where)
    for kind in COMM_KINDS:
        _number(data, f"comm.{kind}.alpha_s", where)
        _number(data, f"comm.{kind}.beta_s_per_byte", where)
    if not isinstance(data.get("model"), dict) or not isinstance(data["model"].get("model"), dict):
        raise CalibrationError(f"{where}: model.model: missing (the training.model the calibration was made for)")


def learn_described_model(data: dict, where: str) -> None:
    """A calibration of a `python` model describes it (model.workload): make it known."""
    from .blocks import learn_model

    workload = data["model"].get("workload")
    if workload is None:
        return
    try:
        learn_model(data["model"]["model"], workload)
    except (KeyError, TypeError, ValueError):
        raise CalibrationError(f"{where}: model.workload: not a model description (blocks with name, tensors "
                               "and flops)") from None


def check_against(cal: Calibration, spec, strict: bool = True) -> list[str]:
    """Compare a calibration with the spec it should predict; raise (model) or return warnings (machine)."""
    from .blocks import model_blocks, model_signature

    warnings = []
    want, have = model_signature(spec), cal.data["model"]
    if have.get("model") != want["model"] or len(cal.blocks) != len(model_blocks(spec)):
        message = (f"{cal.path}: made for model {_describe(have.get('model'))}, but {spec.name} has "
                   f"{_describe(want['model'])}; calibrate this spec (dtgen calibrate SPEC)")
        if strict:
            raise CalibrationError(message)
        warnings.append(message)
    if have.get("batch_size") != want["batch_size"]:
        warnings.append(f"{cal.path}: measured at batch {have.get('batch_size')}, the spec uses "
                        f"{want['batch_size']} (compute scaled by the fitted per-sample cost)")
    here, there = machine_info(), cal.data.get("machine", {})
    diffs = [f"{k} {there.get(k)!r} here {here[k]!r}" for k in ("host", "cpus") if there.get(k) != here[k]]
    if diffs:
        warnings.append(f"{cal.path}: calibrated on another machine ({', '.join(diffs)}): "
                        "predictions describe that machine")
    return warnings


def _describe(model) -> str:
    if not isinstance(model, dict):
        return "(unknown)"
    return " ".join(f"{k}={json.dumps(v, separators=(',', ':'))}" for k, v in sorted(model.items()))


def load_calibration(path: str | Path, spec=None, strict: bool = True) -> Calibration:
    """Read and check a calibration file (and, given a spec, that it fits the spec)."""
    path = Path(path)
    if not path.is_file():
        raise CalibrationError(f"{path}: no such calibration file")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise CalibrationError(f"{path}: not a calibration (not UTF-8 text)") from None
    except ValueError as exc:
        raise CalibrationError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    check_calibration(data, str(path))
    learn_described_model(data, str(path))
    cal = Calibration(data, str(path))
    if spec is not None:
        cal = Calibration(data, str(path), tuple(check_against(cal, spec, strict)))
    return cal
