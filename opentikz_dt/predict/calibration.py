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
from .blocks import model_blocks, model_signature

FORMAT = 1
COMM_KINDS = ("p2p", "allreduce", "broadcast", "reduce")


class CalibrationError(DtgenError):
    """A calibration file is missing, malformed, or made for another model."""


# the words of a strategy block a calibration's `made_for` is compared on (same_strategy)
STRATEGY_WORDS = ("kind", "algorithm", "sync", "schedule")


def same_strategy(made: dict, spec) -> bool:
    """The spec runs the strategy the calibration was made on (`made_for`): the same words of
    its strategy block (kind, algorithm, sync, schedule)."""
    theirs, ours = dict(made.get("strategy") or {}), dict(spec.data.get("strategy") or {})
    return all(theirs.get(k) == ours.get(k) for k in STRATEGY_WORDS)


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

    @property
    def probed(self) -> set:
        """The collectives that only the probe measured (the calibration's run did not run them)."""
        return {k for k in ("allreduce", "broadcast", "reduce") if self.data["comm"][k].get("measured") == "probe"}

    @property
    def untraced_gaps(self) -> list:
        """The calibration run's untraced time per step (s, `noise.overhead_s`), sorted."""
        return sorted(float(g) for g in (self.data.get("noise") or {}).get("overhead_s", []) if g >= 0)

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


# ---------------------------------------------------------------- device and training
# A calibration records the device it measured and the spec's precision and optimizer
# (costs depend on all three); `dtgen predict` refuses one that differs from the spec.
# Files written before these fields existed are read as measured on the CPU at fp32 with
# SGD: the only thing dtgen could calibrate then (the probe always ran on the CPU).
OLD_DEVICE = {"kind": "cpu", "name": None, "count": None}
OLD_TRAINING = {"precision": "fp32", "optimizer": "sgd"}


