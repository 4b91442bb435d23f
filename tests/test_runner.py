"""The runner on gloo: every data-parallel strategy for a few steps, the run directory,
failure handling (crash, hang, watchdog), restarts, and the pieces without processes.

Launches are shared with tests/test_runner_numerics.py through run_small's cache, and
each launch is checked for several things, because a launch costs ~6 s here.
"""

import json
import signal
import subprocess
import sys
import time

import pytest

torch = pytest.importorskip("torch")

from opentikz_dt.errors import RunError  # noqa: E402
from opentikz_dt.runner.testing import DP_CASES, GOSSIP_CASE, run_small, small_spec_data  # noqa: E402

STRATEGIES = [pytest.param(*case, id=name) for name, case in DP_CASES.items()]
STRATEGIES.append(pytest.param(*GOSSIP_CASE, id="gossip"))
STRATEGIES.append(pytest.param("single", {"training": {"batch_size": 96}}, 1, id="single"))  # = the dp-3 reference


def _trace(run_dir):
    return json.loads((run_dir / "trace.json").read_text())


@pytest.mark.dist
@pytest.mark.parametrize("kind, overrides, dp", STRATEGIES)
def test_strategy_trains_and_leaves_a_complete_run_dir(kind, overrides, dp):
    data = small_spec_data(kind, **overrides)
    result = run_small(data)
    d, m, run = result.run_dir, result.metrics, result.run
    world = run["world_size"]
    assert world == (data["topology"]["workers"]["count"] if kind != "single" else 1)
    # loss falls
    assert m["steps_done"] == m["steps"] == 6
    assert None not in m["loss"] and m["loss"][-1] < m["loss"][0]
    assert m["samples_per_s"] > 0 and set(m["step_time_s"]) == {f"w{i}" for i in range(1, world + 1)}
    # run.json
    assert run["status"] == "ok" and run["failure"] is None and run["backend"] == "gloo"
    assert [(r["rank"], r["role"], r["exit_status"]) for r in run["ranks"]] == [(r, "worker", 0) for r in range(world)]
    assert all(isinstance(r["pid"], int) and r["host"] for r in run["ranks"])
    # outputs
    for name in ("spec.yaml", "run.json", "metrics.json", "model.pt", "trace.json"):
        assert (d / name).is_file(), name
    assert [p.name for p in sorted((d / "logs").glob("rank*.log"))] == [f"rank{r}.log" for r in range(world)]
    state = torch.load(d / "model.pt")
    assert list(state) == ["layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias",
                           "layers.2.weight", "layers.2.bias"]
    # trace: spans for every rank on both threads (where there is communication), named processes
    trace = _trace(d)
    events = trace["traceEvents"]
    assert trace["metadata"]["ended_early"] is False
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {r: f"w{r + 1} (rank {r})" for r in range(world)}
    spans = [e for e in events if e["ph"] == "X"]
    for r in range(world):
        mine = {(e["name"], e["tid"]) for e in spans if e["pid"] == r}
        assert {("forward", 0), ("backward", 0), ("optimizer", 0)} <= mine
        if world > 1:
            comm = {"allreduce" if kind == "allreduce" else "gossip"}
            if overrides.get("strategy", {}).get("algorithm") in ("ring", "tree"):
                comm.add("wait")  # our own all-reduce traces its wait for the last sends
            assert {n for n, tid in mine if tid == 1} == comm
    assert all(e["args"]["step"] in range(6) and e["args"]["id"] == f"w{e['pid'] + 1}" for e in spans)
    slow = {e["pid"] for e in spans if e["name"] == "slowdown"}
    assert slow == ({1} if data.get("topology", {}).get("workers", {}).get("slowdown") else set())
    if slow:  # the straggler sleeps as long as its compute, so its step takes about twice as long
        assert all(e["args"]["factor"] == 2.0 for e in spans if e["name"] == "slowdown")
    if world > 1:
        assert all(m["bytes"][str(r)]["sent"] > 0 and m["bytes"][str(r)]["recv"] > 0 for r in range(world))


