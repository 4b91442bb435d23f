"""`dtgen run` leaves nothing behind: no process in its process group once it returns
(after success, a failing rank, or Ctrl-C while ranks run) and no file in the
temporary directory (the launcher's error files go to the run's logs/tmp/)."""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from multiprocessing import resource_tracker
from pathlib import Path

import pytest

pytest.importorskip("torch")

from opentikz_dt.runner.leftovers import launch_helpers_reaped  # noqa: E402
from opentikz_dt.runner.testing import small_spec_data, write_spec  # noqa: E402

DTGEN = [sys.executable, "-m", "opentikz_dt"]


def _group(pgid: int) -> list[str]:
    """'pid state command' of every process (zombies included) in process group `pgid`."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # exited while we looked
            continue
        name, fields = text[text.index("(") + 1:text.rindex(")")], text[text.rindex(")") + 2:].split()
        if int(fields[2]) == pgid:
            found.append(f"{stat.parent.name} {fields[0]} {name}")
    return found


def _settled_group(pgid: int, limit_s: float = 10.0) -> list[str]:
    """`_group` once the dead have been buried: a rank forked by the fork server that exits
    after the server is reparented to PID 1 and stays a zombie until PID 1 reaps it (about
    2 s in this container's init); no process of dtgen's can reap it. Live processes, and
    zombies whose parent is still alive, are returned at once."""
    deadline = time.monotonic() + limit_s
    while True:
        found = _group(pgid)
        orphans_only = found and all(entry.split()[1] == "Z" and _parent(entry.split()[0]) == 1 for entry in found)
        if not orphans_only or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def _parent(pid: str) -> int | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(text[text.rindex(")") + 2:].split()[1])


def _start(tmp_path: Path, data: dict) -> tuple[subprocess.Popen, Path, Path]:
    """`dtgen run` in its own process group (as a shell runs it), with a private TMPDIR."""
    spec, out, tmp = write_spec(data, tmp_path), tmp_path / "run", tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([*DTGEN, "run", str(spec), "--out", str(out)], env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, out, tmp


def _wait(proc: subprocess.Popen, limit_s: float = 240) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=limit_s)  # generous: this box may be busy
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"dtgen run still running after {limit_s} s")
    return proc.returncode, err


@pytest.mark.dist
@pytest.mark.parametrize("fault, code", [(None, 0), ({"rank": 0, "at_step": 1, "kind": "crash"}, 3)],
                         ids=["success", "failing-rank"])
def test_run_returns_with_its_process_group_empty(tmp_path, fault, code):
    data = small_spec_data("single", name="leftovers", training={"steps": 2},
                           runtime={"fault": fault} if fault else {})
    proc, out, tmp = _start(tmp_path, data)
    rc, err = _wait(proc)
    assert _group(proc.pid) == []  # checked at once: a zombie adopted by PID 1 shows up here
    assert rc == code, err
    assert list(tmp.iterdir()) == []
    if fault:  # the failed rank's error file stays with the run it explains
        assert [p.name.startswith("pytorch-errorfile-") for p in (out / "logs" / "tmp").iterdir()] == [True]
    else:
        assert not (out / "logs" / "tmp").exists()


@pytest.mark.dist
@pytest.mark.solo
def test_ctrl_c_stops_every_rank_keeps_the_partial_trace_and_exits_130(tmp_path):
    data = small_spec_data("allreduce", name="interrupted", topology={"workers": {"count": 2}},
                           training={"steps": 100_000})
    proc, out, tmp = _start(tmp_path, data)
    deadline = time.monotonic() + 180
    while not _every_rank_stepped(out, 2):
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline, "the ranks never started"
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: the whole foreground group
    rc, err = _wait(proc)
    assert _group(proc.pid) == []
    assert rc == 130, err
    assert err.splitlines()[-2:] == [f"run directory: {out} (partial trace kept)",
                                     "dtgen: error: interrupted: every rank was stopped"]
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "interrupted" and run["failure"]["exit_code"] == 130
    trace = json.loads((out / "trace.json").read_text())
    assert trace["metadata"]["ended_early"] is True
    assert {e["pid"] for e in trace["traceEvents"] if e["ph"] == "X"} == {0, 1}
    assert list(tmp.iterdir()) == []


@pytest.mark.dist
@pytest.mark.solo
@pytest.mark.parametrize("delay_s", [0.0, 1.0])
def test_ctrl_c_in_the_first_seconds_is_one_line_not_a_traceback(tmp_path, delay_s):
    """Ctrl-C while the fork server still imports torch, or while the ranks start: the whole
    foreground group gets SIGINT, and neither the server nor a starting rank may print a
    traceback over the launcher's one line."""
    data = small_spec_data("allreduce", name="early", topology={"workers": {"count": 2}},
                           training={"steps": 100_000})
    proc, out, tmp = _start(tmp_path, data)
    said = []
    while not said or not said[-1].startswith("dtgen run: "):  # the line just before the launch
        line = proc.stderr.readline()
        assert line, f"dtgen run ended before its launch: {''.join(said)}{proc.communicate()[1]}"
        said.append(line)
    time.sleep(delay_s)
    os.killpg(proc.pid, signal.SIGINT)
    rc, err = _wait(proc)
    err = "".join(said) + err
    assert _settled_group(proc.pid) == []
    assert rc == 130, err
    assert "Traceback" not in err and "Error" not in err, err
    # before the ranks start: the command's own line; once they start, the launcher's
    assert err.splitlines()[-1] in ("dtgen: interrupted", "dtgen: error: interrupted: every rank was stopped"), err
    assert list(tmp.iterdir()) == []


def _every_rank_stepped(out: Path, world: int) -> bool:
    try:
        steps = [json.loads((out / "progress" / f"rank{r}.json").read_text())["step"] for r in range(world)]
    except (OSError, ValueError, KeyError):
        return False
    return min(steps) >= 1


def test_launch_helpers_reaped_stops_and_reaps_the_resource_tracker():
    # A spawned child starts multiprocessing's resource tracker, as the launcher's ranks do.
    tracker = resource_tracker._resource_tracker
    if tracker._pid is not None:
        pytest.skip("a resource tracker was already running in this test process")
    with launch_helpers_reaped():
        child = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(0,))
        child.start()
        child.join()
        pid = tracker._pid
        assert pid is not None
    assert tracker._pid is None and not Path(f"/proc/{pid}").exists()  # exited and reaped, no zombie


