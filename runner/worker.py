"""What every rank runs: redirect its log, join the process group, align clocks, train.

`rank_main` is the launcher's entrypoint (picklable, module level). On any exception it
records `failure/rank<r>.json` (kind crash | comm | error), flushes its trace and
metrics, and re-raises so the elastic agent tears the run down.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import socket
import sys
import time
import traceback
from pathlib import Path


def _redirect_output(run_dir: Path, rank: int) -> None:
    log = open(run_dir / "logs" / f"rank{rank}.log", "a", buffering=1, encoding="utf-8")
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    sys.stdout = sys.stderr = log
    # A crash in native code (a segfault in a backend) kills the rank with no Python
    # traceback; this writes every thread's Python stack to the log first.
    faulthandler.enable(file=log, all_threads=True)


def rank_main(run_dir: str, launch: dict, launch_env: dict | None = None) -> None:
    from . import forkserver, multinode

    forkserver.adopt_launch_environment(launch_env)  # before anything reads the environment
    run_dir = Path(run_dir)
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    _redirect_output(run_dir, rank)
    if forkserver.forked_from_server():  # its server ignored Ctrl-C (forkserver.ensure_running); a rank takes it
        signal.signal(signal.SIGINT, signal.default_int_handler)
    multinode.die_with_parent()
    forkserver.release_server()
    (run_dir / "failure" / f"rank{rank}.json").unlink(missing_ok=True)  # from an earlier attempt
    print(f"dtgen: rank {rank} attempt {attempt} pid {os.getpid()} host {socket.gethostname()}", flush=True)

    import torch

    torch.set_num_threads(1)
    from ..spec import spec_from_data
    from .dist import placement_for, resolve_backend, setup_process_group, teardown
    from .strategies import load_strategy

    import yaml

    # the data is read from launch.json's dataset_path (this node's); the spec's path is node 0's
    spec = spec_from_data(yaml.safe_load((run_dir / "spec.yaml").read_text(encoding="utf-8")), name="spec.yaml",
                          data_files=False)
    strategy = load_strategy(spec.strategy.kind)
    roles = strategy.roles(spec)
    role, ident = roles[rank]
    metrics = tracer = None
    try:
        backend, kind = resolve_backend(spec)
        os.environ.update(strategy.process_environment(spec, backend))  # before the communicator exists
        _write_rank_info(run_dir, rank, role, ident, placement_for(spec).device_name(local_rank), backend, attempt)
        backend, device, control = setup_process_group(spec, rank, world, local_rank)
        ctx = _build_context(spec, run_dir, launch, rank, world, local_rank, roles, backend, device, control, attempt)
        hosts = multinode.exchange_hosts(run_dir, rank, world, local_rank, launch, control, ctx.tracer.clock)
        tracer, metrics = ctx.tracer, ctx.metrics
        _flush_on_sigterm(tracer, metrics, run_dir / "failure" / f"rank{rank}.json")
        if ctx.start_step:
            ctx.log(f"dtgen: resuming from the checkpoint after step {ctx.start_step - 1}")
        from .sync_audit import audited

        with audited(rank, str(device)):  # DTGEN_SYNC_AUDIT: count the host reads training makes
            strategy.train(ctx)
            ctx.read_losses()  # the last steps' losses (runner/step_losses.py); a nan among them stops the run here
        tracer.flush()
        metrics.write()
        multinode.gather_to_node0(run_dir, rank, world, hosts, control)  # no shared filesystem needed
        import torch.distributed as dist

        dist.barrier(group=control)  # nobody leaves while a peer may still talk to it
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):  # the terminal's Ctrl-C, then the launcher passes it on:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # the second must not cut the flush below short
        from .faults import classify

        kind = classify(exc)
        error = _out_of_memory_line(exc, spec, local_rank) if kind == "oom" else None
        # torch's process wrapper exits 1 on an exception: the launcher reports only the first
        # rank it sees exit, which need not be this one (runner/monitor.py, describe_failure)
        _write_failure(run_dir, rank, role, ident, kind, exc, metrics, error,
                       exit_code=1 if isinstance(exc, Exception) else None)
        print(f"dtgen: rank {rank} ({role} {ident}) failed ({kind}): {error or exc}", flush=True)
        traceback.print_exc()
        for component in (tracer, metrics):
            try:
                if component is not None:
                    component.flush() if component is tracer else component.write()
            except Exception:
                pass
        raise
    finally:
        if tracer is not None:
            tracer.close()
    teardown()


def _flush_on_sigterm(tracer, metrics, report: Path) -> None:
    """When the launcher stops this rank because a peer failed, keep what it recorded (and,
    where this rank had failed too and was on its way out, the exit code it ends with).

    The handler runs once the main thread is back in Python (a rank blocked inside a
    collective gets there when the collective fails); the launcher's SIGKILL after its
    shutdown timeout covers a rank that never does."""

    def handler(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        for flush in (tracer.flush, metrics.write, lambda: _record_exit_code(report, 128 + signum)):
            try:
                flush()
            except Exception:
                pass
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


def _build_context(spec, run_dir, launch, rank, world, local_rank, roles, backend, device, control, attempt):
    import torch
    import torch.distributed as dist

    from . import checkpoint
    from .comm import Comm
    from .context import RankContext
    from .data import Data
    from .metrics import Metrics
    from .trace import Tracer

    role, ident = roles[rank]
    tcfg = spec.runtime.trace
    tracer = Tracer(run_dir / "trace" / f"rank{rank}.jsonl", rank, ident, enabled=bool(tcfg.get("enabled", True)),
                    max_events=int(tcfg.get("max_events", 200_000)), sample_every=int(tcfg.get("sample_every", 1)),
                    world_size=world)
    data = Data(spec, device, launch.get("dataset_path"), launch.get("spec_dir"))
    # Start barrier, then one clock: rank 0 tells everyone its wall clock, its perf counter
    # at that instant and the step to resume from; each rank measures its perf counter's
    # offset to rank 0's by ping-pong (a barrier alone is off by scheduling delays, ms on a
    # busy machine). The run's epoch is node 0's launch time.
    dist.barrier(group=control)
    from .multinode import agreed_checkpoint

    resume = agreed_checkpoint(run_dir, rank, world, control)  # each node reads only its own folder
    info = torch.tensor([time.time_ns(), time.perf_counter_ns(), -1 if resume is None else resume,
                         int(launch["epoch_ns"]), _boot_id()], dtype=torch.int64)
    dist.broadcast(info, 0, group=control)
    offset_ns, rtt_ns = _clock_offset_ns(rank, world, control)
    if rank and _boot_id() and int(info[4]) == _boot_id() and abs(offset_ns) <= rtt_ns // 2:
        # One kernel, one monotonic clock (perf_counter): the ping-pong only adds its own
        # error (up to half a round trip, ms on a busy machine), so ranks of one boot of one
        # machine share rank 0's clock exactly; a shifted clock (a time namespace) is
        # measured and kept.
        offset_ns, rtt_ns = 0, 0
    print(f"dtgen: perf counter offset to rank 0: {offset_ns / 1000:.1f} us "
          f"(+- {rtt_ns / 2000:.1f} us, half the least round trip)", flush=True)
    tracer.set_clock(int(info[1]) + offset_ns, (int(info[0]) - int(info[3])) / 1000)
    tracer.clock = {"offset_us": offset_ns / 1000, "bound_us": rtt_ns / 2000}  # hosts.json, trace metadata
    resume = None if int(info[2]) < 0 else int(info[2])

    def clock() -> float:
        return tracer.now_us() / 1e6

    metrics = Metrics(run_dir, rank, ident, role, clock)
    metrics.on_step = tracer.maybe_flush
    comm = Comm(metrics, control_group=control, device=device,
                stage_through_host=backend == "gloo" and device.type == "cuda")
    start_step = 0
    if resume is not None:
        snap = checkpoint.load(run_dir, resume, rank)
        metrics.restore(snap["metrics"])
        start_step = resume + 1
    return RankContext(spec=spec, run_dir=run_dir, rank=rank, world_size=world, local_rank=local_rank, roles=roles,
                       backend=backend, device=device, control_group=control, tracer=tracer, metrics=metrics,
                       comm=comm, data=data, attempt=attempt, start_step=start_step, resume_step=resume,
                       dataset_path=launch.get("dataset_path"), spec_dir=launch.get("spec_dir"))


def _boot_id() -> int:
    """This machine's boot and host name as an int64 (Linux's boot_id; 0 where there is
    none, then every rank measures its offset). The host name keeps emulated hosts (network
    namespaces of one machine, each its own name) measuring, as real ones would."""
    import hashlib

    try:
        text = Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip()
    except OSError:
        return 0
    return int(hashlib.sha1(f"{text} {socket.gethostname()}".encode()).hexdigest()[:15], 16)


def _clock_offset_ns(rank: int, world: int, group, rounds: int = 8) -> tuple[int, int]:
    """(this rank's perf_counter_ns minus rank 0's, the least round trip) from the
    ping-pong with the least round-trip time (NTP's estimate: the offset is right to
    within half that round trip); (0, 0) on rank 0."""
    import torch
    import torch.distributed as dist

    buf = torch.zeros(1, dtype=torch.int64)
    if rank == 0:
        for peer in range(1, world):
            best = None
            for _ in range(rounds):
                t0 = time.perf_counter_ns()
                dist.send(buf, peer, group=group)
                dist.recv(buf, peer, group=group)
                t1 = time.perf_counter_ns()
                if best is None or t1 - t0 < best[0]:
                    best = (t1 - t0, int(buf[0]) - (t0 + t1) // 2)
            dist.send(torch.tensor([best[1], best[0]], dtype=torch.int64), peer, group=group)
        return 0, 0
    for _ in range(rounds):
        dist.recv(buf, 0, group=group)
        buf[0] = time.perf_counter_ns()
        dist.send(buf, 0, group=group)
    answer = torch.zeros(2, dtype=torch.int64)
    dist.recv(answer, 0, group=group)
    return int(answer[0]), int(answer[1])


def _write_rank_info(run_dir, rank, role, ident, device, backend, attempt) -> None:
    from .metrics import write_json_atomic

    write_json_atomic(run_dir / "ranks" / f"rank{rank}.json", {
        "rank": rank, "role": role, "id": ident, "host": socket.gethostname(), "pid": os.getpid(),
        "device": str(device), "backend": backend, "attempt": attempt})


def _out_of_memory_line(exc, spec, local_rank) -> str:
    from .dist import placement_for
    from .faults import describe_out_of_memory

    device, name = "a GPU", None
    try:
        import torch

        device = placement_for(spec).device_name(local_rank)
        name = torch.cuda.get_device_name(device)  # GPU-only path
    except Exception:
        pass
    return describe_out_of_memory(exc, device, name)


def _write_failure(run_dir, rank, role, ident, kind, exc, metrics, error=None, exit_code=None) -> None:
    """`error`: the one line to show instead of the exception's text (a GPU out of memory);
    `exit_code`: what this rank's process will exit with."""
    try:
        step = metrics.started_step if metrics is not None else -1
        (run_dir / "failure" / f"rank{rank}.json").write_text(json.dumps({
            "rank": rank, "role": role, "id": ident, "kind": kind, "step": step,
            "error": (error or f"{type(exc).__name__}: {exc}")[:2000], "wall": time.time(),
            **({"exit_code": exit_code} if exit_code is not None else {})}), encoding="utf-8")
    except OSError:
        pass


def _record_exit_code(report: Path, code: int) -> None:
    if report.exists():  # this rank had failed and written its report
        report.write_text(json.dumps({**json.loads(report.read_text(encoding="utf-8")), "exit_code": code}),
                          encoding="utf-8")