@pytest.mark.dist
def test_ring_and_tree_trace_every_chunk():
    ring = _trace(run_small(small_spec_data(*DP_CASES["allreduce-ring"][:1], **DP_CASES["allreduce-ring"][1])).run_dir)
    ar = [e for e in ring["traceEvents"] if e["ph"] == "X" and e["name"] == "allreduce"]
    # 3 ranks: 2 reduce-scatter + 2 all-gather hops per step, 6 steps
    for r in range(3):
        mine = [(e["args"]["phase"], e["args"]["chunk"]) for e in ar if e["pid"] == r and e["args"]["step"] == 2]
        assert mine == [("reduce-scatter", 0), ("reduce-scatter", 1), ("all-gather", 0), ("all-gather", 1)]
    assert len(ar) == 3 * 4 * 6
    # One clock: no rank can finish a step's all-reduce before every rank has started it
    # (its result depends on all of them), so on aligned clocks that order holds.
    for step in range(6):
        mine = [e for e in ar if e["args"]["step"] == step]
        last_start = max(e["ts"] for e in mine if e["args"]["phase"] == "reduce-scatter" and e["args"]["chunk"] == 0)
        first_end = min(e["ts"] + e["dur"] for e in mine if e["args"]["phase"] == "all-gather" and e["args"]["chunk"] == 1)
        assert last_start <= first_end + 100, (step, last_start, first_end)
    tree = _trace(run_small(small_spec_data(*DP_CASES["allreduce-tree"][:1], **DP_CASES["allreduce-tree"][1])).run_dir)
    phases = {(e["pid"], e["args"]["phase"]) for e in tree["traceEvents"] if e["ph"] == "X" and e["name"] == "allreduce"}
    assert phases == {(r, p) for r in range(3) for p in ("reduce", "broadcast")}


def _own_handler(signum, frame):  # a handler of the test process's own, which a launch must leave
    raise KeyboardInterrupt


@pytest.mark.dist
def test_crash_names_the_rank_keeps_the_partial_trace_and_the_processs_signal_handlers(tmp_path):
    data = small_spec_data("allreduce", topology={"workers": {"count": 3}}, strategy={"algorithm": "ring"},
                           training={"steps": 8}, runtime={"fault": {"rank": 2, "at_step": 3, "kind": "crash"}})
    t0 = time.monotonic()
    previous = signal.signal(signal.SIGINT, _own_handler), signal.signal(signal.SIGTERM, _own_handler)
    try:
        with pytest.raises(RunError) as err:
            run_small(data, tmp_path, cache=False)
        # torchelastic takes SIGINT and SIGTERM over while the ranks run; the launch gives
        # them back (an in-process launch left Ctrl-C raising torchelastic's SignalException)
        assert signal.getsignal(signal.SIGINT) is _own_handler and signal.getsignal(signal.SIGTERM) is _own_handler
    finally:
        signal.signal(signal.SIGINT, previous[0])
        signal.signal(signal.SIGTERM, previous[1])
    assert time.monotonic() - t0 < 60
    d = tmp_path / "runs" / next(p.name for p in (tmp_path / "runs").iterdir())
    assert str(err.value) == (
        "rank 2 (worker w3) crashed at step 3: InjectedFault: injected crash at step 3 (runtime.fault, rank 2)\n"
        f"log: {d.resolve()}/logs/rank2.log\nrun directory: {d} (partial trace kept)")
    assert err.value.exit_code == 3
    run = json.loads((d / "run.json").read_text())
    assert run["status"] == "failed" and run["failure"]["rank"] == 2 and run["failure"]["role"] == "worker"
    assert run["ranks"][2]["exit_status"] == 1
    trace = _trace(d)
    assert trace["metadata"]["ended_early"] is True
    steps = {(e["pid"], e["args"]["step"]) for e in trace["traceEvents"] if e["ph"] == "X"}
    assert {(r, s) for r in range(3) for s in range(3)} <= steps
    assert "injecting crash at step 3" in (d / "logs" / "rank2.log").read_text()
    assert not (d / "model.pt").exists()
    _assert_no_process_left(run)


# A model whose forward crashes rank 1's process in native code at its third call (the
# launcher's trial forward pass runs with no RANK), as a backend's bug would.
SEGFAULTING_MODEL = """
import ctypes, os
import torch.nn as nn

class Segfaulting(nn.Sequential):
    calls = 0

    def forward(self, x):
        Segfaulting.calls += 1
        if os.environ.get("RANK") == "1" and Segfaulting.calls == 3:
            ctypes.string_at(0)  # reads address 0: SIGSEGV
        return super().forward(x)

def build():
    return Segfaulting(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
"""


