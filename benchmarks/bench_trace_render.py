"""Measured timeline: render time against trace size, and the compile time of the result.

    python benchmarks/bench_trace_render.py            # 10k, 100k, 1M events
    python benchmarks/bench_trace_render.py --sizes 10000,100000

For each size it writes a synthetic sync parameter-server run (4 workers + 1 server,
opentikz_dt.predict.synthetic) whose trace.json holds about that many events, then times
`render` = load trace.json + choose the default window + build the Timeline + template
to TeX (what `dtgen figure RUN_DIR --kind timeline` does before compiling), a
whole-run render (every step in one window, aggregated to the box budget) and the
pdflatex compile of both. Prints a table with the ratio of each render time to the
smallest size's (linear growth: the ratio follows the size ratio). Targets (issue 5):
1M events render in < 5 s; its TeX compiles in < 10 s.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import time
from pathlib import Path

from opentikz_dt.figures.compile import compile_pdf
from opentikz_dt.figures.render import render_timeline
from opentikz_dt.measured.run import load_run
from opentikz_dt.predict.synthetic import write_synthetic_run
from opentikz_dt.measured.timeline import measured_timeline
from opentikz_dt.measured.trace import load_trace

EVENTS_PER_STEP = 30  # 4 workers x (fetch, forward, backward, push, flow, wait) + server (wait, update, 4 flows)


def render_once(run_dir: Path, steps=None) -> tuple:
    """Seconds to go from trace.json to TeX, the TeX, and the number of boxes."""
    gc.collect()
    t0 = time.perf_counter()
    run = load_run(run_dir)
    run._trace = load_trace(run_dir)
    measured = measured_timeline(run.spec, run.trace, steps)
    tex = render_timeline(run.spec, measured.timeline)
    seconds = time.perf_counter() - t0
    boxes = sum(len(lane.boxes) for lane in measured.timeline.panels[0].lanes)
    return seconds, tex, boxes, len(run.trace.events)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000", help="trace sizes in events, comma-separated")
    parser.add_argument("--repeat", type=int, default=3, help="best of N renders")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = []
    with tempfile.TemporaryDirectory(prefix="dtgen-bench-") as tmp:
        for size in sizes:
            steps = max(4, size // EVENTS_PER_STEP)
            run_dir = write_synthetic_run(Path(tmp) / f"n{size}", "ps-sync", workers=4, steps=steps)
            events = len(json.loads((run_dir / "trace.json").read_text())["traceEvents"])
            window = min(render_once(run_dir)[0] for _ in range(args.repeat))
            _, tex, boxes, _ = render_once(run_dir)
            whole = min(render_once(run_dir, (0, steps - 1))[0] for _ in range(args.repeat))
            _, whole_tex, whole_boxes, _ = render_once(run_dir, (0, steps - 1))
            t0 = time.perf_counter()
            compile_pdf(tex)
            compile_window = time.perf_counter() - t0
            t0 = time.perf_counter()
            compile_pdf(whole_tex, timeout=120)
            compile_whole = time.perf_counter() - t0
            rows.append((size, events, steps, window, boxes, compile_window, whole, whole_boxes, compile_whole))
            print(f"  done {size:,} events", file=sys.stderr, flush=True)
    base = rows[0]
    print(f"{'target':>9} {'events':>9} {'steps':>6} | {'render':>8} {'ratio':>6} {'boxes':>5} {'compile':>8} | "
          f"{'all steps':>9} {'ratio':>6} {'boxes':>5} {'compile':>8} | {'size ratio':>10}")
    for size, events, steps, window, boxes, cw, whole, wboxes, cwhole in rows:
        print(f"{size:>9,} {events:>9,} {steps:>6,} | {window:>7.2f}s {window / base[3]:>6.1f} {boxes:>5} {cw:>7.2f}s | "
              f"{whole:>8.2f}s {whole / base[6]:>6.1f} {wboxes:>5} {cwhole:>7.2f}s | {events / base[1]:>10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
