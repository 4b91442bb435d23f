"""Reading and drawing a big profiler trace set: 128 ranks, about 100 MB of Kineto JSON.

    python benchmarks/bench_profile_read.py [--steps 4] [--ops 110] [--keep DIR]

Writes a synthetic trace set in the shape torch.profiler writes on GPUs with NCCL (a
header with distributedInfo and a DeviceMesh's pg_config, then per step ProfilerStep#N,
nested aten ops, autograd functions, an optimizer step, record_param_comms with NCCL's
metadata, the CUDA launches and the kernels they start on a compute stream and an NCCL
stream), one file per rank, then times in a fresh process:
  read     load_profile_set (every file parsed and reduced to what the figures need)
  figures  the three figures' .tex (timeline, topology, communication table)
and reports each one's peak resident memory (ru_maxrss of that process, Python and
dtgen's imports included) beside the largest single file and the whole set.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

MESH = (("pipeline", 2), ("data", 8), ("tensor", 8))


def mesh_groups(mesh: tuple = MESH) -> list:
    """A row-major mesh's groups per dimension, as DeviceMesh names them (pg_desc mesh_<dim>)."""
    shape = [n for _, n in mesh]
    world = shape[0] * shape[1] * shape[2]
    out = [{"pg_name": "0", "pg_desc": "default_pg", "pg_size": world, "ranks": list(range(world))}]
    strides = [shape[1] * shape[2], shape[2], 1]
    for k, (name, size) in enumerate(mesh):
        seen = set()
        for rank in range(world):
            base = rank - ((rank // strides[k]) % size) * strides[k]
            if base in seen:
                continue
            seen.add(base)
            out.append({"pg_name": str(len(out)), "pg_desc": f"mesh_{name}", "pg_size": size,
                        "ranks": [base + i * strides[k] for i in range(size)]})
    return out


def _member(groups: list, rank: int, dim: str) -> list:
    return next(g["ranks"] for g in groups if g["pg_desc"] == f"mesh_{dim}" and rank in g["ranks"])


def write_rank(folder: Path, rank: int, world: int, steps: int, ops: int, groups: list) -> int:
    rng = random.Random(rank)
    events = []
    corr = [0]
    t = 1_000_000.0 + rng.uniform(0, 50)

    def x(name, cat, tid, ts, dur, args=None):
        events.append({"ph": "X", "cat": cat, "name": name, "pid": 100 + rank, "tid": tid, "ts": round(ts, 3),
                       "dur": round(dur, 3), "args": args or {}})

    def launch(ts, kernel, stream, dur, args=None):
        corr[0] += 1
        x("cudaLaunchKernel", "cuda_runtime", 1, ts, 3.0, {"correlation": corr[0]})
        x(kernel, "kernel", stream, ts + 5, dur, {"stream": stream, "device": rank % 8, "correlation": corr[0],
                                                  **(args or {})})

    tp, dp = _member(groups, rank, "tensor"), _member(groups, rank, "data")
    for step in range(steps):
        start = t
        for phase, count in (("forward", ops), ("backward", ops), ("optimizer", ops // 10)):
            for i in range(count):
                dur = rng.uniform(20, 60)
                name = {"forward": "aten::linear", "backward": "autograd::engine::evaluate_function: AddmmBackward0",
                        "optimizer": "Optimizer.step#AdamW.step"}[phase] if phase != "forward" or i % 5 else "aten::mm"
                x(name, "cpu_op", 1, t, dur, {"External id": len(events), "Sequence number": i})
                x("aten::addmm", "cpu_op", 1, t + 2, dur - 4)
                launch(t + 3, "sm90_xmma_gemm_bf16bf16_bf16f32", 7, dur * 0.8)
                if i % 20 == 0 and phase != "optimizer":
                    if phase == "forward":  # tensor parallel's all-reduce, data parallel's reduce-scatter
                        group, coll, nelems = tp, "allreduce", 1 << 20
                    else:
                        group, coll, nelems = dp, "reduce_scatter_tensor_coalesced", 1 << 22
                    meta = {"Collective name": coll, "dtype": "BFloat16", "In msg nelems": nelems,
                            "Out msg nelems": nelems // (len(group) if coll.startswith("reduce_scatter") else 1),
                            "Group size": len(group), "Process Group Ranks": json.dumps(group),
                            "Process Group Name": "x", "Process Group Description": "mesh"}
                    x("record_param_comms", "cpu_op", 1, t + dur - 3, 2.0, meta)
                    kernel = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL" if coll == "allreduce" else \
                        "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL"
                    launch(t + dur - 2, kernel, 20, rng.uniform(200, 400), meta)
                t += dur + rng.uniform(1, 5)
        x(f"ProfilerStep#{step}", "user_annotation", 1, start - 1, t - start + 2)
        t += 30
    doc = {"schemaVersion": 1, "deviceProperties": [], "trace_id": f"{rank:032X}",
           "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world, "pg_count": len(groups),
                               "pg_config": groups, "nccl_version": "2.21.5"},
           "host_name": f"node{rank // 8}", "displayTimeUnit": "ms", "baseTimeNanoseconds": 1_700_000_000_000_000_000,
           "traceEvents": events}
    path = folder / f"rank{rank}.pt.trace.json"
    path.write_text(json.dumps(doc, indent=1))  # Kineto writes an event per few lines
    return path.stat().st_size


def _measure(code: str) -> tuple:
    """(wall seconds, peak RSS MiB, CPU seconds) of `code` in a fresh interpreter (CPU time too:
    on a shared machine the wall time includes waiting for a core)."""
    child = f"""
import resource, time, sys
t0 = time.perf_counter()
{code}
r = resource.getrusage(resource.RUSAGE_SELF)
cpu = r.ru_utime + r.ru_stime
sys.stdout.write(f"\\nRESULT {{time.perf_counter() - t0:.3f}} {{r.ru_maxrss / 1024:.1f}} {{cpu:.3f}}\\n")
"""
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=True).stdout
    line = [ln for ln in out.splitlines() if ln.startswith("RESULT ")][-1].split()
    return float(line[1]), float(line[2]), float(line[3])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--ops", type=int, default=110, help="forward ops per step (backward as many)")
    parser.add_argument("--keep", type=Path, default=None, help="write the traces here and keep them")
    args = parser.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="profile-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    try:
        groups = mesh_groups()
        world = groups[0]["pg_size"]
        sizes = [write_rank(folder, r, world, args.steps, args.ops, groups) for r in range(world)]
        out = folder / "figures"
        base_s, base_mb, base_cpu = _measure("import opentikz_dt.measured.profile_figures")
        read_s, read_mb, read_cpu = _measure(
            "from opentikz_dt.measured.profile_figures import load_profile_set\n"
            f"s = load_profile_set([{str(folder)!r}])\nprint(len(s.ranks), sum(len(p.collectives) for p in s.ranks))")
        fig_s, fig_mb, fig_cpu = _measure(
            "from opentikz_dt.measured.profile_figures import figure_profile_command\n"
            f"figure_profile_command([{str(folder)!r}], {str(out)!r}, 'all', ('tex',), False)")
        print(f"trace set: {world} ranks, {sum(sizes) / 1e6:.1f} MB, largest file {max(sizes) / 1e6:.2f} MB")
        print(f"| {'stage':<22}| {'wall s':>8} | {'CPU s':>8} | {'peak RSS MiB':>13} |")
        print(f"|{'-' * 23}|{'-' * 10}|{'-' * 10}|{'-' * 15}|")
        for name, wall, cpu, rss in (("import only", base_s, base_cpu, base_mb), ("read", read_s, read_cpu, read_mb),
                                     ("read + 3 figures .tex", fig_s, fig_cpu, fig_mb)):
            print(f"| {name:<22}| {wall:>8.2f} | {cpu:>8.2f} | {rss:>13.1f} |")
    finally:
        if args.keep is None:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
