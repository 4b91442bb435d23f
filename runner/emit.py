"""`dtgen run --emit slurm|torchrun`: the launch script for a real cluster's own engine,
printed instead of running (torch-free: it only reads the spec).

- slurm: an sbatch script; `srun` starts one `dtgen run` per node (each starts its
  node's ranks), the first node of the allocation is the rendezvous endpoint.
- torchrun: one line per node; torchrun starts the ranks itself and each runs
  `python -m opentikz_dt.runner.torchrun_entry`, which does what `dtgen run` does.

The world size comes from the spec (workers + servers), split evenly over the nodes
(`topology.hosts` unless --nnodes says otherwise), the same checks as a real run.
"""

from __future__ import annotations

import shlex

from ..errors import UsageError

ENV = {"OMP_NUM_THREADS": "1",
       # Restarts fail to reconnect without it (torch's shared rendezvous store, see docs/runner.md).
       "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
DEFAULT_PORT = 29500


def _layout(spec_path, nnodes: int | None):
    from ..spec import load_spec
    from .launch import check_nodes
    from .strategies import load_strategy

    spec = load_spec(spec_path)
    roles = load_strategy(spec.strategy.kind).roles(spec)
    nnodes = nnodes if nnodes and nnodes > 1 else spec.topology.hosts
    check_nodes(spec_path, spec, len(roles), nnodes, 0, "emit:0" if nnodes > 1 else None)
    return spec, len(roles), nnodes


def emit_script(engine: str, spec_path, out=None, steps: int | None = None, nnodes: int = 1,
                rdzv_endpoint: str | None = None, rdzv_timeout: float = 120, force: bool = False,
                repeat: int = 1) -> str:
    if repeat != 1:  # the launched script runs once; saying nothing would drop the option
        raise UsageError(f"--repeat {repeat} cannot combine with --emit {engine}: the emitted script launches one "
                         "run; run the script again for another, then `dtgen compare` the run folders")
    spec, world, nnodes = _layout(spec_path, nnodes)
    nproc = world // nnodes
    extra = []
    if steps is not None:
        extra += ["--steps", str(steps)]
    if engine == "slurm":
        return _slurm(spec, spec_path, out, extra, nnodes, nproc, rdzv_endpoint, rdzv_timeout, force)
    if engine == "torchrun":
        return _torchrun(spec, spec_path, out, extra + (["--force"] if force else []), nnodes, nproc,
                         rdzv_endpoint, rdzv_timeout)
    raise UsageError(f"--emit {engine}: expected slurm or torchrun")


def _gpu(spec) -> bool:
    return spec.runtime.device == "cuda" or spec.runtime.backend == "nccl"


def _slurm(spec, spec_path, out, extra, nnodes, nproc, endpoint, rdzv_timeout, force) -> str:
    port = endpoint.rpartition(":")[2] if endpoint else str(DEFAULT_PORT)
    # The default folder is the job's own (a requeued job may reuse it); a folder the
    # user names is refused when it holds an earlier run, unless they said --force.
    force = force or not out
    out = str(out) if out else f"runs/{spec.name}-$SLURM_JOB_ID"
    # Single quotes for srun's inner command: $SLURM_NODEID differs per node, so each
    # task must expand it itself.
    inner = " ".join(["dtgen", "run", shlex.quote(str(spec_path)), "--out", f'"{out}"', *extra,
                      "--nnodes", '"$SLURM_NNODES"', "--node-rank", '"$SLURM_NODEID"',
                      "--rdzv-endpoint", f'"$head:{port}"', "--rdzv-timeout", f"{rdzv_timeout:g}",
                      *(["--force"] if force else [])])
    lines = ["#!/bin/bash",
             f"#SBATCH --job-name={spec.name}",
             f"#SBATCH --nodes={nnodes}",
             "#SBATCH --ntasks-per-node=1          # one dtgen launcher per node; it starts the node's ranks",
             f"#SBATCH --cpus-per-task={nproc}"]
    if _gpu(spec):
        lines.append(f"#SBATCH --gpus-per-node={nproc}")
    lines += ["set -euo pipefail",
              *(f"export {k}={v}" for k, v in ENV.items()),
              '# The first node of the allocation hosts the rendezvous.',
              'head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
              "export head",
              f"srun --kill-on-bad-exit=1 bash -c {shlex.quote(inner)}",
              "# Each node writes its own run folder; node 0's holds the merged trace, metrics and model.",
              ""]
    return "\n".join(lines)


def _torchrun(spec, spec_path, out, extra, nnodes, nproc, endpoint, rdzv_timeout) -> str:
    endpoint = endpoint or (f"NODE0_ADDRESS:{DEFAULT_PORT}" if nnodes > 1 else "localhost:0")
    # Each launch gets its own folder, as `dtgen run` gives (runs/<name>-<timestamp>), on
    # one node; the nodes of a multi-node launch must agree on it, so there it is fixed and
    # a folder holding an earlier run is refused (torchrun_entry) unless --force.
    stamped = not out and nnodes == 1
    out = str(out) if out else f"runs/{spec.name}"
    env = " ".join(f"{k}={v}" for k, v in ENV.items())
    lines = ["#!/bin/bash",
             f"# {spec.name}: {nnodes} node(s) x {nproc} rank(s); run line i on node i "
             f"(replace NODE0_ADDRESS with node 0's address if shown).",
             "# On multi-homed hosts also set GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME to the cluster interface.",
             "# Each launch writes " + (f"its own folder, {out}-<timestamp>/." if stamped else
                                       f"{out}/ and refuses one holding an earlier run (unless --force)."),
             ]
    for node in range(nnodes):
        argv = ["torchrun", f"--nnodes={nnodes}", f"--nproc-per-node={nproc}", f"--node-rank={node}",
                "--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}", f"--rdzv-id=dtgen-{spec.name}",
                f"--rdzv-conf=join_timeout={int(rdzv_timeout)}", f"--max-restarts={spec.runtime.restarts}",
                "-m", "opentikz_dt.runner.torchrun_entry", str(spec_path), "--out", out, *extra]
        words = [shlex.quote(a) for a in argv]
        if stamped:  # expanded by the shell at launch: one folder per launch
            words[argv.index("--out") + 1] = f'"{shlex.quote(out)}-$(date +%Y%m%d-%H%M%S)"'
        lines.append(f"{env} {' '.join(words)}")
    lines.append("")
    return "\n".join(lines)