@pytest.mark.dist
@pytest.mark.solo
def test_a_killed_launcher_takes_its_ranks_and_its_fork_server_with_it(tmp_path):
    """SIGKILL gives dtgen no chance to stop anything: the kernel must. Each rank asks for
    SIGKILL when its parent dies (multinode.die_with_parent); on the CPU that parent is the
    fork server, which exits once the launcher's end of its pipe closes (runner/forkserver.py)."""
    data = small_spec_data("allreduce", name="killed", topology={"workers": {"count": 2}},
                           training={"steps": 100_000})
    folders_before = set(Path("/tmp").glob("pymp-*"))
    proc, out, tmp = _start(tmp_path, data)
    try:
        deadline = time.monotonic() + 180
        while not _every_rank_stepped(out, 2):
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "the ranks never started"
            time.sleep(0.2)
        os.kill(proc.pid, signal.SIGKILL)  # the launcher alone, not its process group
        proc.wait()  # not communicate(): ranks left alive would hold its pipes open
        deadline = time.monotonic() + 30
        while (alive := [p for p in _group(proc.pid) if p.split()[1] != "Z"]) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert alive == []  # zombies aside: nobody is left to reap what the launcher started
    finally:
        os.killpg(proc.pid, signal.SIGKILL) if _group(proc.pid) else None
        # nor could it remove multiprocessing's folder for the server's socket: in its TMPDIR
        # (tmp_path), or in /tmp where that is too deep for a socket's path (runner/forkserver.py)
        for folder in set(Path("/tmp").glob("pymp-*")) - folders_before:
            if all(p.name.startswith("listener-") and not _answers(p) for p in folder.iterdir()):
                shutil.rmtree(folder)


def _answers(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX) as client:
        try:
            client.connect(str(path))
        except OSError:
            return False
    return True


def test_every_elastic_launch_names_its_log_folder():
    """torch's elastic launcher, given no log folder (LaunchConfig without logs_specs, or
    DefaultLogsSpecs without log_dir), makes a torchelastic_* folder in the temporary directory
    and never removes it: every launch in the repository (the runner, the benchmarks, the tests)
    names the folder its logs go to."""
    import ast

    repo = Path(__file__).resolve().parent.parent
    unnamed = []
    for folder in ("runner", "opentikz_dt", "benchmarks", "scripts", "tests"):
        for path in sorted((repo / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, ast.Call):
                    continue
                name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                keywords = {k.arg for k in node.keywords}
                if (name == "LaunchConfig" and "logs_specs" not in keywords) or \
                        (name == "DefaultLogsSpecs" and "log_dir" not in keywords and not node.args):
                    unnamed.append(f"{path.relative_to(repo)}:{node.lineno}: {name}")
    assert unnamed == []
