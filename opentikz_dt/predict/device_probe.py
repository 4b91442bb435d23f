"""A device probe: one host's measured matmul rate, memory bandwidth and collective bus
bandwidth (`dtgen calibrate --device-probe`, runner/device_probe.py), in place of the
datasheet's in a plan on that device.

The file (JSON):

    {"dtgen_device_probe": 1,
     "device": {"kind": "cuda" | "cpu", "name": "NVIDIA H100 80GB HBM3", "count": 8},
     "matmul": {"dtype": "bfloat16", "flops_per_s": ..., "shape": [m, n, k], "points": [...]},
     "memory": {"bytes_per_s": ..., "copied_bytes": ...},
     "collectives": null | {"ranks": 8, "backend": "nccl",
                            "all-reduce" | "all-gather" | "reduce-scatter":
                                {"bus_bytes_per_s": ..., "points": [...]}},
     "made": {"torch": ..., "date": ..., "command": ...}}

What it replaces (probed_cluster), for a spec whose `hardware.device` is the probed GPU:
- matmuls in bf16 or fp16 (the probe multiplies in bf16; fp16 runs at the same tensor-core
  rate): the best-shape rate is the probe's best instead of the datasheet peak times the
  published efficiency; each GEMM's wave fill and roofline still apply on top. fp8, tf32
  and fp32 matmuls keep the datasheet's (the probe did not measure them).
- memory-bound work: the probe's copy rate instead of the datasheet model's HBM rate.
- collectives inside a host, where the probe ran over two or more GPUs: the slowest of
  its three collectives' bus bandwidth at its largest size (the model costs every
  collective inside a host at one bus rate). Across hosts the NIC stays the datasheet's:
  one host cannot measure it.
Must not import torch.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

from ..errors import DtgenError, UsageError
from ..hardware import DEVICES, matches

PROBE_FORMAT = 1
COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter")
MEASURED_PRECISIONS = ("bf16", "fp16")


class DeviceProbeError(DtgenError):
    """A device probe file that cannot be read, or that does not fit the plan."""


@dataclass(frozen=True)
class DeviceProbe:
    data: dict
    path: str
    warnings: tuple = ()  # as a Calibration's: what a prediction from it should print

    @property
    def device(self) -> dict:
        return self.data["device"]

    @property
    def described(self) -> str:
        """'8x NVIDIA H100 80GB HBM3' (cuda), 'cpu (Intel ...)'."""
        d = self.device
        return f"{d['count']}x {d['name']}" if d["kind"] == "cuda" else f"cpu ({d['name']})"

    @property
    def intra_bus(self) -> float | None:
        """The slowest collective's bus bandwidth inside the host (bytes/s); None for one GPU."""
        coll = self.data.get("collectives")
        return min(coll[k]["bus_bytes_per_s"] for k in COLLECTIVES) if coll else None


def is_device_probe(path) -> bool:
    """Whether a file given as --calibration is a device probe (JSON with its format key)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return isinstance(data, dict) and "dtgen_device_probe" in data


def _positive(data: dict, keys: tuple, where: str) -> None:
    node = data
    for key in keys:
        if not isinstance(node, dict) or key not in node:
            raise DeviceProbeError(f"{where}: {'.'.join(keys)}: missing")
        node = node[key]
    if isinstance(node, bool) or not isinstance(node, (int, float)) or not math.isfinite(node) or node <= 0:
        raise DeviceProbeError(f"{where}: {'.'.join(keys)}: {node!r} is not a positive number")


def load_device_probe(path) -> DeviceProbe:
    """Read and check a device probe, naming the first missing or bad value."""
    where = str(path)
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise DeviceProbeError(f"{where}: cannot read the device probe ({exc})") from None
    except ValueError as exc:
        raise DeviceProbeError(f"{where}: not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict) or data.get("dtgen_device_probe") != PROBE_FORMAT:
        raise DeviceProbeError(f"{where}: dtgen_device_probe: expected {PROBE_FORMAT} (not a dtgen device probe?)")
    device = data.get("device")
    if not isinstance(device, dict) or device.get("kind") not in ("cuda", "cpu") or not device.get("name"):
        raise DeviceProbeError(f"{where}: device: expected kind cuda or cpu and the device's name")
    _positive(data, ("matmul", "flops_per_s"), where)
    _positive(data, ("memory", "bytes_per_s"), where)
    if data.get("collectives") is not None:
        _positive(data, ("collectives", "ranks"), where)
        for kind in COLLECTIVES:
            _positive(data, ("collectives", kind, "bus_bytes_per_s"), where)
    return DeviceProbe(data, where)


def check_probe_device(probe: DeviceProbe, spec) -> None:
    """A probe sets a plan's rates only on the GPU it measured: anything else is one line at
    hardware.device (a CPU probe, another GPU), a usage error as for a calibration of
    another GPU (predict.hardware_calibration)."""
    preset = DEVICES[spec.hardware.device]
    if probe.device["kind"] == "cuda" and matches(preset, probe.device["name"]):
        return
    message = (f"the device probe {probe.path} measured {probe.described}, not {preset.device_key}; probe "
               "that device, or predict without it for datasheet rates")
    where = spec.located.issue(("hardware", "device"), message) if spec.located is not None else None
    raise UsageError(str(where) if where is not None else f"hardware.device: {message}")


def probed_cluster(probe: DeviceProbe, cluster) -> tuple:
    """(the cluster with the probe's measured rates, what was replaced: run.json's note)."""
    precision_measured = cluster.precision in MEASURED_PRECISIONS
    matmul = probe.data["matmul"]["flops_per_s"] if precision_measured else None
    hbm = probe.data["memory"]["bytes_per_s"]
    intra = probe.intra_bus
    probed = replace(cluster, matmul_measured=matmul, hbm_measured=hbm, intra_measured=intra)
    replaced = ["matmuls" if precision_measured else None, "HBM", "NVLink" if intra else None]
    kept = [f"{cluster.precision} matmuls" if not precision_measured else None,
            "NVLink" if not intra else None, "the NIC"]
    note = {"device_probe": probe.path, "device": probe.described, "made": probe.data.get("made", {}).get("date"),
            "matmul_flops_per_s": matmul, "matmul_datasheet_flops_per_s": cluster.matmul_rate,
            "hbm_bytes_per_s": hbm, "hbm_datasheet_bytes_per_s": cluster.hbm_rate,
            "intra_bus_bytes_per_s": intra, "intra_datasheet_bytes_per_s": cluster.bandwidth(cluster.intra),
            "measured": _listed(replaced), "datasheet": _listed(kept)}
    return probed, note


def _listed(items: list) -> str:
    """'matmuls, HBM and NVLink' of the items that are not None."""
    items = [x for x in items if x]
    return " and ".join(items) if len(items) < 3 else f"{', '.join(items[:-1])} and {items[-1]}"


def probed_caption(spec, gpus: int, note: dict) -> str:
    """The caption of a plan whose rates a device probe set."""
    return (f"expected on {spec.hardware.describe(gpus)}, {note['measured']} measured by a device probe of "
            f"{note['device']}, {note['datasheet']} from datasheets")