@pytest.mark.dist
def test_a_crash_in_native_code_names_the_signal_and_logs_the_python_stack(tmp_path):
    from opentikz_dt.runner.launch import launch_run
    from opentikz_dt.runner.testing import write_spec

    (tmp_path / "model.py").write_text(SEGFAULTING_MODEL, encoding="utf-8")
    data = small_spec_data("allreduce", topology={"workers": {"count": 2}},
                           training={"steps": 6, "dataset": {"shape": [16], "classes": 4}})
    data["training"]["model"] = {"kind": "python", "entry": "model:build"}  # the spec's folder's model.py
    out = tmp_path / "run"
    with pytest.raises(RunError) as err:
        launch_run(write_spec(data, tmp_path), out=out, progress=False, echo=lambda line: None)
    assert str(err.value).startswith("rank 1 (worker w2) was killed by SIGSEGV (a crash in native code; its log "
                                     "holds the Python stack)\n")
    log = (out / "logs" / "rank1.log").read_text()
    assert "Fatal Python error: Segmentation fault" in log
    assert 'model.py", line 11 in forward' in log  # the line that crashed, from faulthandler
    _assert_no_process_left(json.loads((out / "run.json").read_text()))


@pytest.mark.dist
@pytest.mark.solo
def test_hang_is_stopped_after_the_timeout(tmp_path):
    data = small_spec_data("allreduce", topology={"workers": {"count": 3}}, strategy={"algorithm": "tree"},
                           training={"steps": 8},
                           runtime={"timeout_s": 5, "fault": {"rank": 1, "at_step": 3, "kind": "hang"}})
    t0 = time.monotonic()
    with pytest.raises(RunError, match=r"^rank 1 \(worker w2\) stopped responding at step 3: its peers gave up "
                                       r"after runtime.timeout_s = 5 s") as err:
        run_small(data, tmp_path, cache=False)
    assert time.monotonic() - t0 < 5 + 30  # start-up (~6-15 s on 2 busy cores) + timeout + teardown
    d = tmp_path / "runs" / next(p.name for p in (tmp_path / "runs").iterdir())
    assert f"log: {d.resolve()}/logs/rank1.log" in str(err.value)
    run = json.loads((d / "run.json").read_text())
    assert run["failure"]["rank"] == 1 and _trace(d)["metadata"]["ended_early"] is True
    _assert_no_process_left(run)


@pytest.mark.dist
@pytest.mark.solo
def test_watchdog_stops_a_lone_hung_rank(tmp_path):
    data = small_spec_data("single", training={"steps": 8},
                           runtime={"timeout_s": 2, "fault": {"rank": 0, "at_step": 4, "kind": "hang"}})
    with pytest.raises(RunError, match=r"^rank 0 \(worker w1\) hung: no rank made progress for \d+ s "
                                       r"\(runtime.timeout_s = 2\); the run was stopped\n"):
        run_small(data, tmp_path, cache=False)
    d = tmp_path / "runs" / next(p.name for p in (tmp_path / "runs").iterdir())
    spans = {e["args"]["step"] for e in _trace(d)["traceEvents"] if e["ph"] == "X"}
    assert spans == {0, 1, 2, 3}
    _assert_no_process_left(json.loads((d / "run.json").read_text()))


@pytest.mark.dist
def test_restart_resumes_from_checkpoint_to_the_full_step_count(tmp_path):
    data = small_spec_data("allreduce", topology={"workers": {"count": 2}}, training={"steps": 10},
                           runtime={"restarts": 1, "checkpoint_every": 4,
                                    "fault": {"rank": 1, "at_step": 6, "kind": "crash"}})
    result = run_small(data, tmp_path, cache=False)
    assert result.run["status"] == "ok" and result.run["attempts"] == 2
    assert result.metrics["steps_done"] == 10 and None not in result.metrics["loss"]
    log = (result.run_dir / "logs" / "rank1.log").read_text()
    assert "injecting crash at step 6" in log and "resuming from the checkpoint after step 3" in log
    # Same parameters as an uninterrupted run: the checkpoint restored model and optimizer.
    clean = run_small(small_spec_data("allreduce", topology={"workers": {"count": 2}}, training={"steps": 10}),
                      tmp_path)
    got, want = torch.load(result.run_dir / "model.pt"), torch.load(clean.run_dir / "model.pt")
    assert all(torch.allclose(got[k], want[k], atol=1e-6) for k in want)


def _assert_no_process_left(run):
    import os

    time.sleep(0.5)
    for r in run["ranks"]:
        if r["pid"]:
            try:
                os.kill(r["pid"], 0)
            except ProcessLookupError:
                continue
            # a reused pid would not be a python rank of ours (spawned, or forked from the fork server)
            cmd = open(f"/proc/{r['pid']}/cmdline", "rb").read()
            assert b"spawn_main" not in cmd and b"forkserver" not in cmd, (
                f"rank {r['rank']} (pid {r['pid']}) is still running")


# --- without processes ------------------------------------------------------------------

