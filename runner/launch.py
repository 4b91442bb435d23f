"""`dtgen run` in the parent process: prepare the run directory, launch one process per
rank through torch's elastic launcher, watch progress, and merge what the ranks leave.

`launch_run` is the one function the CLI calls. It returns a RunResult or raises
RunError naming the failed rank, its role and its log.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import yaml

from .. import __version__
from ..errors import EXIT_INTERRUPTED, InputError, RunError, UsageError
from ..spec import load_spec, spec_from_data
from . import forkserver
from .capacity import check_capacity
from .compat import accepted, check_torch
from .devices import device_record
from .dist import placement_for
from .environ import environment
from .leftovers import launch_helpers_reaped, temp_dir_in
from .monitor import STARTUP_LOG, Monitor, describe_failure
from .placement import check_strategy
from .precision import check_compile, check_precision, training_line, training_record
from .preflight import preflight
from .provenance import dataset_file, dataset_record, hardware, run_spec_data
from .multinode import gloo_env, lost_hosts_line, node_token, read_hosts
from .strategies import load_strategy

SUBDIRS = ("logs", "trace", "metrics", "progress", "failure", "ranks", "model_parts", "checkpoints")
OUTPUTS = ("spec.yaml", "run.json", "metrics.json", "model.pt", "trace.json", "launch.json")


@dataclass
class RunResult:
    run_dir: Path
    metrics: dict
    run: dict


def _now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def refuse_existing_out(out: str | Path | None, force: bool, node_rank: int = 0) -> None:
    """A run never writes into a file or, without --force, into a folder holding something."""
    if out is None or node_rank != 0 or not Path(out).exists():
        return
    if not Path(out).is_dir():
        raise InputError(f"{out}: exists and is not a directory")
    if not force and any(Path(out).iterdir()):
        raise InputError(f"{out}: directory exists and is not empty (use --force to overwrite)")


def prepare_run_dir(spec, out: str | Path | None, force: bool, node_rank: int = 0) -> Path:
    if out is None:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        run_dir = Path("runs") / f"{spec.name}-{stamp}"
        n = 1
        while run_dir.exists():
            n += 1
            run_dir = Path("runs") / f"{spec.name}-{stamp}-{n}"
    else:
        run_dir = Path(out)
    if run_dir.exists() and node_rank == 0:  # other nodes share node 0's directory
        refuse_existing_out(run_dir, force, node_rank)
        if any(run_dir.iterdir()):
            # Remove only what a run writes, so `--out . --force` cannot wipe a project.
            for name in SUBDIRS:
                shutil.rmtree(run_dir / name, ignore_errors=True)
            for name in OUTPUTS:
                (run_dir / name).unlink(missing_ok=True)
    for name in SUBDIRS:
        (run_dir / name).mkdir(parents=True, exist_ok=True)
    return run_dir


def resolve_spec(spec_path, steps: int | None, measure_only: bool = False):
    """The spec as the ranks get it. `measure_only` (a calibration run): every step traced, no
    injected fault and no restarts, since such a run measures and does not rehearse failures."""
    spec = load_spec(spec_path)
    data = json.loads(json.dumps(spec.data))
    if steps is not None:
        data["training"]["steps"] = steps
    if measure_only:
        data["runtime"].pop("fault", None)
        data["runtime"]["restarts"] = 0
        data["runtime"]["trace"] = dict(data["runtime"].get("trace") or {}, enabled=True, sample_every=1)
    return spec_from_data(data, name=str(spec_path)), data


def refuse_over_capacity(spec, force: bool) -> None:
    """A spec whose expected memory (opentikz_dt.memory) is over its `hardware:` device's
    capacity is refused before anything is spawned, unless --force."""
    from ..memory import fit_warning

    line = fit_warning(spec)
    if line and not force:
        raise InputError(f"{line}; --force runs it anyway")


def launch_run(spec_path, out=None, steps: int | None = None, nnodes: int = 1, node_rank: int = 0,
               rdzv_endpoint: str | None = None, force: bool = False, echo=None, progress: bool = True,
               rdzv_timeout: float = 120.0, measure_only: bool = False) -> RunResult:
    """Run a spec for real; write the run directory; return its metrics or raise RunError."""
    echo = echo or (lambda line: print(line, file=sys.stderr, flush=True))
    check_torch()  # a torch outside the supported range: one line, before anything is read or spawned
    spec, data = resolve_spec(spec_path, steps, measure_only)
    roles = load_strategy(spec.strategy.kind).roles(spec)
    world = len(roles)
    check_nodes(spec_path, spec, world, nnodes, node_rank, rdzv_endpoint)
    refuse_existing_out(out, force, node_rank)  # before the placement line and the trial forward pass
    spec_dir = str(Path(spec_path).resolve().parent)
    dataset_path = dataset_file(spec, spec_dir)
    placement = placement_for(spec, world // nnodes)
    cost = check_strategy(placement, spec)  # said in the run's first line
    check_precision(spec, placement)
    check_compile(spec, placement)
    refuse_over_capacity(load_spec(spec_path), force)  # the file as written: its lines locate the message
    # Before anything is spawned or written: one trial forward pass (runner/preflight.py).
    model_info = preflight(load_spec(spec_path), spec_dir, dataset_path, roles)
    for line in check_capacity(world // nnodes, model_info):  # oversubscribed cores or memory: said, not refused
        echo(f"dtgen: warning: {line}")
    nodes = None
    if nnodes > 1:
        from .multinode import NodeGroup

        nodes = NodeGroup(rdzv_endpoint, nnodes, node_rank, data, f"{spec.name}", rdzv_timeout)
    try:
        return _launch_prepared(spec_path, spec, data, roles, out, force, nnodes, node_rank, rdzv_endpoint,
                                rdzv_timeout, nodes, echo, progress, spec_dir, dataset_path, model_info, placement, cost)
    finally:
        if nodes is not None:
            nodes.stop()


def _launch_prepared(spec_path, spec, data, roles, out, force, nnodes, node_rank, rdzv_endpoint, rdzv_timeout,
                     nodes, echo, progress, spec_dir, dataset_path, model_info, placement, cost=None) -> RunResult:
    world = len(roles)
    run_dir = prepare_run_dir(spec, out, force, node_rank)
    echo(f"dtgen run: {placement.reason}{f'; {cost}' if cost else ''}; {training_line(spec, placement)}")  # the first line of a run that starts
    # the dataset by absolute path: the run directory's spec must not be read against the run directory
    (run_dir / "spec.yaml").write_text(yaml.safe_dump(run_spec_data(data, dataset_path), sort_keys=False,
                                                      allow_unicode=True), encoding="utf-8")
    epoch_ns = time.time_ns()
    launch = {"epoch_ns": epoch_ns, "dataset_path": dataset_path, "dataset": dataset_record(dataset_path),
              "spec_source": str(spec_path),
              "spec_dir": spec_dir, "node_rank": node_rank, "node_addr": nodes.addr if nodes else None,
              "node_token": node_token(), "rdzv_host": bool(nodes and nodes.hosts_store)}
    (run_dir / "launch.json").write_text(json.dumps(launch), encoding="utf-8")
    start = _now_iso()
    monitor = Monitor(run_dir, spec, roles, echo=echo if progress else None)
    failure = None
    env = {"OMP_NUM_THREADS": "1", **rendezvous_store_env(spec.runtime.restarts, nnodes)}
    if nodes is not None:
        nodes.start_heartbeat(spec.runtime.timeout_s + CUT_OFF_GRACE_S,
                              lambda silent: _cut_off(run_dir, nodes, silent, echo))
        env.update(gloo_env(nodes.addr))
    with launch_helpers_reaped():  # nothing outlives `dtgen run`, however it ends
        try:
            method = forkserver.start_method(placement.device)
            socket_base = tempfile.gettempdir()  # the fork server's socket is no file of the run's
            with environment(**env), temp_dir_in(run_dir):
                if method == "forkserver":  # a server started here imports torch in the run's logs/tmp
                    forkserver.ensure_running(socket_base, output=run_dir / "logs" / STARTUP_LOG)
                _elastic(spec, run_dir, launch, world // nnodes, nnodes, node_rank, rdzv_endpoint, monitor,
                         rdzv_timeout, method)
        except _Failed as exc:
            failure = describe_failure(run_dir, roles, exc.failures, monitor)
        except KeyboardInterrupt:
            monitor.stop()
            failure = {"rank": None, "role": None, "id": None, "exit_code": EXIT_INTERRUPTED, "log": None,
                       "message": "interrupted: every rank was stopped"}
        finally:
            monitor.stop()
            startup = run_dir / "logs" / STARTUP_LOG
            if startup.is_file() and not startup.stat().st_size:
                startup.unlink()  # kept only where a rank wrote to it before its own log opened
    if failure is not None and nodes is not None:
        lost = lost_hosts_line(nodes, run_dir)
        if lost:
            failure["message"] = f"{lost}\n{failure['message']}"
            failure["lost"] = lost
    return _finish(run_dir, spec, roles, start, failure, node_rank, nnodes, echo, model_info)


CUT_OFF_GRACE_S = 15


def _cut_off(run_dir, nodes, silent: float, echo) -> None:
    """This node lost the rendezvous store (its link, or node 0, is gone): stop its ranks
    and leave, keeping the partial trace in its folder. Called from the heartbeat thread
    while torch's agent may be blocked on the store."""
    import signal

    for p in (Path(run_dir) / "ranks").glob("rank*.json"):
        try:
            os.kill(int(json.loads(p.read_text(encoding="utf-8"))["pid"]), signal.SIGKILL)
        except (OSError, ValueError, KeyError):
            pass
    echo(f"dtgen: error: node {nodes.node_rank} ({nodes.addr}) lost contact with node 0 at {nodes.endpoint} "
         f"for {silent:.0f} s (link down or node 0 gone); its ranks were stopped\n"
         f"run directory: {run_dir} (partial trace kept)")
    os._exit(3)


