"""The parent's view of a running job: the live progress line, the hang watchdog, and
the explanation of a failure (which rank, its role, its log).

Ranks write progress/rank<r>.json every half second while they make steps. If no rank
has reported for `runtime.timeout_s` + GRACE_S seconds (a hang that no peer can time
out on, e.g. a one-rank run), the watchdog kills the ranks' processes (their pids come
from ranks/rank<r>.json, written by the ranks themselves) so the launcher ends the run.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

STARTUP_LOG = "startup.log"  # the fork server's output: what a rank wrote before its own log opened
GRACE_S = 5.0
STARTUP_S = 120.0
COMPILE_S = 600.0  # training.compile: the first step also compiles the model (minutes for a large one)


def _read(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _fmt_time(seconds: float) -> str:
    seconds = int(max(0, seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class Monitor:
    def __init__(self, run_dir: Path, spec, roles, echo=None, interval: float = 0.5):
        self.run_dir, self.spec, self.roles, self.echo = Path(run_dir), spec, roles, echo
        self.interval = interval
        self.limit = spec.runtime.timeout_s + GRACE_S
        self.stalled: dict | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="dtgen-monitor", daemon=True)
        self._tty = sys.stderr.isatty()
        self._last_print = 0.0
        self._printed = False
        self.startup_s = STARTUP_S + (COMPILE_S if spec.training.compile else 0.0)
        self._deadline = time.time() + self.startup_s
        self._seen: dict[str, float] = {}  # rank start files already counted
        self._walls: dict[int, float] = {}  # last progress report seen per rank

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join(timeout=5)
            if self._tty and self._printed and self.echo:
                sys.stderr.write("\n")
                sys.stderr.flush()

    def progress(self) -> dict[int, dict]:
        out = {}
        for p in (self.run_dir / "progress").glob("rank*.json"):
            if p.name[4:-5].isdigit() and (d := _read(p)):
                out[int(p.name[4:-5])] = d
        return out

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                prog = self.progress()
                self._watch(prog)
                if self.echo:
                    self._show(prog)
            except Exception as exc:  # the monitor must never take the run down
                print(f"dtgen: monitor: {exc}", file=sys.stderr)

    def _watch(self, prog) -> None:
        """Stalled = no new progress report for `limit` seconds after the last one (or
        STARTUP_S after a rank (re)started and before it reported; COMPILE_S more when the
        first step compiles the model)."""
        now = time.time()
        for p in (self.run_dir / "ranks").glob("rank*.json"):
            key = f"start:{p.stat().st_mtime}:{p.name}"
            if key not in self._seen:
                self._seen[key] = now
                self._deadline = max(self._deadline, now + self.startup_s)
        fresh = [d["wall"] for r, d in prog.items() if d.get("wall") and self._walls.get(r) != d["wall"]]
        self._walls = {r: d.get("wall") for r, d in prog.items()}
        if fresh:
            self._deadline = max(fresh) + self.limit
        if now > self._deadline:
            self.stalled = {"seconds": round(now - self._deadline + self.limit, 1), "progress": prog}
            self._kill_ranks()
            self._deadline = now + self.startup_s

    def _kill_ranks(self) -> None:
        for p in (self.run_dir / "ranks").glob("rank*.json"):
            info = _read(p)
            if info and info.get("pid") and info.get("host") == os.uname().nodename:
                try:
                    os.kill(int(info["pid"]), signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass

    def _show(self, prog) -> None:
        line = progress_line(prog, self.roles, self.spec.training.steps)
        if line is None:
            return
        now = time.monotonic()
        if self._tty:
            sys.stderr.write("\r" + line.ljust(70))
            sys.stderr.flush()
            self._printed = True
        elif now - self._last_print >= 10:
            self.echo(line)
            self._last_print = now


def progress_line(prog: dict, roles, steps: int) -> str | None:
    """'step 12/60  loss 1.2345  9,876 samples/s  ETA 3s' from the ranks' progress reports,
    with the summary's definitions (runner/merge.py): the loss of the newest step every
    reporting rank has done, averaged over them; samples/s and the ETA after the warm-up
    step (connection setup and first allocations, often 100x a steady step on gloo), so
    neither says anything until a second step is done."""
    reporting = [d for r, d in prog.items() if roles[r][0] in ("worker", "stage") and d.get("step", -1) >= 0]
    if not reporting:
        return None
    done = min(d["step"] for d in reporting) + 1
    loss = _common_step_loss(reporting)
    stages = [d for d in reporting if roles[d["rank"]][0] == "stage"]
    steady = [d.get("samples", 0) - d.get("first_samples", 0) for d in (stages or reporting)]
    total = max(steady) if stages else sum(steady)
    firsts = [d["first_end"] for d in reporting if d.get("first_end") is not None]
    lasts = [d["last_end"] for d in reporting if d.get("last_end") is not None]
    span = max(lasts) - max(firsts) if firsts and lasts else 0.0
    steady_steps = max(d["step"] for d in reporting)  # steps after the first, by the furthest rank
    if span > 0 and total > 0 and steady_steps > 0:
        rate = f"{round(total / span, 2):,.0f}"  # rounded as the summary's samples_per_s, then shown
        eta = _fmt_time(span / steady_steps * (steps - done))
    else:
        rate = eta = "-"
    shown = f"{loss:.4f}" if loss is not None else "-"
    return f"step {done}/{steps}  loss {shown}  {rate} samples/s  ETA {eta}"


def _common_step_loss(reporting) -> float | None:
    """Mean loss of the newest step that every rank reporting losses has in its recent ones."""
    recent = [d.get("losses") or {} for d in reporting if d.get("losses")]
    if not recent:
        return None
    common = set.intersection(*(set(r) for r in recent))
    if not common:
        return None
    step = max(common, key=int)
    return sum(r[step] for r in recent) / len(recent)


_NATIVE_CRASHES = ("SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE", "SIGABRT")


def _native_crash(code: int) -> bool:
    """Killed by a signal that a crash in native code raises (not the launcher's stop)."""
    return code < 0 and any(-code == getattr(signal, name) for name in _NATIVE_CRASHES)


def _exit_detail(code: int) -> str:
    """A rank's exit code in words: a negative one is the signal that killed it; a crash in
    native code has each thread's Python stack in the rank's log (worker.py's faulthandler)."""
    if code >= 0:
        return f"exited with code {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        return f"was killed by signal {-code}"
    return f"was killed by {name}" + (" (a crash in native code; its log holds the Python stack)"
                                      if _native_crash(code) else "")


# What faulthandler (enabled in every rank, runner/worker.py) writes for each fatal signal
# before it raises the signal again, so that the rank dies of it.
_FAULTHANDLER_LINES = {"Segmentation fault": "SIGSEGV", "Bus error": "SIGBUS", "Illegal instruction": "SIGILL",
                       "Floating point exception": "SIGFPE", "Aborted": "SIGABRT"}


def _fatal_signals_in_logs(run_dir: Path, world: int) -> dict:
    """rank -> minus the signal, for each rank whose log ends in faulthandler's fatal error:
    a rank that crashed in native code writes no report of its own."""
    found = {}
    for rank in range(world):
        try:
            text = (run_dir / "logs" / f"rank{rank}.log").read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        at = text.rfind("Fatal Python error: ")
        if at >= 0:
            line = text[at + len("Fatal Python error: "):].splitlines()[0].strip()
            if line in _FAULTHANDLER_LINES:
                found[rank] = -getattr(signal, _FAULTHANDLER_LINES[line])
    return found


def describe_failure(run_dir: Path, roles, exit_codes: dict, monitor: Monitor | None) -> dict:
    """Which rank brought the run down, and a one-paragraph message naming it and its log."""
    run_dir = Path(run_dir)
    spec_timeout = monitor.spec.runtime.timeout_s if monitor else None
    reports = {}
    for p in (run_dir / "failure").glob("rank*.json"):
        if p.name[4:-5].isdigit() and (d := _read(p)):
            reports[int(p.name[4:-5])] = d
    prog = monitor.progress() if monitor else {}

    def started(rank):
        d = prog.get(rank) or {}
        return d.get("started", d.get("step", -1))

    # The launcher gives the exit code of the first rank it saw exit; a rank that failed on its
    # own recorded its own (runner/worker.py), so every rank that did is known
    exit_codes = {**_fatal_signals_in_logs(run_dir, len(roles)),
                  **{r: d["exit_code"] for r, d in reports.items() if isinstance(d.get("exit_code"), int)},
                  **exit_codes}
    own = sorted((d["wall"], r) for r, d in reports.items() if d["kind"] in ("crash", "error", "diverged", "oom"))
    if own:
        rank = own[0][1]
        d = reports[rank]
        what = {"crash": "crashed", "diverged": "diverged", "oom": "ran out of GPU memory"}.get(d["kind"], "failed")
        error = d["error"].split(": ", 1)[1] if d["kind"] == "diverged" else d["error"]  # no exception class name
        when = f"at step {d['step']}" if d["step"] >= 0 else "before its first step"  # -1: while it set up
        detail = f"{what} {when}: {error}"
    elif crashed := sorted(r for r, code in exit_codes.items() if r not in reports and _native_crash(code)):
        # before its peers' reports: theirs say only that the connection to it closed
        rank = crashed[0]
        detail = _exit_detail(exit_codes[rank])
    elif monitor is not None and monitor.stalled is not None:
        rank = min(range(len(roles)), key=lambda r: (started(r), r))
        detail = (f"hung: no rank made progress for {monitor.stalled['seconds']:.0f} s "
                  f"(runtime.timeout_s = {spec_timeout:g}); the run was stopped")
    elif reports:
        silent = [r for r in range(len(roles)) if r not in reports]
        pool = silent or list(reports)
        rank = min(pool, key=lambda r: (started(r), r))
        first = reports[min(reports)]["error"].splitlines()[0][:200]
        detail = (f"stopped responding at step {max(started(rank), 0)}: its peers gave up after "
                  f"runtime.timeout_s = {spec_timeout:g} s ({first})")
    elif exit_codes:
        rank = min(exit_codes)
        detail = _exit_detail(exit_codes[rank])
    else:
        rank, detail = 0, "failed"
    role, ident = roles[rank] if rank is not None and rank < len(roles) else (None, None)
    log = run_dir / "logs" / f"rank{rank}.log"
    startup = run_dir / "logs" / STARTUP_LOG  # a rank that failed before its own log opened wrote here
    if not log.is_file() and startup.is_file() and startup.stat().st_size:
        log = startup
    message = f"rank {rank} ({role} {ident}) {detail}\nlog: {log}"
    return {"rank": rank, "role": role, "id": ident, "exit_code": exit_codes.get(rank), "log": str(log),
            "message": message, "exit_codes": exit_codes}