def test_existing_non_empty_out_dir_is_refused(tmp_path):
    from opentikz_dt.runner.launch import prepare_run_dir
    from opentikz_dt.spec import spec_from_data

    spec = spec_from_data(small_spec_data("single"))
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(RunError) as err:
        prepare_run_dir(spec, tmp_path, force=False)
    assert str(err.value) == f"{tmp_path}: directory exists and is not empty (use --force to overwrite)"
    (tmp_path / "trace").mkdir()
    (tmp_path / "trace" / "rank0.jsonl").write_text("old")
    prepare_run_dir(spec, tmp_path, force=True)
    assert (tmp_path / "notes.txt").read_text() == "mine"  # --force removes only run outputs
    assert not (tmp_path / "trace" / "rank0.jsonl").exists()


def test_global_batch_is_split_the_same_whatever_the_width():
    from opentikz_dt.runner.data import Data
    from opentikz_dt.spec import spec_from_data

    spec = spec_from_data(small_spec_data("allreduce", topology={"workers": {"count": 3}}))
    data = Data(spec, "cpu")
    for step in (0, 5, 63, 64, 200):  # 2048 samples / 96 per step: crosses epochs
        x, y = torch.cat([data.batch(step, k, 3)[0] for k in range(3)]), torch.cat([data.batch(step, k, 3)[1] for k in range(3)])
        idx = data.indices(step, 96)
        assert torch.equal(x, data.x[idx]) and torch.equal(y, data.y[idx])
    assert not torch.equal(data.indices(0, 96), data.indices(1, 96))


def test_file_dataset_is_read_and_checked(tmp_path):
    import numpy as np

    from opentikz_dt.runner.data import Data
    from opentikz_dt.spec import spec_from_data

    x = np.random.default_rng(0).normal(size=(50, 16)).astype("float32")
    np.savez(tmp_path / "d.npz", x=x, y=np.arange(50) % 4)
    spec = spec_from_data(small_spec_data("single", training={"dataset": {"kind": "file", "path": "d.npz"}}))
    data = Data(spec, "cpu", str(tmp_path / "d.npz"))
    assert torch.equal(data.x, torch.from_numpy(x)) and data.y.dtype == torch.int64
    np.savez(tmp_path / "bad.npz", x=x[:, :3], y=np.arange(50))
    with pytest.raises(RunError) as err:
        Data(spec, "cpu", str(tmp_path / "bad.npz"))
    assert str(err.value) == f"{tmp_path / 'bad.npz'}: x must be N x 16 and y N labels, got (50, 3) and (50,)"


def test_trace_is_bounded_by_sampling_and_cap(tmp_path):
    from opentikz_dt.runner.trace import Tracer

    tracer = Tracer(tmp_path / "r.jsonl", 0, "w1", max_events=100, sample_every=3)
    for step in range(1000):
        with tracer.span("forward", step=step):
            pass
    tracer.close()
    lines = (tmp_path / "r.jsonl").read_text().splitlines()
    assert len(lines) == 100
    assert {json.loads(x)["args"]["step"] % 3 for x in lines} == {0}


def test_merge_keeps_a_torn_trace(tmp_path):
    from opentikz_dt.runner.merge import merge_trace

    (tmp_path / "trace").mkdir()
    good = {"ph": "X", "name": "forward", "pid": 0, "tid": 0, "ts": 1.0, "dur": 2.0, "args": {"step": 0, "id": "w1"}}
    (tmp_path / "trace" / "rank0.jsonl").write_text(json.dumps(good) + "\n" + '{"ph": "X", "na')
    info = merge_trace(tmp_path, [("worker", "w1")], {"ended_early": True})
    trace = json.loads((tmp_path / "trace.json").read_text())
    assert info == {"spans": 1, "torn_lines": 1}
    assert trace["metadata"] == {"ended_early": True, "torn_lines": 1}
    assert {"ph": "M", "name": "thread_name", "pid": 0, "tid": 1, "args": {"name": "comm"}} in trace["traceEvents"]


def test_gossip_neighbours_are_symmetric():
    from opentikz_dt.runner.strategies.gossip import neighbours

    assert neighbours(0, 4, 1) == ([1], [3])
    assert neighbours(0, 4, 2) == ([1, 3], [3, 1])
    assert neighbours(1, 5, 3) == ([2, 0, 3], [0, 2, 4])