def check_nodes(spec_path, spec, world: int, nnodes: int, node_rank: int, endpoint) -> None:
    """Refuse node layouts that cannot work, before anything is written or started."""
    if node_rank >= nnodes:
        raise UsageError(f"--node-rank {node_rank} must be below --nnodes {nnodes} (nodes are numbered 0..{nnodes - 1})")
    if nnodes == 1:
        return
    if not endpoint:
        raise UsageError("--nnodes > 1 needs --rdzv-endpoint HOST:PORT (the same on every node)")
    hosts = spec.topology.hosts
    if hosts != nnodes:
        raise InputError(f"{spec_path}: topology.hosts: {hosts}, but --nnodes {nnodes}: one node per host "
                       "(hierarchical groups and the topology figure follow topology.hosts)")
    load_strategy(spec.strategy.kind).check_nodes(spec, spec_path, nnodes)  # one that cannot span hosts
    if world % nnodes:
        raise InputError(f"{spec_path}: topology.hosts: {hosts} hosts do not divide the {world} ranks "
                       f"(workers + servers); every host runs the same number of ranks")


class _Failed(Exception):
    def __init__(self, failures: dict):
        self.failures = failures  # global rank -> exit code


def rendezvous_store_env(restarts: int, nnodes: int) -> dict:
    """Where the ranks' process group finds its store. By default the launcher shares its
    own rendezvous store with the ranks: a server it has already bound, so no other process
    can take the port first. torch's other way, picking a free port and leaving rank 0 to
    bind it once it has started and imported torch, loses that port now and then to another
    process on a busy machine (EADDRINUSE). Restarts need the other way (with the shared
    store every restart fails with "Gloo connectFullMesh failed ... Connection refused"), and
    an elastic restart picks a new port anyway. Several hosts keep it too, as the scripts
    `dtgen run --emit` writes do (runner/emit.py) and the emulated-cluster tests run."""
    return {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1" if restarts > 0 or nnodes > 1 else "0"}


def _elastic(spec, run_dir, launch, nproc, nnodes, node_rank, endpoint, monitor, rdzv_timeout=120.0,
             method="spawn") -> None:
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    from .worker import rank_main

    config = LaunchConfig(
        min_nodes=nnodes, max_nodes=nnodes, nproc_per_node=nproc,
        run_id=f"dtgen-{spec.name}-{launch['epoch_ns']}" if nnodes == 1 else f"dtgen-{spec.name}",
        rdzv_backend="c10d", rdzv_endpoint=endpoint or "localhost:0",
        max_restarts=spec.runtime.restarts, monitor_interval=0.2, start_method=method,
        local_addr=launch["node_addr"] if nnodes > 1 else None,
        # is_host given, so torch does not resolve this host's name (small clusters often cannot)
        rdzv_configs={"join_timeout": int(rdzv_timeout), "is_host": launch["rdzv_host"]} if nnodes > 1 else {},
        logs_specs=DefaultLogsSpecs(log_dir=str(run_dir / "logs" / "elastic"), redirects=Std.NONE),
        # newer than torch 2.10 (not in 2.11): where it exists, ranks that ignore SIGTERM are
        # killed after 3 s instead of the agent's default 30
        **accepted(LaunchConfig, shutdown_timeout=3),
    )
    monitor.start()
    # The launcher logs every failure and signal at length; dtgen reports them itself. Its
    # module loggers each set their own level, so only a global switch silences them.
    level = logging.root.manager.disable
    logging.disable(logging.ERROR)
    handlers = _signal_handlers()
    try:
        elastic_launch(config, rank_main)(str(run_dir.resolve()), launch, dict(os.environ))
    except ChildFailedError as exc:
        raise _Failed({int(r): f.exitcode for r, f in exc.failures.items()}) from None
    except SignalException as exc:  # Ctrl-C / SIGTERM: the agent has already stopped the ranks
        raise KeyboardInterrupt(str(exc)) from None
    finally:
        logging.disable(level)
        _restore_signal_handlers(handlers)


# The signals torchelastic takes over while its ranks run (its TORCHELASTIC_SIGNALS_TO_HANDLE
# default). It never gives them back: a process that goes on after launch_run (a script, a
# notebook, a test session) would answer every later Ctrl-C with torchelastic's
# SignalException instead of its own handler, so the launch puts them back itself.
ELASTIC_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")


def _signal_handlers() -> dict:
    """The process's Python handlers of ELASTIC_SIGNALS; only the main thread can set any."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    found = {getattr(signal, name): signal.getsignal(getattr(signal, name))
             for name in ELASTIC_SIGNALS if hasattr(signal, name)}
    return {sig: handler for sig, handler in found.items() if handler is not None}  # None: not set from Python


def _restore_signal_handlers(handlers: dict) -> None:
    for sig, handler in handlers.items():
        signal.signal(sig, handler)


def _finish(run_dir, spec, roles, start, failure, node_rank, nnodes, echo, model_info=None) -> RunResult:
    import torch

    # Every rank's files reach node 0 (multinode.gather_to_node0), so node 0 merges;
    # c10d (as torchrun) may give global rank 0 to another node.
    if nnodes > 1 and node_rank != 0:
        if failure is not None:
            raise RunError(f"{failure['message']}\nrun directory: {run_dir}")
        echo(f"node {node_rank} done; node 0 merges the results into its run directory")
        return RunResult(run_dir, {}, {})

    from .merge import merge_metrics, merge_model, merge_trace
    from .summary import render_summary

    ended_early = failure is not None
    hosts = {e["rank"]: e for e in read_hosts(run_dir)}
    # Each rank's clock offset to rank 0 and its bound (half the least ping-pong round trip).
    clock = {str(r): e["clock"] for r, e in sorted(hosts.items()) if e.get("clock")}
    trace_info = merge_trace(run_dir, roles, {"spec": spec.name, "strategy": spec.strategy.kind,
                                               "sync": spec.strategy.sync, "algorithm": spec.strategy.algorithm,
                                               "ended_early": ended_early, **({"clock": clock} if clock else {})})
    metrics = merge_metrics(run_dir, roles, spec.training.steps)
    if not ended_early:
        try:
            merge_model(run_dir, (model_info or {}).get("param_tensors") or spec.training.param_tensors,
                        (model_info or {}).get("aliases"))
        except ValueError as exc:
            failure = {"rank": None, "role": None, "id": None, "exit_code": None, "log": None, "message": str(exc)}
    if failure is None and spec.data.get("training", {}).get("eval"):
        from .evaluate import evaluate

        metrics["eval"] = evaluate(run_dir, spec)
        (run_dir / "metrics.json").write_text(json.dumps(metrics, indent=1), encoding="utf-8")
    ranks = []
    for rank, (role, ident) in enumerate(roles):
        info = {}
        try:
            info = json.loads((run_dir / "ranks" / f"rank{rank}.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            pass
        status = 0 if failure is None else (failure.get("exit_codes", {}).get(rank, "terminated"))
        where = hosts.get(rank, {})
        ranks.append({"rank": rank, "role": role, "id": ident, "host": info.get("host"), "addr": where.get("addr"),
                      "node_rank": where.get("node_rank"), "pid": info.get("pid"),
                      "device": info.get("device"), "backend": info.get("backend"), "exit_status": status})
    run = {"dtgen": __version__, "torch": torch.__version__, "backend": ranks[0]["backend"],
           "device": ranks[0]["device"], "world_size": len(roles), "start": start, "end": _now_iso(),
           "status": "ok" if failure is None else "interrupted" if failure.get("exit_code") == EXIT_INTERRUPTED else "failed", "attempts": _attempts(run_dir),
           "failure": None if failure is None else {k: failure.get(k) for k in ("rank", "role", "id", "exit_code", "log", "message")},
           "ranks": ranks, "node": socket.gethostname(), "node_rank": node_rank, "trace": trace_info,
           "model": {k: v for k, v in (model_info or {}).items() if k != "param_tensors"},
           "training": training_record(spec, ranks[0]["device"] or "cpu")}
    run.update(_provenance(run_dir, [r for r in ranks if r["node_rank"] in (None, node_rank)]))  # this node's
    run["device_info"] = device_record(ranks, run["hardware"])  # what predictions fitted from this run measured on
    (run_dir / "run.json").write_text(json.dumps(run, indent=1), encoding="utf-8")
    if failure is not None:
        error = RunError(f"{failure['message']}\nrun directory: {run_dir} (partial trace kept)")
        error.lost = failure.get("lost")
        if failure.get("exit_code") == EXIT_INTERRUPTED:
            error.exit_code = EXIT_INTERRUPTED  # interrupted, as the CLI's own Ctrl-C handling
        raise error
    echo(render_summary(spec, roles, metrics, run, run_dir))
    return RunResult(run_dir, metrics, run)


def _provenance(run_dir, ranks: list) -> dict:
    """run.json's `hardware` (this node's CPU, cores, the GPUs its `ranks` used) and `dataset` (the file
    read, its size and SHA-256; launch.json has it from before the ranks started)."""
    try:
        launch = json.loads((Path(run_dir) / "launch.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        launch = {}
    out = {"hardware": hardware(ranks)}
    if launch.get("dataset"):
        out["dataset"] = launch["dataset"]
    return out


def _attempts(run_dir) -> int:
    attempts = set()
    for p in (Path(run_dir) / "ranks").glob("rank*.json"):
        try:
            attempts.add(json.loads(p.read_text(encoding="utf-8"))["attempt"])
        except (OSError, ValueError, KeyError):
            pass
    return max(attempts, default=0) + 1
