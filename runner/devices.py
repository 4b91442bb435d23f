"""What a run computed on, for run.json and the calibrations fitted from it: the GPU model
and how many the ranks used, or this machine's CPU model and core count."""

from __future__ import annotations

from ..predict.calibration import cpu_device


def device_record(ranks: list[dict]) -> dict:
    """{'kind': 'cuda', 'name': GPU model, 'count': GPUs used} or {'kind': 'cpu', 'name': CPU
    model, 'count': cores}, from the ranks' devices as run.json lists them ('cuda:0', 'cpu')."""
    gpus = sorted({(str(r.get("node_rank")), str(r.get("device"))) for r in ranks
                   if str(r.get("device") or "").startswith("cuda")})
    if not gpus:
        return cpu_device()
    import torch

    try:  # the launcher's process: CUDA is set up here only now, after the ranks are gone
        name = torch.cuda.get_device_name(int(gpus[0][1].partition(":")[2] or 0))
    except (RuntimeError, AssertionError, ValueError):
        name = None
    return {"kind": "cuda", "name": name, "count": len(gpus)}