def test_cli_run_does_not_import_torch_until_run():
    code = ("import sys; from opentikz_dt.cli import main; import opentikz_dt.cli.run; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.mark.dist
def test_cli_run_writes_summary_and_refuses_existing_dir(tmp_path):
    from click.testing import CliRunner

    from opentikz_dt.cli import main
    from opentikz_dt.runner.testing import write_spec

    spec = write_spec(small_spec_data("single", name="cli-single"), tmp_path)
    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["run", str(spec), "--out", str(out), "--steps", "3"])
    assert result.exit_code == 0, result.output
    assert f"run directory: {out}" in result.output
    assert "cli-single: single, 1 rank(s), gloo on cpu, 3/3 steps" in result.output
    assert json.loads((out / "metrics.json").read_text())["steps"] == 3
    again = CliRunner().invoke(main, ["run", str(spec), "--out", str(out)])
    assert again.exit_code == 1  # refused before any rank started: invalid input, not a failed run
    assert again.output == f"dtgen: error: {out}: directory exists and is not empty (use --force to overwrite)\n"


@pytest.mark.gpu
@pytest.mark.dist
@pytest.mark.parametrize("algorithm", ["native", "ring", "tree"])
def test_allreduce_on_nccl(algorithm, tmp_path):
    if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        pytest.skip("needs 2 CUDA devices")
    data = small_spec_data("allreduce", topology={"workers": {"count": 2}}, strategy={"algorithm": algorithm},
                           runtime={"backend": "nccl", "device": "cuda"})
    result = run_small(data, tmp_path, cache=False)
    assert result.run["backend"] == "nccl" and result.run["ranks"][1]["device"] == "cuda:1"
    ref = run_small(small_spec_data("single", training={"batch_size": 64}, runtime={"backend": "nccl", "device": "cuda"}),
                    tmp_path, cache=False)
    got, want = torch.load(result.run_dir / "model.pt"), torch.load(ref.run_dir / "model.pt")
    assert all(torch.allclose(got[k], want[k], atol=1e-4) for k in want)


def test_progress_line_estimates_after_the_warm_up_step():
    """A 5 s warm-up step, then 0.1 s steps: the ETA is the steady steps left (old: the
    warm-up spread over every remaining step, 'ETA 1m21s' for a 7 s run)."""
    from opentikz_dt.runner.monitor import progress_line

    roles = [("worker", "w1"), ("worker", "w2")]
    def report(rank, step):  # noqa: E306
        return {"rank": rank, "step": step, "samples": 32 * (step + 1), "first_samples": 32, "first_start": 0.0,
                "first_end": 5.0, "last_end": 5.0 + 0.1 * step, "now": 5.0 + 0.1 * step,
                "losses": {str(s): 2.0 - 0.1 * s + rank for s in range(max(0, step - 7), step + 1)}}
    assert progress_line({0: report(0, 0), 1: report(1, 0)}, roles, 100) == (
        "step 1/100  loss 2.5000  - samples/s  ETA -")  # nothing to estimate from before a steady step
    # rank 1 is a step behind: the loss is of step 9, the one both did, averaged
    line = progress_line({0: report(0, 10), 1: report(1, 9)}, roles, 100)
    assert line == "step 10/100  loss 1.6000  608 samples/s  ETA 9s"  # (32*10 + 32*9) / 1.0 s; 90 x 0.1 s


def test_progress_line_rounds_the_rate_as_the_summary_does():
    """The summary keeps samples_per_s rounded to 2 places and prints it with no decimals; a
    rate of 9,784.5004 is 9,785 shown directly but 9,784 through the summary's 9,784.5 (half
    to even). The progress line rounds the same way, so the two never differ by one."""
    from opentikz_dt.runner.monitor import progress_line

    roles = [("worker", "w1")]
    report = {"rank": 0, "step": 1, "samples": 2 * 9784.5004, "first_samples": 9784.5004, "first_start": 0.0,
              "first_end": 1.0, "last_end": 2.0, "now": 2.0, "losses": {"1": 1.0}}
    assert f"{round(9784.5004, 2):,.0f}" == "9,784"
    assert " 9,784 samples/s" in progress_line({0: report}, roles, 2)


@pytest.mark.dist
def test_progress_line_at_the_end_says_what_the_summary_says():
    from opentikz_dt.runner.monitor import progress_line

    data = small_spec_data("allreduce", topology={"workers": {"count": 2}})
    run = run_small(data)
    progress = {int(p.stem[4:]): json.loads(p.read_text()) for p in (run.run_dir / "progress").glob("rank*.json")}
    roles = [("worker", "w1"), ("worker", "w2")]
    steps = run.metrics["steps"]
    assert progress_line(progress, roles, steps) == (
        f"step {steps}/{steps}  loss {run.metrics['loss'][-1]:.4f}  {run.metrics['samples_per_s']:,.0f} samples/s  ETA 0s")
