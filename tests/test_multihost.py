"""Multi-host runs on an emulated cluster (scripts/netcluster.sh): one network namespace
per host, links shaped with tc tbf, one `dtgen run` launcher per host, each with its
own run folder (no shared filesystem). Skipped without root."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from opentikz_dt.runner.netcluster import NetCluster, namespaces
from opentikz_dt.runner.testing import small_spec_data

pytestmark = [pytest.mark.dist, pytest.mark.slow]  # and solo: those that make namespaces or bind fixed ports
PORT = 29500
ENV = dict(os.environ, OMP_NUM_THREADS="1", TORCH_CPP_LOG_LEVEL="ERROR")


def write(tmp_path, data, name="spec.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def launch(cluster, host: int, spec: Path, out: Path, *extra, nnodes=None, port=PORT):
    nnodes = nnodes or cluster.hosts
    argv = [sys.executable, "-m", "opentikz_dt", "run", str(spec), "--out", str(out), "--nnodes", str(nnodes),
            "--node-rank", str(host - 1), "--rdzv-endpoint", f"{cluster.addr(1)}:{port}", *extra]
    # TMPDIR in the test's folder: a killed launcher cannot remove torch's temporary files.
    env = dict(ENV, TMPDIR=str(out.parent))
    return cluster.popen(host, argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def launch_all(cluster, spec, tmp_path, *extra, port=PORT):
    return [launch(cluster, h, spec, tmp_path / f"h{h}", *extra, port=port) for h in range(1, cluster.hosts + 1)]


def finish(procs, timeout=120):
    outs = []
    for p in procs:
        out, _ = p.communicate(timeout=timeout)
        outs.append((p.returncode, out))
    return outs


def said(outs) -> str:
    """Each launcher's exit status and whole output, for an assertion's message (pytest
    shortens a long list's repr in the middle, where a launcher's last lines are)."""
    return "\n".join(f"--- host {h} exited {rc}:\n{out}" for h, (rc, out) in enumerate(outs, 1))


def wait_for_step(progress: Path, step: int, timeout=90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if json.loads(progress.read_text())["step"] >= step:
                return
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.2)
    raise AssertionError(f"{progress} never reached step {step}")


def assert_no_processes(cluster, within=15.0) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        left = {h: cluster.pids(h) for h in range(1, cluster.hosts + 1)}
        if not any(left.values()):
            return
        time.sleep(0.5)
    raise AssertionError(f"processes left in the cluster's namespaces: {left}")


def ring_spec(hosts=2, workers=4, steps=4, **over):
    return small_spec_data("allreduce", name=f"mh-{hosts}", topology={"workers": {"count": workers}, "hosts": hosts},
                           strategy={"algorithm": "ring"}, training={"steps": steps}, **over)


@pytest.mark.solo
def test_netcluster_shapes_links_and_cleans_up(tmp_path):
    """The test bed itself: addresses, hostnames, the shaped rate, teardown, --latency."""
    from opentikz_dt.runner.netcluster import unavailable_reason

    if unavailable_reason():
        pytest.skip(unavailable_reason())
    cluster = NetCluster(2, "80mbit")
    try:
        cluster.up()
        assert namespaces(cluster.name + "-") == [f"{cluster.name}-br", f"{cluster.name}-h1", f"{cluster.name}-h2"]
        name = cluster.run(2, ["hostname"], capture_output=True, text=True).stdout.strip()
        assert name == f"{cluster.name}-h2"
        sink = cluster.popen(2, [sys.executable, "-c", SINK], stdout=subprocess.PIPE, text=True)
        time.sleep(1.0)
        sent = cluster.run(1, [sys.executable, "-c", SOURCE.format(addr=cluster.addr(2))],
                           capture_output=True, text=True, timeout=60)
        assert sent.returncode == 0, sent.stderr
        mb_s = float(sink.communicate(timeout=30)[0])
        assert 5.0 < mb_s < 80 / 8 * 1.15, f"{mb_s:.1f} MB/s over an 80mbit (10 MB/s) link"
    finally:
        cluster.down()
    assert namespaces(cluster.name + "-") == []
    r = subprocess.run(["bash", str(Path(__file__).parent.parent / "scripts" / "netcluster.sh"), "up", "--name",
                        cluster.name, "--hosts", "1", "--link", "10mbit", "--latency", "5"],
                       capture_output=True, text=True)
    assert namespaces(cluster.name + "-") == []
    if r.returncode:  # netem missing: a clear refusal, nothing left
        assert "--latency needs the netem qdisc" in r.stderr
    else:
        subprocess.run(["bash", str(SCRIPT_PATH), "down", "--name", cluster.name], check=True)


SCRIPT_PATH = Path(__file__).parent.parent / "scripts" / "netcluster.sh"
SINK = """
import socket, time
s = socket.socket(); s.bind(("0.0.0.0", 5001)); s.listen(1)
c, _ = s.accept(); n = 0; t0 = None
while True:
    b = c.recv(1 << 16)
    if not b: break
    if t0 is None: t0 = time.perf_counter()
    n += len(b)
