"""Render and compile times of the figures for 3, 64 and 1,024 workers (a table, not a test).

    python benchmarks/bench_figures.py [--repeat 3]

The 1,024-worker figure should compile within 1.5x the time of the 3-worker one:
elision keeps the number of drawn objects bounded.
"""

from __future__ import annotations

import argparse
import time

from opentikz_dt.figures.bbox import parse_bboxes
from opentikz_dt.figures.compile import compile_pdf
from opentikz_dt.figures.render import render_timeline, render_topology
from opentikz_dt.spec import spec_from_data

STRATEGIES = {
    "parameter-server": {"strategy": {"kind": "parameter-server"}},
    "allreduce-ring": {"strategy": {"kind": "allreduce", "algorithm": "ring"}},
    "allreduce-hier": {"strategy": {"kind": "allreduce", "algorithm": "hierarchical"}, "topology": {"hosts": 2}},
    "gossip": {"strategy": {"kind": "gossip"}},
}
WORKERS = (3, 64, 1024)


def _spec(data: dict, workers: int):
    data = {**data, "topology": {**data.get("topology", {}), "workers": {"count": workers}},
            "training": {"dataset": {"samples": 1_000_000}}}
    if workers == 3 and data["topology"].get("hosts"):
        data["topology"] = {"workers": {"count": 4}, "hosts": 2}
    return spec_from_data(data)


def _render(render, spec, repeat):
    best, tex = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        tex = render(spec)
        best = min(best, time.perf_counter() - start)
    return best, tex


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"{'strategy':<18} {'figure':<9} {'workers':>7} {'render ms':>10} {'compile s':>10} {'tex KiB':>8} "
          f"{'probed':>7} {'x vs 3':>7}")
    for name, data in STRATEGIES.items():
        for kind, render in (("topology", render_topology), ("timeline", render_timeline)):
            rows = {}
            for workers in WORKERS:
                render_s, tex = _render(render, _spec(data, workers), args.repeat)
                rows[workers] = [render_s, tex, float("inf"), 0]
            # Compile the sizes in turn, repeat times, and keep each one's best: the machine is
            # shared, so interleaving spreads any background load over all sizes alike.
            for _ in range(args.repeat):
                for workers in WORKERS:
                    start = time.perf_counter()
                    result = compile_pdf(rows[workers][1])
                    rows[workers][2] = min(rows[workers][2], time.perf_counter() - start)
                    rows[workers][3] = len(parse_bboxes(result.log))
            base = rows[WORKERS[0]][2]
            for workers, (render_s, tex, compile_s, probed) in rows.items():
                print(f"{name:<18} {kind:<9} {workers:>7} {render_s * 1000:>10.1f} {compile_s:>10.3f} "
                      f"{len(tex) / 1024:>8.1f} {probed:>7} {compile_s / base:>7.2f}")


if __name__ == "__main__":
    main()
