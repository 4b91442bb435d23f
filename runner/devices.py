"""What a run computed on, in the form calibrations compare (run.json's `device_info`): the
GPU model and how many the ranks used, or this machine's CPU model and core count. It is
read off run.json's `hardware` (runner/provenance.py), so the two never disagree."""

from __future__ import annotations

from ..predict.calibration import cpu_device


def device_record(ranks: list[dict], hardware: dict) -> dict:
    """{'kind': 'cuda', 'name': GPU model, 'count': GPUs used} or {'kind': 'cpu', 'name': CPU
    model, 'count': cores}, from the ranks' devices as run.json lists them ('cuda:0', 'cpu')."""
    gpus = sorted({(str(r.get("node_rank")), str(r.get("device"))) for r in ranks
                   if str(r.get("device") or "").startswith("cuda")})
    if not gpus:
        return cpu_device()
    names = list((hardware.get("gpus") or {}).values())
    return {"kind": "cuda", "name": names[0] if names else None, "count": len(gpus)}