print(n / (time.perf_counter() - t0) / 1e6)
"""
SOURCE = """
import socket
s = socket.create_connection(("{addr}", 5001)); s.sendall(b"x" * (8 << 20)); s.close()
"""


@pytest.mark.solo
def test_two_hosts_separate_folders_gather_to_node0(tmp_path, netcluster):
    cluster = netcluster(2)
    spec = write(tmp_path, ring_spec())
    outs = finish(launch_all(cluster, spec, tmp_path))
    assert [rc for rc, _ in outs] == [0, 0], said(outs)
    assert "node 1 done" in outs[1][1]
    h1, h2 = tmp_path / "h1", tmp_path / "h2"
    # Node 1's folder has only its own ranks; node 0's has everyone's, gathered.
    assert sorted(p.name for p in (h2 / "trace").iterdir()) == ["rank2.jsonl", "rank3.jsonl"]
    assert not (h2 / "trace.json").exists()
    trace = json.loads((h1 / "trace.json").read_text())
    assert {e["pid"] for e in trace["traceEvents"] if e["ph"] == "X"} == {0, 1, 2, 3}
    metrics = json.loads((h1 / "metrics.json").read_text())
    assert len(metrics["loss"]) == 4 and set(metrics["step_time_s"]) == {"w1", "w2", "w3", "w4"}
    assert sorted(p.name for p in (h1 / "logs").glob("rank*.log")) == [f"rank{r}.log" for r in range(4)]
    run = json.loads((h1 / "run.json").read_text())
    assert [(r["addr"], r["node_rank"]) for r in run["ranks"]] == [
        (cluster.addr(1), 0), (cluster.addr(1), 0), (cluster.addr(2), 1), (cluster.addr(2), 1)]
    assert {r["host"] for r in run["ranks"]} == {cluster.namespace(1), cluster.namespace(2)}
    # One machine, one monotonic clock: each measured offset to rank 0 must be within the
    # bound the trace states (half the least ping-pong round trip) of the true offset, 0.
    clock = trace["metadata"]["clock"]
    assert set(clock) == {"0", "1", "2", "3"}
    for r, c in clock.items():
        assert abs(c["offset_us"]) <= c["bound_us"] + 1.0, (r, c)
    assert clock["2"]["bound_us"] > 0


# Ring all-reduce across hosts is covered by the run above, hierarchical by the 4-host one;
# central storage cannot span hosts (refused below).
STRATEGIES = {
    "allreduce-native": {"strategy": {"kind": "allreduce", "algorithm": "native"}, "topology": {"workers": {"count": 2}}},
    "allreduce-tree": {"strategy": {"kind": "allreduce", "algorithm": "tree"}, "topology": {"workers": {"count": 2}}},
    "ps-sync": {"strategy": {"kind": "parameter-server", "sync": "sync"},
                "topology": {"workers": {"count": 2}, "servers": {"count": 2}}},
    "gossip": {"strategy": {"kind": "gossip", "peers": 1}, "topology": {"workers": {"count": 2}}},
    "ps-async": {"strategy": {"kind": "parameter-server", "sync": "async"},
                 "topology": {"workers": {"count": 2}, "servers": {"count": 2}}},
    "pipeline": {"strategy": {"kind": "pipeline", "microbatches": 2}, "topology": {"workers": {"count": 2}}},
}


@pytest.mark.solo
def test_two_hosts_every_strategy(tmp_path, netcluster):
    """One cluster, the runs side by side (one rendezvous port each): most of a run's
    time is process start and rendezvous, which overlap."""
    cluster = netcluster(2)
    runs = {}
    for i, (case, over) in enumerate(STRATEGIES.items()):
        data = small_spec_data(over["strategy"]["kind"], name=f"mh-{case}", training={"steps": 3})
        data["strategy"] = over["strategy"]
        data["topology"] = dict(over["topology"], hosts=2)
        # six runs start side by side on the cores: a rank's first receive may wait for a peer
        # still starting behind the others (a sync server's first weights took over small_spec_data's
        # 10 s once, on a slower 2-core machine); a hang is still stopped by finish's 180 s
        data["runtime"]["timeout_s"] = 60
        (tmp_path / case).mkdir()
        spec = write(tmp_path / case, data)
        runs[case] = launch_all(cluster, spec, tmp_path / case, port=PORT + i)
    for case, procs in runs.items():
        outs = finish(procs, timeout=180)
        assert [rc for rc, _ in outs] == [0, 0], (case, outs)
        run = json.loads((tmp_path / case / "h1" / "run.json").read_text())
        assert run["status"] == "ok" and {r["node_rank"] for r in run["ranks"]} == {0, 1}, case
        trace = json.loads((tmp_path / case / "h1" / "trace.json").read_text())
        assert trace["metadata"]["strategy"] == STRATEGIES[case]["strategy"]["kind"]
        assert {e["pid"] for e in trace["traceEvents"] if e["ph"] == "X"} == set(range(run["world_size"])), case
    assert_no_processes(cluster)


def test_central_storage_refuses_to_span_hosts(tmp_path):
    data = small_spec_data("central-storage", topology={"workers": {"count": 2}, "hosts": 2})
    spec = write(tmp_path, data)
    r = subprocess.run([sys.executable, "-m", "opentikz_dt", "run", str(spec), "--out", str(tmp_path / "o"),
                        "--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint", "127.0.0.1:1"],
                       capture_output=True, text=True, env=ENV)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "central-storage" in r.stderr and "cannot span hosts" in r.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.solo
@pytest.mark.parametrize("how", ["sigkill", "link-down"])
def test_losing_a_host_ends_the_run_and_names_it(tmp_path, netcluster, how):
    timeout_s = 4
    cluster = netcluster(2)
    spec = write(tmp_path, ring_spec(steps=100000, runtime={"timeout_s": timeout_s}))
    procs = launch_all(cluster, spec, tmp_path)
    wait_for_step(tmp_path / "h1" / "progress" / "rank0.json", 3)
    lost_at = time.monotonic()
    if how == "sigkill":
        procs[1].send_signal(signal.SIGKILL)
    else:
        cluster.link_state(2, "down")
    out, _ = procs[0].communicate(timeout=timeout_s + 30 + 30)
    ended = time.monotonic() - lost_at
    assert procs[0].returncode == 3, out
    assert ended <= timeout_s + 30, f"survivor took {ended:.0f} s"
    assert f"lost host: node 1 ({cluster.addr(2)}, ranks 2, 3)" in out, out
    assert "Traceback" not in out
    try:
        procs[1].communicate(timeout=timeout_s + 30)  # the cut-off node gives up too
    except subprocess.TimeoutExpired:
        pass
    assert_no_processes(cluster)
    trace = json.loads((tmp_path / "h1" / "trace.json").read_text())
    assert trace["metadata"]["ended_early"] is True
    assert {e["pid"] for e in trace["traceEvents"] if e["ph"] == "X"} >= {0, 1}
    assert json.loads((tmp_path / "h1" / "run.json").read_text())["status"] == "failed"


@pytest.mark.solo
def test_replacement_launcher_resumes_from_the_checkpoint(tmp_path, netcluster):
    """Kill host 2's launcher after a checkpoint; a new launcher on host 2 (same folder)
    rejoins, every rank resumes from the last common checkpoint and the run finishes."""
    cluster = netcluster(2)
    # w2 sleeps 40x its compute time: slow enough steps to kill mid-run, on any load.
    data = ring_spec(workers=2, steps=60, runtime={"timeout_s": 6, "restarts": 1, "checkpoint_every": 10})
    data["topology"]["workers"]["slowdown"] = {"w2": 40.0}
    spec = write(tmp_path, data)
    procs = launch_all(cluster, spec, tmp_path)
    deadline = time.monotonic() + 90
    while not (tmp_path / "h2" / "checkpoints" / "step9" / "rank1.pt").exists():
        assert time.monotonic() < deadline and procs[1].poll() is None, "no checkpoint on host 2"
        time.sleep(0.1)
    procs[1].send_signal(signal.SIGKILL)
    procs[1].wait()
    replacement = launch(cluster, 2, spec, tmp_path / "h2")  # the same command, the same folder
    outs = finish([procs[0], replacement], timeout=150)
    assert [rc for rc, _ in outs] == [0, 0], said(outs)
    run = json.loads((tmp_path / "h1" / "run.json").read_text())
    assert run["status"] == "ok" and run["attempts"] == 2
    assert len(json.loads((tmp_path / "h1" / "metrics.json").read_text())["loss"]) == 60
    for host, rank in ((1, 0), (2, 1)):
        log = (tmp_path / f"h{host}" / "logs" / f"rank{rank}.log").read_text()
        assert "resuming from the checkpoint after step" in log, log
    assert_no_processes(cluster)


def _dtgen(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "opentikz_dt", "run", *map(str, args)],
                          capture_output=True, text=True, env=ENV, timeout=timeout)


def test_bad_node_layouts_are_refused_before_anything_is_written(tmp_path):
    spec = write(tmp_path, ring_spec())
    out = tmp_path / "o"
    cases = [
        (["--nnodes", "2", "--node-rank", "2", "--rdzv-endpoint", "127.0.0.1:1"], "--node-rank 2 must be below --nnodes 2"),
        (["--nnodes", "4", "--node-rank", "0", "--rdzv-endpoint", "127.0.0.1:1"], "topology.hosts: 2, but --nnodes 4"),
    ]
    odd = write(tmp_path, small_spec_data("parameter-server", topology={"workers": {"count": 2}, "hosts": 2}), "odd.yaml")
    cases.append((["--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint", "127.0.0.1:1"], "do not divide the 3 ranks"))
    procs = [subprocess.Popen([sys.executable, "-m", "opentikz_dt", "run", str(odd if i == 2 else spec), "--out",
                               str(out), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
             for i, (args, _) in enumerate(cases)]
    for p, (_, message) in zip(procs, cases):
        _, err = p.communicate(timeout=120)
        assert p.returncode != 0 and message in err, err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


@pytest.mark.solo
def test_rendezvous_endpoint_that_never_answers(tmp_path, netcluster):
    cluster = netcluster(2)
    spec = write(tmp_path, ring_spec())
    started = time.monotonic()
    # Node 1 alone: nobody serves the endpoint on host 1.
    r = cluster.run(2, [sys.executable, "-m", "opentikz_dt", "run", str(spec), "--out", str(tmp_path / "h2"),
                        "--nnodes", "2", "--node-rank", "1", "--rdzv-endpoint", f"{cluster.addr(1)}:{PORT}",
                        "--rdzv-timeout", "2"], capture_output=True, text=True, env=ENV, timeout=60)
    assert time.monotonic() - started < 2 + 20
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert f"rendezvous endpoint {cluster.addr(1)}:{PORT} did not answer within 2 s (--rdzv-timeout" in r.stderr


@pytest.mark.solo
def test_mismatched_specs_across_nodes_are_refused(tmp_path, netcluster):
    cluster = netcluster(2)
    a = write(tmp_path, ring_spec(steps=4), "a.yaml")
    b = write(tmp_path, ring_spec(steps=5), "b.yaml")
    procs = [launch(cluster, 1, a, tmp_path / "h1", "--rdzv-timeout", "30"),
             launch(cluster, 2, b, tmp_path / "h2", "--rdzv-timeout", "30")]
    outs = finish(procs, timeout=90)
    for rc, out in outs:
        assert rc != 0 and "spec differs between nodes" in out and "Traceback" not in out, out
    assert "node 1 (" + cluster.addr(2) + ")" in outs[0][1]
    assert not (tmp_path / "h1" / "trace").exists()
    assert_no_processes(cluster)


def test_emit_slurm_and_torchrun_scripts(tmp_path, repo):
    spec = repo / "examples" / "allreduce-hierarchical.yaml"
    r = _dtgen(spec, "--emit", "slurm", "--rdzv-timeout", "30", "--steps", "7")
    assert r.returncode == 0, r.stderr
    script = tmp_path / "job.sbatch"
    script.write_text(r.stdout)
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    assert "#SBATCH --nodes=2" in r.stdout and "#SBATCH --ntasks-per-node=1" in r.stdout
    srun = [line for line in r.stdout.splitlines() if line.startswith("srun ")]
    assert len(srun) == 1
    for flag in ('--nnodes "$SLURM_NNODES"', '--node-rank "$SLURM_NODEID"', '--rdzv-endpoint "$head:29500"',
                 "--rdzv-timeout 30", "--steps 7"):
        assert flag in srun[0], flag
    r = _dtgen(spec, "--emit", "torchrun", "--rdzv-endpoint", "10.1.2.3:29400")
    assert r.returncode == 0, r.stderr
    script.write_text(r.stdout)
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    lines = [line for line in r.stdout.splitlines() if "torchrun " in line]
    assert len(lines) == 2
    for node, line in enumerate(lines):
        for flag in ("--nnodes=2", "--nproc-per-node=2", f"--node-rank={node}", "--rdzv-backend=c10d",
                     "--rdzv-endpoint=10.1.2.3:29400", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1",
                     "-m opentikz_dt.runner.torchrun_entry"):
            assert flag in line, (flag, line)
    r = _dtgen(repo / "examples" / "central-storage.yaml", "--emit", "slurm", "--nnodes", "2")
    assert r.returncode != 0 and "Traceback" not in r.stderr


@pytest.mark.solo
def test_four_hosts_hierarchical(tmp_path, netcluster):
    cluster = netcluster(4, "100mbit")
    data = small_spec_data("allreduce", name="mh-4", topology={"workers": {"count": 4}, "hosts": 4},
                           strategy={"algorithm": "hierarchical"}, training={"steps": 3})
    spec = write(tmp_path, data)
    outs = finish(launch_all(cluster, spec, tmp_path), timeout=180)
    assert [rc for rc, _ in outs] == [0, 0, 0, 0], said(outs)
    run = json.loads((tmp_path / "h1" / "run.json").read_text())
    assert [r["addr"] for r in run["ranks"]] == [cluster.addr(h) for h in range(1, 5)]
    trace = json.loads((tmp_path / "h1" / "trace.json").read_text())
    phases = {e["args"].get("phase") for e in trace["traceEvents"] if e.get("name") == "allreduce"}
    assert "inter" in phases
    assert_no_processes(cluster)
    # The annotated topology's host boxes carry the addresses measured, not just the spec's count.
    from opentikz_dt.measured.annotate import render_annotated_topology
    from opentikz_dt.measured.run import load_run

    tex = render_annotated_topology(load_run(tmp_path / "h1"))
    for h in range(1, 5):
        assert f"({cluster.addr(h)})" in tex



@pytest.mark.solo
def test_a_mesh_keeps_tensor_groups_inside_hosts_and_data_groups_across(tmp_path, netcluster):
    """Issue 23: 2 hosts x 2 workers as data 2 x tensor 2: each tensor group is one host's
    two ranks (loopback), each data group spans the shaped link, which shows in the
    measured trace: the data dimension's all-reduces move their bytes far slower than the
    tensor dimension's: faster than the link could carry them, so they never crossed it."""
    link = 20e6 / 8 / 1e6  # 20mbit in bytes per microsecond
    cluster = netcluster(2, "20mbit")
    data = small_spec_data("mesh", name="mh-mesh", topology={"workers": {"count": 4}, "hosts": 2},
                           strategy={"parallelism": {"data": 2, "tensor": 2}, "data_parallel": "allreduce"},
                           training={"steps": 3, "model": {"layers": [16, 512, 512, 4]}})
    spec = write(tmp_path, data)
    outs = finish(launch_all(cluster, spec, tmp_path), timeout=180)
    assert [rc for rc, _ in outs] == [0, 0], said(outs)
    run = json.loads((tmp_path / "h1" / "run.json").read_text())
    hosts = {r["rank"]: r["addr"] for r in run["ranks"]}
    assert hosts[0] == hosts[1] != hosts[2] == hosts[3]  # a tensor group per host
    trace = json.loads((tmp_path / "h1" / "trace.json").read_text())
    fastest = {}  # dimension -> the highest bytes per microsecond of any traced collective
    for e in trace["traceEvents"]:
        args = e.get("args") or {}
        if e.get("name") == "allreduce" and args.get("bytes") and e["dur"] > 0:
            fastest[args["dim"]] = max(fastest.get(args["dim"], 0.0), args["bytes"] / e["dur"])
    assert set(fastest) == {"data", "tensor"}, fastest
    # a span holds waits for peers too, so the fastest one is the transfer's best evidence:
    # no data all-reduce beat the link (each rank sends its whole buffer over it once);
    # some tensor all-reduce went faster than the link could have carried it
    data_rate, tensor_rate = fastest["data"], fastest["tensor"]
    assert data_rate < 1.2 * link < 2 * link < tensor_rate, (data_rate, tensor_rate, link)
    assert_no_processes(cluster)
