"""Ranks on the CPU start as forks of one process that has imported torch once.

Why: multiprocessing's `spawn` starts every rank as a fresh interpreter, which imports
torch (about 1.8 CPU-seconds here) and, at its first optimizer step, torch._dynamo (torch.optim
imports it: about 1.8 s more). Where the ranks outnumber the cores that was most of a short
run: 8 ranks of a 6-step ring on 2 cores took 15 s, nearly all of it imports. Python's
`forkserver` start method, which torch's elastic launcher accepts, starts one fresh
single-threaded server that imports them once (runner/rank_imports.py) and forks each rank
from it: the same run took under 2 s once the server was up
(benchmarks/results/rank-start_cpu2core_2026-11.md).

Ranks on GPUs are still spawned: there every rank has cores of its own, so the imports run
side by side, and the spawn path is the one checked on a GPU box.

The server belongs to whoever started it. A launch that starts one stops and reaps it
before `dtgen run` returns (runner/leftovers.py), so nothing outlives the run. A launcher
killed with SIGKILL cannot: its ranks and the server die with it, but multiprocessing's
folder for the server's socket stays (`pymp-*`, in TMPDIR, or in /tmp where TMPDIR is too
deep for a socket's path). A server that was already running (`kept()`: the test
suite's, `dtgen calibrate`'s, or a caller's that launches many runs) is reused and left
running. Its environment is then older than the launch's, so each rank takes the
launcher's environment (`adopt_launch_environment`), keeping what the elastic launcher set
for it.

Uses multiprocessing.forkserver's server record (`_forkserver`), which has kept these
attributes since Python 3.8, to see whether a server runs and to stop one that a rank
still holds open.
"""

from __future__ import annotations

import contextlib
import multiprocessing.process
import multiprocessing.util
import os
import signal
import sys
import tempfile
import time
from multiprocessing import forkserver
from pathlib import Path

from .environ import environment

PRELOAD = "opentikz_dt.runner.rank_imports"
GRACE_S = 5.0  # the server gets this long to exit on its own before SIGKILL
AF_UNIX_PATH_MAX = 107  # bytes of a socket's path on Linux
_STARTED: set = set()  # pids of the servers started here, which preload PRELOAD


def start_method(device: str) -> str:
    """"forkserver" on the CPU, unless this process already runs a server that somebody else
    started: its ranks would lack torch and the environment record (PRELOAD), so spawn."""
    if device != "cpu" or (running() and forkserver._forkserver._forkserver_pid not in _STARTED):
        return "spawn"
    return "forkserver"


def running() -> bool:
    pid = forkserver._forkserver._forkserver_pid
    if pid is None:
        return False
    try:
        return os.waitpid(pid, os.WNOHANG) == (0, 0)
    except ChildProcessError:  # not ours to wait for: another process started it
        return False


def ensure_running(socket_base: str | None = None, tmpdir: str | None = None, output: Path | None = None) -> None:
    """Start the server (if none runs) with one thread per math library: the ranks are forks of
    it, and a fork copies no thread but the caller's, so the server must have no others.
    `socket_base`: where multiprocessing's folder for the server's socket goes (default TMPDIR);
    `tmpdir`: the server's TMPDIR, where torch makes its cache folder on import (default TMPDIR);
    `output`: a file for the server's stdout and stderr, which its ranks write to until they
    open their own logs (default: this process's)."""
    forkserver.set_forkserver_preload([PRELOAD])
    _make_socket_folder(socket_base or tempfile.gettempdir())
    # the ranks run one thread each anyway (worker.rank_main)
    values = {"OMP_NUM_THREADS": "1", **({"TMPDIR": tmpdir} if tmpdir else {})}
    with environment(**values), _ctrl_c_ignored_by_children(), _output_to(output):
        started = not running()
        forkserver.ensure_running()
        if started:
            _STARTED.add(forkserver._forkserver._forkserver_pid)


