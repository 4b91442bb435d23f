"""Per-rank metrics (loss per step, samples, step times, bytes, staleness) and progress.

Each rank writes metrics/rank<r>.json at the end or on failure, and a small
progress/rank<r>.json at most every PROGRESS_S seconds that the parent tails for the
live progress line and for hang detection. The parent merges (see merge.py).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

PROGRESS_S = 0.5
# The whole metrics file, between steps, this often: a rank stopped inside a collective after
# Ctrl-C is killed before it can write, and its counts up to its last completed step stay.
WRITE_S = 2.0
RECENT_LOSSES = 8  # per-step losses a progress report carries (the parent averages a step all ranks did)


def write_json_atomic(path: Path, data) -> None:
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, separators=(",", ":")), encoding="utf-8")
    os.replace(tmp, path)


class Metrics:
    def __init__(self, run_dir: Path, rank: int, ident: str, role: str, clock):
        self.run_dir, self.rank, self.ident, self.role = Path(run_dir), rank, ident, role
        self.clock = clock  # () -> seconds on the run's clock
        self.loss: dict[int, float] = {}
        self.step_time: dict[int, float] = {}
        self.step_end: dict[int, float] = {}
        self.global_step: dict[int, int] = {}  # async PS: this worker's update -> the global step it served
        self.samples = 0
        self.sent = 0
        self.recv = 0
        self.staleness_values: list[float] = []
        self.skipped: list[int] = []  # fp16 steps whose gradients overflowed (no update)
        self.current_step = -1
        self.started_step = -1
        self.first_start: float | None = None
        self.first_samples = 0  # samples of the first (warm-up) step, left out of throughput
        self._last_progress = 0.0
        self._last_written = time.monotonic()
        self.on_step = None  # set by the worker: flush the tracer now and then
        self.memory: dict | None = None  # bytes per category on one step (runner/memory.py)

    # --- recording -------------------------------------------------------------------
    def step_done(self, step: int, loss: float | None, samples: int, seconds: float,
                  global_step: int | None = None) -> None:
        """`step` counts this rank's own steps; an async PS worker also names the global
        step its update belongs to (merge.py files its loss there)."""
        now = self.clock()
        if self.first_start is None:
            self.first_start = now - seconds
            self.first_samples = int(samples)
        if loss is not None:
            self.loss[step] = float(loss)
        self.step_time[step] = float(seconds)
        self.step_end[step] = now
        self.samples += int(samples)
        if global_step is not None:
            self.global_step[step] = int(global_step)
        self.current_step = max(self.current_step, step if global_step is None else global_step)
        if time.monotonic() - self._last_written >= WRITE_S:
            self.write()  # with the progress: what an interrupted rank (killed in a collective) leaves
        elif time.monotonic() - self._last_progress >= PROGRESS_S:
            self.write_progress()
        if self.on_step is not None:
            self.on_step()

    def staleness(self, value: float) -> None:
        self.staleness_values.append(float(value))

    def skipped_step(self, step: int) -> None:
        self.skipped.append(int(step))

    def add_bytes(self, sent: int = 0, recv: int = 0) -> None:
        self.sent += sent
        self.recv += recv

    # --- snapshots (checkpoints) and files ---------------------------------------------
    def snapshot(self) -> dict:
        return {"loss": dict(self.loss), "step_time": dict(self.step_time), "step_end": dict(self.step_end),
                "samples": self.samples, "sent": self.sent, "recv": self.recv,
                "staleness": list(self.staleness_values), "first_start": self.first_start,
                "skipped": list(self.skipped), "global_step": dict(self.global_step)}

    def restore(self, snap: dict) -> None:
        self.loss = {int(k): v for k, v in snap["loss"].items()}
        self.step_time = {int(k): v for k, v in snap["step_time"].items()}
        self.step_end = {int(k): v for k, v in snap["step_end"].items()}
        self.samples, self.sent, self.recv = snap["samples"], snap["sent"], snap["recv"]
        self.staleness_values = list(snap["staleness"])
        self.skipped = list(snap.get("skipped", []))
        self.first_start = snap["first_start"]
        self.global_step = {int(k): int(v) for k, v in snap.get("global_step", {}).items()}
        self.current_step = max(self.global_step.values() or self.step_end, default=-1)
        self.first_samples = self.samples // max(1, len(self.step_end))  # steps are equal-sized

    def write_progress(self) -> None:
        self._last_progress = time.monotonic()
        last = max(self.loss, default=None)
        recent = {s: self.loss[s] for s in sorted(self.loss)[-RECENT_LOSSES:]}
        ends = self.step_end
        write_json_atomic(self.run_dir / "progress" / f"rank{self.rank}.json", {
            "rank": self.rank, "id": self.ident, "role": self.role, "step": self.current_step, "started": self.started_step,
            "loss": self.loss[last] if last is not None else None, "losses": recent, "samples": self.samples,
            "first_samples": self.first_samples, "first_end": ends[min(ends)] if ends else None,
            "last_end": ends[max(ends)] if ends else None,
            "first_start": self.first_start, "now": self.clock(), "wall": time.time()})

    def write(self) -> None:
        data = self.snapshot()
        data.update(rank=self.rank, id=self.ident, role=self.role)
        if self.memory is not None:
            data["memory"] = self.memory
        write_json_atomic(self.run_dir / "metrics" / f"rank{self.rank}.json", data)
        self._last_written = time.monotonic()
        self.write_progress()