def cpu_model() -> str:
    """This machine's CPU model ('Intel(R) Xeon(R) ...'), from /proc/cpuinfo where there is one."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.lower().startswith(("model name", "hardware")) and ":" in line:
                return " ".join(line.split(":", 1)[1].split())
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def cpu_device() -> dict:
    return {"kind": "cpu", "name": cpu_model(), "count": os.cpu_count() or 1}


def local_gpus() -> list[str]:
    """The NVIDIA GPUs' model names on this machine, read from the driver without torch
    (`dtgen predict` never imports it); [] where there is no NVIDIA driver."""
    names = []
    for info in sorted(Path("/proc/driver/nvidia/gpus").glob("*/information")):
        try:
            for line in info.read_text(encoding="utf-8", errors="replace").splitlines():
                if line.startswith("Model:"):
                    names.append(" ".join(line.split(":", 1)[1].split()))
        except OSError:
            continue
    return names


def training_of(spec_data: dict) -> dict:
    """The precision and optimizer kind a spec trains with (defaults where not said)."""
    training = spec_data.get("training") or {}
    return {"precision": str(training.get("precision", "fp32")),
            "optimizer": str((training.get("optimizer") or {}).get("kind", "sgd"))}


def describe_device(device: dict) -> str:
    """'cpu (Intel Xeon Gold 6248, 2 cores)', 'cuda (1x NVIDIA H100 80GB HBM3)'."""
    name, count = device.get("name"), device.get("count")
    if device.get("kind") == "cuda":
        return f"cuda ({count or '?'}x {name or 'unnamed GPU'})"
    detail = ", ".join(x for x in (name, f"{count} cores" if count else None) if x)
    return f"cpu ({detail})" if detail else "cpu"


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
    if "dtgen_device_probe" in data:
        raise CalibrationError(f"{where}: a device probe (dtgen calibrate --device-probe): it sets the rates of a "
                               "spec's hardware: device, its own GPU; this prediction needs a calibration "
                               "(dtgen calibrate SPEC)")
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
    for kind in COMM_KINDS:  # optional: where a collective's cost was measured (contention.collective_wait)
        measured = data["comm"][kind].get("measured", "run")
        if measured not in ("probe", "run"):
            raise CalibrationError(f"{where}: comm.{kind}.measured: {measured!r} must be probe or run")
        rounds = data["comm"][kind].get("rounds", [])  # optional: the probe's rounds (runner/calibrate.py)
        if not isinstance(rounds, list) or any(not isinstance(r, list) or len(r) != 2 for r in rounds):
            raise CalibrationError(f"{where}: comm.{kind}.rounds: expected a list of [alpha_s, beta_s_per_byte] "
                                   "pairs, one per round of the probe")
        for i in range(len(rounds)):
            for j in (0, 1):
                _number(data, f"comm.{kind}.rounds.{i}.{j}", where)
    # optional: a fitted latency's two mechanisms (fit.py); the latency a trace showed directly
    # where the fitted one was solved from the step time (opentikz_dt/strategies/pipeline/predict.py)
    for key in ("alpha_floor_s", "core_wait_s", "alpha_traced_s"):
        if key in data["comm"]["p2p"]:
            _number(data, f"comm.p2p.{key}", where)
    if "crowding" in data["comm"]["p2p"]:  # optional: the crowded run (runner/crowding.py)
        for key, low in (("cores", 1), ("processes", 2), ("wait_s", 0.0)):
            _number(data, f"comm.p2p.crowding.{key}", where, low)
        crowd = data["comm"]["p2p"]["crowding"]
        if "repeat_ratio" in crowd:
            _number(data, "comm.p2p.crowding.repeat_ratio", where, 1e-6)
        for key in ("alone_s", "hop_s"):  # optional: the crowded ring's hop (contention.ring_chain_hop)
            if key in crowd:
                _number(data, f"comm.p2p.crowding.{key}", where)
        if "untraced_s" in crowd:  # optional: the crowded run's untraced time per step (contention.crowd_untraced)
            _number(data, "comm.p2p.crowding.untraced_s", where)
            if not isinstance(crowd.get("strategy"), dict):
                raise CalibrationError(f"{where}: comm.p2p.crowding.strategy: expected the crowded run's "
                                       "strategy block beside untraced_s, e.g. {kind: allreduce, algorithm: ring}")
        if crowd["processes"] <= crowd["cores"]:
            raise CalibrationError(f"{where}: comm.p2p.crowding.processes: {crowd['processes']!r} must be more "
                                   f"than comm.p2p.crowding.cores ({crowd['cores']!r})")
    noise = data.get("noise") or {}
    repeats = noise.get("repeats", []) if isinstance(noise, dict) else []
    if not isinstance(repeats, list):  # optional: the calibration's runs repeated (runner/calibrate.py)
        raise CalibrationError(f"{where}: noise.repeats: expected a list of {{run, processes, ratio}}")
    for i, repeat in enumerate(repeats):
        if not isinstance(repeat, dict):
            raise CalibrationError(f"{where}: noise.repeats.{i}: expected {{run, processes, ratio}}")
        _number(data, f"noise.repeats.{i}.ratio", where, 1e-6)
        _number(data, f"noise.repeats.{i}.processes", where, 1)
    if not isinstance(data.get("model"), dict) or not isinstance(data["model"].get("model"), dict):
        raise CalibrationError(f"{where}: model.model: missing (the training.model the calibration was made for)")
    device = data.get("device", OLD_DEVICE)
    if not isinstance(device, dict) or device.get("kind") not in ("cpu", "cuda"):
        raise CalibrationError(f"{where}: device.kind: expected cpu or cuda (the device the calibration measured)")
    training = data.get("training", OLD_TRAINING)
    if not isinstance(training, dict) or not all(isinstance(training.get(k), str) for k in OLD_TRAINING):
        raise CalibrationError(f"{where}: training: expected precision and optimizer (the spec's, as measured)")


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


def check_against(cal: Calibration, spec, strict: bool = True, for_device: str | None = None) -> list[str]:
    """Compare a calibration with the spec it should predict; raise (model) or return warnings (machine).
    `for_device` (a device preset's GPU name): the prediction is for that device, not this
    machine's, so this machine's GPU is not compared (the preset checks the calibration's)."""
    from .blocks import model_blocks, model_signature

    warnings = []
    want, have = model_signature(spec), cal.data["model"]
    if have.get("model") != want["model"] or len(cal.blocks) != len(model_blocks(spec)):
        message = (f"{cal.path}: made for model {_describe(have.get('model'))}, but {spec.name} has "
                   f"{_describe(want['model'])}; calibrate this spec (dtgen calibrate SPEC)")
        if strict:
            raise CalibrationError(message)
        warnings.append(message)
    refusals, notes = _device_and_training_differences(cal, spec, for_device)
    for message in refusals:
        if strict:
            raise CalibrationError(message)
        warnings.append(message)
    warnings += notes
    if have.get("batch_size") != want["batch_size"]:
        warnings.append(f"{cal.path}: measured at batch {have.get('batch_size')}, the spec uses "
                        f"{want['batch_size']} (compute scaled by the fitted per-sample cost)")
    here, there = machine_info(), cal.data.get("machine", {})
    diffs = [f"{k} {there.get(k)!r} here {here[k]!r}" for k in ("host", "cpus") if there.get(k) != here[k]]
    if diffs and not for_device:  # a device preset predicts for the calibration's machine on purpose
        warnings.append(f"{cal.path}: calibrated on another machine ({', '.join(diffs)}): "
                        "predictions describe that machine")
    return warnings


def spec_device(spec) -> tuple[str | None, str]:
    """The device the spec asks for: ('cuda' | 'cpu', the keys that say so), or None for
    `runtime.device: auto`, which follows the machine; predictions are often made away from
    the box they are for, so there the calibration says which device the run will have."""
    device, backend = spec.runtime.device, spec.runtime.backend
    if device == "cuda" or backend == "nccl":
        return "cuda", f"runtime.device {device}" + (", runtime.backend nccl" if backend == "nccl" else "")
    if device == "cpu" or backend == "gloo":  # auto with gloo runs on the CPU (runner/placement.py)
        return "cpu", f"runtime.device {device}" + (", runtime.backend gloo" if device == "auto" else "")
    return None, "runtime.device auto"


def _device_and_training_differences(cal: Calibration, spec, for_device=None) -> tuple[list[str], list[str]]:
    """(refusals, warnings): another device kind than the spec asks for, another GPU model
    than this machine's, another precision or optimizer are refused; a CPU calibration for a
    spec on `auto` on a machine with a GPU (where `dtgen run` would use the GPU) is a warning.
    Illustrative calibrations measured nothing and are not checked."""
    if cal.data.get("source") == "illustrative":
        return [], []
    refusals, warnings = [], []
    device = cal.data.get("device", OLD_DEVICE)
    measured = describe_device(device) + (" (a calibration without a device: taken as the CPU)"
                                          if "device" not in cal.data else "")
    kind, why = spec_device(spec)
    here = [] if for_device else local_gpus()
    if kind is not None and kind != device["kind"]:
        refusals.append(f"{cal.path}: device: measured on {measured}, but {spec.name} runs on {kind} ({why}); "
                        f"calibrate on the device the spec runs on (dtgen calibrate SPEC there)")
    elif device["kind"] == "cuda" and here and device.get("name") and _gpu_key(device["name"]) != _gpu_key(here[0]):
        refusals.append(f"{cal.path}: device: measured on {measured}, but this machine's GPU is {here[0]}; "
                        f"calibrate on this machine (dtgen calibrate SPEC)")
    elif kind is None and device["kind"] == "cpu" and here:
        warnings.append(f"{cal.path}: device: measured on {measured}, but {spec.name} has runtime.device auto "
                        f"and this machine has a GPU ({here[0]}), which `dtgen run` would use: "
                        f"the prediction describes a CPU run")
    have, want = cal.data.get("training", OLD_TRAINING), training_of(spec.data)
    diffs = [f"{k} {have.get(k)} (the spec: {want[k]})" for k in ("precision", "optimizer") if have.get(k) != want[k]]
    if diffs:
        refusals.append(f"{cal.path}: training: measured with {', '.join(diffs)}; precision and optimizer "
                        f"change the costs: calibrate this spec (dtgen calibrate SPEC)")
    return refusals, warnings


def _gpu_key(name: str) -> str:
    return " ".join(name.casefold().split())


def _describe(model) -> str:
    if not isinstance(model, dict):
        return "(unknown)"
    return " ".join(f"{k}={json.dumps(v, separators=(',', ':'))}" for k, v in sorted(model.items()))


def load_calibration(path: str | Path, spec=None, strict: bool = True, for_device: str | None = None) -> Calibration:
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
        cal = Calibration(data, str(path), tuple(check_against(cal, spec, strict, for_device)))
    return cal


def illustrative_calibration(spec, flops_per_s: float = 2e9, bytes_per_s: float = 1e8, latency_s: float = 3e-4,
                             per_call_s: float = 2e-5) -> Calibration:
    """A calibration from round numbers (no measurement): for the expected timeline of a spec
    (`dtgen figure SPEC`, drawn in relative units), synthetic runs and what-if sweeps. The
    numbers are invented: 2 GFLOP/s per worker (a CPU core running the MLP), 100 MB/s and
    0.3 ms per message (gloo over a network), 20 µs per call; only their ratios mean
    something."""
    blocks = model_blocks(spec)
    data = {
        "dtgen_calibration": FORMAT, "source": "illustrative", "machine": machine_info(),
        "provenance": {"numbers": "invented round numbers, no measurement: only their ratios mean something"},
        "model": model_signature(spec), "ranks": 1, "cores_effective": 1e6,
        "compute": {"blocks": [{"name": b.name, "forward": [per_call_s, b.flops / flops_per_s],
                                "backward": [2 * per_call_s, 2 * b.flops / flops_per_s]} for b in blocks],
                    "optimizer": [per_call_s, 4 / flops_per_s], "add_per_param_s": 1 / flops_per_s,
                    "step_overhead_s": 0.0},
        "comm": {k: {"alpha_s": latency_s, "beta_s_per_byte": 1 / bytes_per_s}
                 for k in ("p2p", "allreduce", "broadcast", "reduce")},
    }
    return Calibration(data, "<illustrative>")
