"""Ranks on the CPU are forks of one server that imported torch once (runner/forkserver.py):
they still see the launch's environment, and the server runs no thread a fork would lose."""

from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path

import pytest

pytest.importorskip("torch")

from opentikz_dt.runner import forkserver  # noqa: E402
from opentikz_dt.runner.launch import launch_run  # noqa: E402
from opentikz_dt.runner.testing import small_spec_data, write_spec  # noqa: E402

pytestmark = pytest.mark.dist

# A model that writes, from each rank, what the rank's environment holds (the launcher's
# trial forward pass builds it too, with no RANK).
ENV_REPORTING_MODEL = """
import json, os, tempfile
import torch.nn as nn

def build():
    rank = os.environ.get("RANK", "launcher")
    seen = {k: os.environ.get(k) for k in ("DTGEN_TEST_MARK", "RANK", "TMPDIR")}
    seen["tempdir"] = tempfile.gettempdir()
    with open(os.path.join(os.path.dirname(__file__), f"env-{rank}.json"), "w") as f:
        json.dump(seen, f)
    return nn.Sequential(nn.Linear(16, 4))
"""


def test_ranks_forked_from_a_running_server_take_the_launchs_environment(tmp_path, monkeypatch):
    assert forkserver.running()  # the session's (tests/conftest.py): started before this test set anything
    monkeypatch.setenv("DTGEN_TEST_MARK", "set after the server started")
    (tmp_path / "model.py").write_text(ENV_REPORTING_MODEL, encoding="utf-8")
    data = small_spec_data("allreduce", topology={"workers": {"count": 2}},
                           training={"steps": 2, "dataset": {"shape": [16], "classes": 4}})
    data["training"]["model"] = {"kind": "python", "entry": "model:build"}
    out = tmp_path / "run"
    launch_run(write_spec(data, tmp_path), out=out, progress=False, echo=lambda line: None)
    logs_tmp = str((out / "logs" / "tmp").resolve())
    for rank in ("0", "1"):
        seen = json.loads((tmp_path / f"env-{rank}.json").read_text())
        assert seen == {"DTGEN_TEST_MARK": "set after the server started", "RANK": rank,  # the elastic launcher's
                        "TMPDIR": logs_tmp, "tempdir": logs_tmp}  # runner/leftovers.py, temp_dir_in


def test_the_server_runs_one_thread():
    assert forkserver.running()
    child = multiprocessing.get_context("forkserver").Process(target=os.getpid)
    child.start()  # served once the server has imported what it preloads
    child.join()
    assert child.exitcode == 0
    pid = forkserver.forkserver._forkserver._forkserver_pid
    assert os.listdir(f"/proc/{pid}/task") == [str(pid)]
    assert Path(f"/proc/{pid}/cmdline").read_bytes().count(b"forkserver") == 1


def test_ranks_are_spawned_on_gpus_and_beside_a_server_somebody_else_started(monkeypatch):
    assert forkserver.start_method("cpu") == "forkserver"  # the session's server: started by dtgen
    assert forkserver.start_method("cuda") == "spawn"
    monkeypatch.setattr(forkserver, "_STARTED", set())  # as if the caller's own code had started it
    assert forkserver.start_method("cpu") == "spawn"  # its ranks would lack torch and PRELOAD's record


# What a rank imports after the fork (runner/rank_imports.py preloads it): the spec's
# validation, a strategy's rank and figure sides, ZeroRedundancyOptimizer's package.
RANK_SIDE = ["jsonschema", "opentikz_dt.spec", "opentikz_dt.runner.strategies.mesh",
             "opentikz_dt.strategies.mesh.figures", "torch.distributed.optim", "torch.distributed.pipelining"]


def test_a_forked_rank_finds_what_it_imports_next_already_imported(tmp_path):
    assert forkserver.running()
    report = tmp_path / "modules.json"
    # exec (a builtin) as the target: unpickling it in the child imports nothing of this test's
    code = f"import json, sys; open({str(report)!r}, 'w').write(json.dumps([m for m in {RANK_SIDE!r} if m in sys.modules]))"
    child = multiprocessing.get_context("forkserver").Process(target=exec, args=(code,))
    child.start()
    child.join()
    assert child.exitcode == 0
    assert json.loads(report.read_text()) == RANK_SIDE
