"""Before spawning: will this machine hold the run? Ranks against CPU cores, and an
estimate of the ranks' memory against what is available.

A run of 64 ranks on 2 cores works, but its ranks take turns on the cores (step times
then measure contention, not the strategy) and, at about a quarter of a GB per rank
for the interpreter and torch alone, it needs about 16 GB. Both are said before the
first process starts; neither refuses the run (oversubscribing on purpose is a valid
experiment). Pure arithmetic apart from reading the machine's cores and memory.
"""

from __future__ import annotations

import os

# Resident memory of one rank before its model and data: Python, torch (CPU build)
# and a gloo process group, measured with torch 2.13.0 on Linux: 255 MB.
BASE_RANK_BYTES = 255e6
# Per parameter: the value, its gradient, the optimizer's momentum, one communication buffer.
COPIES_PER_PARAM = 4


def cpu_cores() -> int:
    """Cores this process may run on (its affinity mask, which containers narrow)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def available_memory() -> float | None:
    """Bytes the kernel says new processes can use without swapping (MemAvailable); None if unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return float(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def rank_bytes(params: int, param_bytes: int, data_bytes: int) -> float:
    """Estimated resident memory of one rank: the base process, every rank's own copy of
    the dataset, and the model's parameters, gradients, momentum and buffers."""
    return BASE_RANK_BYTES + data_bytes + COPIES_PER_PARAM * params * param_bytes


def capacity_warnings(ranks: int, per_rank: float, cores: int, available: float | None) -> list[str]:
    """One line per concern: more ranks than cores, or more estimated memory than available."""
    from ..workload import human_bytes

    total = per_rank * ranks
    memory = (f"about {human_bytes(per_rank)} per rank x {ranks} = {human_bytes(total)}"
              + (f" of {human_bytes(available)} available" if available else ""))
    out = []
    if ranks > cores:
        out.append(f"{ranks} ranks on {cores} CPU core(s): the ranks take turns on the cores, so step times "
                   f"measure contention more than the strategy ({memory}); for many workers, "
                   "dtgen predict simulates them")
    if available and total > 0.8 * available:
        out.append(f"the ranks may not fit in memory: {memory}; use fewer workers or a smaller model or dataset")
    return out


def check_capacity(ranks: int, model_info: dict) -> list[str]:
    """Warnings for `ranks` local ranks of the model and data the preflight built."""
    params = int(model_info.get("params", 0))
    param_bytes = int(model_info.get("grad_bytes", 0)) // max(1, params)
    per_rank = rank_bytes(params, param_bytes, int(model_info.get("data_bytes", 0)))
    return capacity_warnings(ranks, per_rank, cpu_cores(), available_memory())
