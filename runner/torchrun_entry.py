"""One rank under an external launcher (torchrun, or a PyTorchJob's torchrun):
`python -m opentikz_dt.runner.torchrun_entry SPEC --out DIR [--steps N]`.

What `dtgen run` does around its ranks, done by the ranks themselves: each node's
local rank 0 prepares the node's run folder (spec.yaml, launch.json) and the others
wait for it; every rank runs `worker.rank_main` (which gathers all ranks' files to
global rank 0's node); global rank 0 then merges trace.json, metrics.json, model.pt
and run.json there. Failures are torchrun's to report (its exit status and logs).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m opentikz_dt.runner.torchrun_entry")
    parser.add_argument("spec")
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int)
    parser.add_argument("--force", action="store_true",
                        help="reuse a folder holding an earlier run (its run outputs are removed)")
    args = parser.parse_args(argv)
    from ..errors import DtgenError
    from .launch import _finish, _now_iso, node_token, prepare_run_dir, refuse_existing_out, resolve_spec
    from .strategies import load_strategy
    from .worker import rank_main

    rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    node = int(os.environ.get("GROUP_RANK", "0"))
    nnodes = int(os.environ["WORLD_SIZE"]) // int(os.environ["LOCAL_WORLD_SIZE"])
    from .compat import check_torch

    try:
        check_torch()
        spec, data = resolve_spec(args.spec, args.steps)
    except DtgenError as exc:
        print(f"dtgen: error: {exc}", file=sys.stderr)
        return exc.exit_code
    roles = load_strategy(spec.strategy.kind).roles(spec)
    run_dir = Path(args.out)
    launch_path = run_dir / "launch.json"
    agent = os.getppid()  # the node's torchrun agent: the same for all its local ranks
    start = _now_iso()
    if local_rank == 0:
        import yaml

        from .provenance import dataset_file, dataset_record, run_spec_data

        try:
            # A restart of this launch (the same torchrun agent wrote launch.json) reuses
            # its folder; an earlier launch's run is never replaced silently.
            if not args.force and not _this_launch(launch_path, agent):
                refuse_existing_out(run_dir, force=False)
        except DtgenError as exc:
            print(f"dtgen: error: {exc}", file=sys.stderr)
            return exc.exit_code
        prepare_run_dir(spec, run_dir, force=True, node_rank=0)
        spec_dir = str(Path(args.spec).resolve().parent)
        dataset_path = dataset_file(spec, spec_dir)  # read beside the spec, as `dtgen run` does
        (run_dir / "spec.yaml").write_text(yaml.safe_dump(run_spec_data(data, dataset_path), sort_keys=False),
                                           encoding="utf-8")
        launch = {"epoch_ns": time.time_ns(), "dataset_path": dataset_path, "dataset": dataset_record(dataset_path),
                  "spec_dir": spec_dir, "spec_source": args.spec, "node_rank": node,
                  "node_addr": os.environ.get("MASTER_ADDR") if node == 0 else None, "node_token": node_token(),
                  "agent": agent, "host": _host()}
        tmp = launch_path.with_name(".launch.json.tmp")
        tmp.write_text(json.dumps(launch), encoding="utf-8")
        os.replace(tmp, launch_path)
    deadline = time.monotonic() + 120
    while True:
        try:
            launch = json.loads(launch_path.read_text(encoding="utf-8"))
            if launch.get("agent") == agent:
                break
        except (OSError, ValueError):
            pass
        if time.monotonic() > deadline:
            print(f"dtgen: error: {launch_path} was not prepared by local rank 0", file=sys.stderr)
            return 2
        time.sleep(0.1)
    rank_main(str(run_dir.resolve()), launch)
    if rank == 0:
        _finish(run_dir, spec, roles, start, None, 0, nnodes, lambda line: print(line, file=sys.stderr))
    return 0


def _this_launch(launch_path: Path, agent: int) -> bool:
    """Whether launch.json was written under this torchrun agent (a restart of this launch)."""
    try:
        launch = json.loads(launch_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(launch, dict) and launch.get("agent") == agent and launch.get("host") == _host()


def _host() -> str:
    import socket

    return socket.gethostname()


if __name__ == "__main__":
    sys.exit(main())
