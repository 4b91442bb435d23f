"""How ranks start on the CPU: spawned, or forked from a server that imported torch once.

Times `launch_run` (what `dtgen run` does after reading the spec) of a short ring
all-reduce, `--steps` steps, at each rank count, three ways, interleaved, `--repeat` times:
- spawn: every rank a fresh interpreter that imports torch, and torch._dynamo at its first
  optimizer step (dtgen's ranks before runner/forkserver.py; still the way on GPUs);
- server per run: the run starts a fork server, which imports them once, and stops it at
  its end (what `dtgen run` on the CPU does now);
- kept server: one server for all the runs (`forkserver.kept()`, as the test suite does).
Prints a Markdown table: the median seconds of each (min-max) and the ratio to spawn.

    OMP_NUM_THREADS=1 python benchmarks/bench_rank_start.py [--ranks 2 4 8] [--steps 6] [--repeat 3]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path


def spec_data(ranks: int, steps: int) -> dict:
    from opentikz_dt.runner.testing import small_spec_data

    return small_spec_data("allreduce", name=f"start-{ranks}", topology={"workers": {"count": ranks}},
                           strategy={"algorithm": "ring"}, training={"steps": steps})


def timed_launch(data: dict, root: Path) -> float:
    from opentikz_dt.runner.testing import run_small

    t0 = time.perf_counter()
    run_small(data, root, cache=False)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    from opentikz_dt.runner import forkserver

    chosen = forkserver.start_method  # the launcher asks it how to start the ranks
    ways = {"spawn": lambda device: "spawn", "server per run": chosen}
    root = Path(tempfile.mkdtemp(prefix="dtgen-bench-start-"))
    seconds = {(n, way): [] for n in args.ranks for way in (*ways, "kept server")}
    try:
        for _ in range(args.repeat):
            for n in args.ranks:
                data = spec_data(n, args.steps)
                for way, method in ways.items():
                    forkserver.start_method = method
                    seconds[(n, way)].append(timed_launch(data, root))
                forkserver.start_method = chosen
                with forkserver.kept():
                    timed_launch(data, root)  # the server's imports, paid once
                    seconds[(n, "kept server")].append(timed_launch(data, root))
    finally:
        forkserver.start_method = chosen
        shutil.rmtree(root, ignore_errors=True)

    print(f"| ranks | way | seconds, median (min-max) of {args.repeat} | vs spawn |")
    print("|---:|---|---|---:|")
    for n in args.ranks:
        spawn = statistics.median(seconds[(n, "spawn")])
        for way in (*ways, "kept server"):
            runs = seconds[(n, way)]
            mid = statistics.median(runs)
            print(f"| {n} | {way} | {mid:.2f} ({min(runs):.2f}-{max(runs):.2f}) | {mid / spawn:.2f}x |")


if __name__ == "__main__":
    main()
