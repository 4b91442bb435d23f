"""`dtgen calibrate --device-probe`: what this machine's accelerator achieves, measured.

The datasheet model (opentikz_dt/predict/datasheet.py) runs matrix multiplies at the
device's dense peak times a published best-shape efficiency, memory-bound work at the HBM
bandwidth a published streaming measurement reaches (the datasheet's where there is none)
and collectives inside a host at NVLink's datasheet rate. A device
probe replaces those three with what this box does (opentikz_dt/predict/device_probe.py
reads it), the way the published efficiency was measured in the first place:

  - matmul: square GEMMs of several sizes in the precision a GPU trains in (bf16; fp32
    on a CPU), each timed as the mean of REPS calls after WARMUP, the fastest size kept:
    the best-shape rate, as S. Bekman's mamf-finder measures it (the model's own wave
    fill then says how far a smaller GEMM falls short of it);
  - memory: a device-to-device copy of a large buffer, read plus written bytes over the
    mean time of a call (the rate memory-bound kernels stream at);
  - collectives: with two or more GPUs on this host, one process per GPU over NCCL
    (gloo on a CPU), all-reduce, all-gather and reduce-scatter at several sizes, each
    size's bus bandwidth as nccl-tests defines it (bytes x 2(n-1)/n for an all-reduce,
    x (n-1)/n for the other two, over the time), the largest size's kept.

It writes one JSON file (format: opentikz_dt/predict/device_probe.py); it measures one
host, so across hosts the network stays the datasheet's.
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

from ..measured.profile_stats import bus_factor
from ..predict.calibration import cpu_device
from ..predict.device_probe import PROBE_FORMAT

WARMUP, REPS = 3, 10
# (bf16 on a GPU, fp32 on a CPU): sizes a GPU reaches its best rate at, and what a CPU
# multiplies in well under a second
GEMM_SIZES = {"cuda": (2048, 4096, 8192, 12288, 16384), "cpu": (256, 512, 768)}
COPY_BYTES = {"cuda": 1 << 30, "cpu": 64 << 20}
COLLECTIVE_BYTES = {"cuda": (64 << 20, 256 << 20, 1 << 30), "cpu": (1 << 20, 4 << 20)}


def _timed(fn, device: str, reps: int = REPS) -> float:
    """Mean seconds per call of fn after WARMUP calls (CUDA: the device's own clock)."""
    for _ in range(WARMUP):
        fn()
    if device == "cuda":
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / 1e3 / reps
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps


def matmul(device: str) -> dict:
    """The best rate over square GEMMs of GEMM_SIZES, and every size's."""
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    points = []
    for n in GEMM_SIZES[device]:
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)
        out = torch.empty(n, n, device=device, dtype=dtype)
        seconds = _timed(lambda: torch.matmul(a, b, out=out), device)
        points.append({"m": n, "n": n, "k": n, "flops_per_s": 2 * n ** 3 / seconds})
        del a, b, out
    best = max(points, key=lambda p: p["flops_per_s"])
    return {"dtype": str(dtype).removeprefix("torch."), "flops_per_s": best["flops_per_s"],
            "shape": [best["m"], best["n"], best["k"]], "points": points}


def memory(device: str) -> dict:
    """Read plus written bytes per second of a large device-to-device copy."""
    nbytes = COPY_BYTES[device]
    src = torch.empty(nbytes, dtype=torch.uint8, device=device).fill_(1)
    dst = torch.empty_like(src)
    seconds = _timed(lambda: dst.copy_(src), device)
    return {"bytes_per_s": 2 * nbytes / seconds, "copied_bytes": nbytes}


def _collective_rank(rank: int, world: int, device: str, store_path: str, out_path: str) -> None:
    import torch.distributed as dist

    # torch 2.13 renamed the tensor forms (the old names warn); 2.10 has only the old ones
    all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    if device == "cuda":
        torch.cuda.set_device(rank)
    else:
        torch.set_num_threads(1)  # the processes share the cores, as dtgen's CPU ranks do
    dist.init_process_group("nccl" if device == "cuda" else "gloo", store=dist.FileStore(store_path, world),
                            rank=rank, world_size=world)
    try:
        ops = {"all-reduce": lambda t, _: dist.all_reduce(t), "all-gather": all_gather,
               "reduce-scatter": reduce_scatter}
        result = {}
        for name, op in ops.items():
            points = []
            for nbytes in COLLECTIVE_BYTES[device]:
                count = nbytes // 4 // world * world  # float32 elements, a whole share each
                big = torch.ones(count, device=device)
                share = torch.empty(count // world, device=device)
                args = {"all-reduce": (big, None), "all-gather": (big, share),
                        "reduce-scatter": (share, big)}[name]
                dist.barrier()
                seconds = _timed(lambda args=args, op=op: op(*args), device)
                points.append({"bytes": count * 4, "seconds": seconds,
                               "bus_bytes_per_s": count * 4 * bus_factor(name, world) / seconds})
            result[name] = {"bus_bytes_per_s": points[-1]["bus_bytes_per_s"], "points": points}
        if rank == 0:
            Path(out_path).write_text(json.dumps(result), encoding="utf-8")
        dist.barrier()
    finally:
        dist.destroy_process_group()


def collectives(device: str, world: int) -> dict:
    """Bus bandwidth of each collective over `world` processes of this host, one per GPU."""
    import torch.multiprocessing as mp

    from ..errors import RunError

    with tempfile.TemporaryDirectory(prefix="dtgen-device-probe-") as tmp:
        out = os.path.join(tmp, "collectives.json")
        try:
            mp.start_processes(_collective_rank, args=(world, device, os.path.join(tmp, "store"), out),
                               nprocs=world, join=True, start_method="spawn")
        except mp.ProcessException as exc:  # one line naming the rank, not the child's traceback
            last = (str(exc).strip().splitlines() or ["no message"])[-1]
            raise RunError(f"dtgen calibrate --device-probe: the collectives' rank {exc.error_index} failed: "
                           f"{last}") from None
        measured = json.loads(Path(out).read_text(encoding="utf-8"))
    return {"ranks": world, "backend": "nccl" if device == "cuda" else "gloo", **measured}


def probe(out_path, ranks: int | None = None, echo=None) -> Path:
    """Measure this machine's accelerator and write the device probe to `out_path`."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    say = echo or (lambda line: None)
    if device == "cuda":
        gpus = torch.cuda.device_count()
        record = {"kind": "cuda", "name": torch.cuda.get_device_name(0), "count": gpus}
        world = gpus if ranks is None else min(ranks, gpus)
    else:
        record = cpu_device()
        world = ranks or 2
    say(f"dtgen calibrate --device-probe: matmul and memory on {record['name']}")
    threads = torch.get_num_threads()
    if device == "cpu":
        torch.set_num_threads(1)  # one core, as each of dtgen's CPU ranks computes
    try:
        rates = {"matmul": matmul(device), "memory": memory(device)}
    finally:
        torch.set_num_threads(threads)
    data = {"dtgen_device_probe": PROBE_FORMAT, "device": record, **rates, "collectives": None,
            "made": {"torch": torch.__version__, "python": platform.python_version(),
                     "host": platform.node(), "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                     "command": "dtgen calibrate --device-probe" + (f" --ranks {ranks}" if ranks else "")}}
    if world >= 2:
        say(f"dtgen calibrate --device-probe: collectives over {world} {'GPUs' if device == 'cuda' else 'processes'}")
        data["collectives"] = collectives(device, world)
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    part = out_path.with_name(out_path.name + ".part")
    part.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(part, out_path)
    return out_path
