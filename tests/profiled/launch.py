"""Launch a profiled script as torchrun would, without the elastic agent: one process per
rank with RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT set."""

import os
import socket
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(script: str, out: Path, world: int = 2, timeout: float = 120.0, args: tuple = ()) -> None:
    out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    ports = ",".join(str(free_port()) for _ in args)  # together.py: one process group after another
    procs = []
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world),
                   LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   PROFILE_OUT=str(out), PROFILE_PORTS=ports, OMP_NUM_THREADS="1", PYTHONPATH=str(HERE))
        procs.append(subprocess.Popen([sys.executable, str(HERE / script), *args], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    failed = []
    try:
        for rank, proc in enumerate(procs):
            text, _ = proc.communicate(timeout=timeout)
            if proc.returncode:
                failed.append(f"rank {rank} exit {proc.returncode}:\n{text.decode(errors='replace')[-12000:]}")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    if failed:
        raise RuntimeError("\n".join(failed))


if __name__ == "__main__":
    launch(sys.argv[1], Path(sys.argv[2]), args=tuple(sys.argv[3:]))