@contextlib.contextmanager
def _ctrl_c_ignored_by_children():
    """Start the server with SIGINT ignored, a disposition that survives its exec: Ctrl-C
    goes to the whole foreground process group, and a server still importing torch (the
    first seconds of a run) would die of it with a 40-line traceback on the terminal, as
    would a rank still unpickling its start-up state. Python keeps an inherited SIG_IGN
    rather than installing its KeyboardInterrupt handler; the server ignores SIGINT anyway
    once it serves, and each rank takes Python's handler back (worker.rank_main), once its
    output goes to its log. The launcher itself ignores SIGINT only while it forks the
    server, a few milliseconds."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def _output_to(path: Path | None):
    """Point this process's stdout and stderr at `path` while the server is forked, so the
    server inherits them: a rank that fails before its own log opens (after a Ctrl-C, the
    launcher has removed the semaphore a rank still starting was to open) writes its
    traceback there, not over the launcher's one line on the terminal."""
    if path is None:
        yield
        return
    sys.stdout.flush(), sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with open(path, "ab") as target:
        os.dup2(target.fileno(), 1), os.dup2(target.fileno(), 2)
    try:
        yield
    finally:
        for fd, copy in ((1, saved[0]), (2, saved[1])):
            os.dup2(copy, fd)
            os.close(copy)


def _make_socket_folder(base: str) -> None:
    """The server listens on a socket in multiprocessing's own temporary folder, which it makes
    in TMPDIR on first use and removes when this process exits. It goes in `base`, or in /tmp
    where that is too deep: Linux refuses a socket path over 107 bytes, which a deep TMPDIR (a
    test's, a batch job's) passes."""
    if multiprocessing.process.current_process()._config.get("tempdir"):
        return  # made already
    if len(os.path.join(base, "pymp-12345678", "listener-12345678")) > AF_UNIX_PATH_MAX:
        base = "/tmp"
    saved, tempfile.tempdir = tempfile.tempdir, base
    try:
        multiprocessing.util.get_temp_dir()
    finally:
        tempfile.tempdir = saved


def stop(grace_s: float = GRACE_S) -> None:
    """Stop and reap the server: closing our end of its "alive" pipe lets it exit once no rank
    holds the pipe either; one still held after `grace_s` is killed. Its ranks are gone by
    now (leftovers.launch_helpers_reaped stops them first), so it is also sent SIGTERM: left
    to exit on its own it spends most of a second tearing down the torch it imported, on
    every `dtgen run`, and it has nothing to save (Python keeps SIGTERM's default: it ends)."""
    server = forkserver._forkserver
    with server._lock:
        pid = server._forkserver_pid
        if pid is None:
            return
        os.close(server._forkserver_alive_fd)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while os.waitpid(pid, os.WNOHANG) == (0, 0):
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                break
            time.sleep(0.02)
        address = server._forkserver_address
        if isinstance(address, str) and not address.startswith("\0"):
            with contextlib.suppress(OSError):
                os.unlink(address)
        server._forkserver_pid = server._forkserver_alive_fd = server._forkserver_address = None
        _STARTED.discard(pid)


@contextlib.contextmanager
def kept(socket_base: str | None = None, tmpdir: str | None = None):
    """A server for everything launched inside (the ranks of many runs share its imports),
    stopped on leaving if it was started here."""
    started = not running()
    ensure_running(socket_base, tmpdir)
    try:
        yield
    finally:
        if started:
            stop()


# --- in a rank -------------------------------------------------------------------------------

def forked_from_server() -> bool:
    return forkserver._forkserver.get_inherited_fds() is not None


def adopt_launch_environment(launch_env: dict | None) -> None:
    """Take the launcher's environment at this launch instead of the server's, older one;
    what differs from the server's is what the elastic launcher set for this rank, and stays."""
    if launch_env is None or not forked_from_server():
        return
    server_env = sys.modules[PRELOAD].SERVER_ENV  # imported by the server before it forked this rank
    for_this_rank = {k: v for k, v in os.environ.items() if server_env.get(k) != v}
    os.environ.clear()
    os.environ.update(launch_env)
    os.environ.update(for_this_rank)
    tempfile.tempdir = None  # the server chose its temporary directory from its own TMPDIR


def release_server() -> None:
    """Close this rank's copy of the server's "alive" pipe, so the server exits when the
    launcher dies (and this rank with it: worker.rank_main asked for SIGKILL then)."""
    server = forkserver._forkserver
    if forked_from_server() and server._forkserver_alive_fd is not None:
        with contextlib.suppress(OSError):
            os.close(server._forkserver_alive_fd)
        server._forkserver_alive_fd = None
