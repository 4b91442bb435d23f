"""Concurrent `dtgen edit` runs on one file: they take turns on the lock, none is lost,
and a reader never sees half a file."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from opentikz_dt.edit.safefile import lock_path, locked
from opentikz_dt.errors import SpecError
from opentikz_dt.spec import load_spec

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
EDITORS = 4


def _start_edit(path: Path, *words: str) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "opentikz_dt", "edit", str(path), *words, "--no-compile"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _wait_until_it_opens(process: subprocess.Popen, target: Path, timeout: float = 60.0) -> None:
    """Block until `process` holds `target` open (Linux /proc), i.e. it has reached the lock."""
    deadline = time.monotonic() + timeout
    fds = Path(f"/proc/{process.pid}/fd")
    while time.monotonic() < deadline:
        try:
            if any(os.readlink(fd) == str(target) for fd in fds.iterdir()):
                return
        except (FileNotFoundError, ProcessLookupError):  # an fd closed while we looked
            pass
        assert process.poll() is None, process.communicate()
        time.sleep(0.02)
    raise AssertionError(f"the editor never opened {target}")


def test_concurrent_add_worker_loses_no_edit_and_never_tears_the_file(tmp_path):
    path = tmp_path / "ps-sync.yaml"
    shutil.copyfile(EXAMPLES / "ps-sync.yaml", path)
    seen, torn, stop = [], [], threading.Event()

    def read_continuously():
        while not stop.is_set():
            try:
                seen.append(load_spec(path).topology.workers.count)
            except SpecError as exc:  # a torn or half-written file would not load
                torn.append(str(exc))

    reader = threading.Thread(target=read_continuously)
    reader.start()
    try:
        editors = [_start_edit(path, "add-worker") for _ in range(EDITORS)]
        outcomes = [(p.wait(timeout=120), p.stdout.read(), p.stderr.read()) for p in editors]
    finally:
        stop.set()
        reader.join(timeout=30)
    succeeded = [o for o in outcomes if o[0] == 0]
    assert len(succeeded) == EDITORS, outcomes
    assert load_spec(path).topology.workers.count == 3 + len(succeeded)
    assert torn == []
    assert seen and set(seen) <= set(range(3, 3 + EDITORS + 1))
    assert sorted(p.name for p in tmp_path.iterdir()) == [".ps-sync.yaml.dtgen-lock", "ps-sync.yaml"]


def test_an_edit_waits_for_the_lock_and_then_rereads_the_file(tmp_path):
    path = tmp_path / "ps-sync.yaml"
    shutil.copyfile(EXAMPLES / "ps-sync.yaml", path)
    with locked(path.resolve()):
        editor = _start_edit(path, "add-worker")
        _wait_until_it_opens(editor, lock_path(path))
        time.sleep(0.5)
        assert editor.poll() is None, editor.communicate()  # blocked on the lock we hold
        # Another writer's change, made while the editor waits: it must build on it.
        path.write_text(path.read_text().replace("count: 3", "count: 5"))
    assert editor.wait(timeout=60) == 0, editor.communicate()
    assert load_spec(path).topology.workers.count == 6
