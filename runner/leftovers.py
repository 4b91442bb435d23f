"""Leave no process and no temporary file behind when `dtgen run` returns.

Processes: the elastic launcher starts the ranks with multiprocessing (from a fork
server on the CPU, runner/forkserver.py; spawned on GPUs), which first starts
multiprocessing's resource tracker, a helper that lives until its parent exits and only
then exits itself. Nobody is left to reap it, so after every run a `python3` zombie hung
on, adopted by PID 1. `launch_helpers_reaped` stops the ranks the launcher may have left,
then the fork server, then the tracker, and reaps each while dtgen is still their parent,
on success, failure and Ctrl-C alike. What was running before the launch (a caller's own
children, fork server or tracker) is left alone.

Files: torch.multiprocessing writes one `pytorch-errorfile-*.pickle` per failed rank and
the elastic agent may make `torchelastic_*` folders and torch a `torchinductor_<user>`
cache folder, all in the temporary directory.
`temp_dir_in` points the temporary directory at the run's `logs/tmp/` during the launch,
so they stay with the run they explain.

Imports no torch; the runner's launch step uses it.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import tempfile
import time
from multiprocessing import resource_tracker
from pathlib import Path

from . import forkserver
from .environ import environment

GRACE_S = 5.0  # a rank or the tracker gets this long to exit on its own before SIGKILL


@contextlib.contextmanager
def launch_helpers_reaped(grace_s: float = GRACE_S):
    """On leaving, stop and reap the processes started inside: stray ranks, then the tracker."""
    children_before = set(multiprocessing.active_children())
    tracker_before = _tracker_pid()
    server_before = forkserver.running()
    try:
        yield
    finally:
        _stop_ranks(children_before, grace_s)
        if not server_before:  # after the ranks: a rank still running holds the server open
            forkserver.stop(grace_s)
        if tracker_before is None:  # after the server, which holds the tracker open
            _stop_resource_tracker(grace_s)


def _tracker_pid() -> int | None:
    return getattr(getattr(resource_tracker, "_resource_tracker", None), "_pid", None)


def _stop_ranks(keep: set, grace_s: float) -> None:
    # The launcher stops its ranks itself; this only catches one it left running.
    for child in set(multiprocessing.active_children()) - keep:  # also joins those that exited
        child.terminate()
        child.join(grace_s)
        if child.is_alive():
            child.kill()
            child.join()


def _stop_resource_tracker(grace_s: float) -> None:
    # Private attributes (stable from Python 3.8 to 3.13): the tracker has no public stop.
    # Ranks hold the tracker's pipe too, so they must be gone first or it never sees EOF.
    tracker = getattr(resource_tracker, "_resource_tracker", None)
    fd, pid = getattr(tracker, "_fd", None), getattr(tracker, "_pid", None)
    if fd is None or pid is None:
        return
    with contextlib.suppress(OSError):
        os.close(fd)  # end of file on its pipe: it releases what it tracks and exits
    tracker._fd = tracker._pid = None  # a later launch in this process starts a fresh one
    _reap(pid, grace_s)


def _reap(pid: int, grace_s: float) -> None:
    deadline = time.monotonic() + grace_s
    while True:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # already reaped
            return
        if done:
            return
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
            return
        time.sleep(0.02)


@contextlib.contextmanager
def temp_dir_in(run_dir: Path):
    """Send this process's and the ranks' temporary files to `run_dir/logs/tmp` meanwhile."""
    folder = Path(run_dir).resolve() / "logs" / "tmp"
    folder.mkdir(parents=True, exist_ok=True)
    saved_module = tempfile.tempdir
    # the ranks read TMPDIR (runner/forkserver.py: also from a running server); this process
    # has cached its choice already
    tempfile.tempdir = str(folder)
    try:
        with environment(TMPDIR=str(folder)):
            yield folder
    finally:
        tempfile.tempdir = saved_module
        _remove_empty_dirs(folder)  # what has files stays: error files explain a failed rank


def _remove_empty_dirs(folder: Path) -> None:
    # The ranks' torch makes an empty `torchinductor_<user>` cache folder at import.
    for path, _, _ in sorted(os.walk(folder), key=lambda entry: -len(entry[0])):
        with contextlib.suppress(OSError):
            os.rmdir(path)  # fails, as wanted, on a folder that is not empty
