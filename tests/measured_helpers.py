"""Shared checks for the measured-figure tests: an independent trace oracle and a TeX box parser.

The oracle reads trace.json / rank*.jsonl with plain json (not opentikz_dt.measured.trace),
so the truth tests compare the figure against the file, not against the loader.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from opentikz_dt.figures.names import BOX_KINDS

_BOX = re.compile(r"^\s*\\path\[tl-([a-z]+)(?:-[bc])?\] \((-?[\d.]+),(-?[\d.]+)\) rectangle \((-?[\d.]+),(-?[\d.]+)\);", re.MULTILINE)  # -b, -c: later all-reduce phases
_LANE = re.compile(r"\\node\[slbl, anchor=east\] \(([A-Za-z0-9-]+)-label\) at \(-0\.15,(-?[\d.]+)\)")


def oracle_spans(run_dir: Path) -> list:
    """(rank, tid, name, start_us, end_us, args) of every X event, read with plain json."""
    merged = run_dir / "trace.json"
    if merged.is_file():
        events = json.loads(merged.read_text())["traceEvents"]
    else:
        events = []
        for path in sorted((run_dir / "trace").glob("rank*.jsonl")):
            for line in path.read_text().splitlines():
                try:
                    events.append(json.loads(line))
                except ValueError:
                    pass
    return [(e["pid"], e["tid"], e["name"], e["ts"], e["ts"] + e["dur"], e["args"]) for e in events if e.get("ph") == "X"]


def expected_lane_boxes(run_dir: Path, rank: int, t0_us: float, t1_us: float, pipeline: bool) -> list:
    """(kind, start_ms, end_ms) the lane of `rank` must show: its spans in the window, clipped
    (a push cut where the server received it), not counting the idle time filled in as wait.

    Pipeline stages leave their send/recv out when those overlap compute (an async comm
    thread); blocking ones that never overlap are drawn on the stage's lane."""
    spans = oracle_spans(run_dir)
    # A push ends where the (last) server received it; the sender's time after that is a wait.
    received: dict = {}
    for _, _, name, _, _, args in spans:
        for worker, at in (args.get("received_us") or {}).items() if name == "update" else ():
            key = (worker, args["step"], args.get("ticket"))
            received[key] = max(received.get(key, at), at)
    split = []
    for r, tid, name, start, end, args in spans:
        at = received.get((args["id"], args["step"], args.get("ticket"))) if name == "push" else None
        if at is not None and end > at:
            split += [(r, tid, name, start, max(start, at), args), (r, tid, "wait", max(start, at), end, args)]
        else:
            split.append((r, tid, name, start, end, args))
    # an fp16 step the scaler skipped is drawn as its own kind (the runner marks the span)
    split = [(r, tid, "skipped" if name in ("optimizer", "update") and args.get("skipped") else name, start, end, args)
             for r, tid, name, start, end, args in split]
    mine = [(tid, name, start, end) for r, tid, name, start, end, _ in split
            if r == rank and name in BOX_KINDS and end >= t0_us and start <= t1_us]
    if pipeline:
        compute = [(a, b) for tid, _, a, b in mine if tid == 0]
        comm = [(a, b) for tid, _, a, b in mine if tid == 1]
        if any(a < d - 1 and b > c + 1 for a, b in compute for c, d in comm):
            mine = [m for m in mine if m[0] == 0]
    out = [(name, max(start, t0_us) / 1000, min(end, t1_us) / 1000) for _, name, start, end in mine]
    return sorted(out, key=lambda b: (b[1], b[2]))


def parse_timeline_tex(tex: str, panel: str = "measured") -> dict:
    """lane id -> [(kind, x0, x1)] of the boxes drawn in a timeline TeX file (by lane y).

    Lane label nodes are named from the panel and the lane id (w1-measured-label)."""
    lanes = {}
    for m in _LANE.finditer(tex):
        name = m.group(1)
        lane = name.removeprefix(f"{panel}-") if name.startswith(f"{panel}-") else name.removesuffix(f"-{panel}")
        lanes[lane] = float(m.group(2))
    out: dict = {lane: [] for lane in lanes}
    for m in _BOX.finditer(tex):
        kind, x0, y0, x1, y1 = m.group(1), *map(float, m.group(2, 3, 4, 5))
        yc = (y0 + y1) / 2
        lane = min(lanes, key=lambda name: abs(lanes[name] - yc))
        assert abs(lanes[lane] - yc) < 0.05, f"box at y={yc} is on no lane"
        out[lane].append((kind, x0, x1))
    return out


def covers(drawn: list, expected: list, tol_start: float, tol_end: float) -> list:
    """Problems, empty when the drawn boxes are the expected spans (same kind, start, end) or
    merged runs of them: every drawn box starts at an expected start and ends at an expected
    end of its kind, and every expected span lies inside a drawn box of its kind."""
    problems = []
    for kind, a, b in drawn:
        same = [e for e in expected if e[0] == kind]
        if not any(abs(e[1] - a) <= tol_start for e in same):
            problems.append(f"{kind} box starts at {a}, where no {kind} span starts")
        if not any(abs(e[2] - b) <= tol_end for e in same):
            problems.append(f"{kind} box ends at {b}, where no {kind} span ends")
    for kind, a, b in expected:
        if not any(k == kind and x0 - tol_start <= a and b <= x1 + tol_end for k, x0, x1 in drawn):
            problems.append(f"{kind} span [{a}, {b}] is not drawn")
    return problems
