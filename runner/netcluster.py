"""Python handle on scripts/netcluster.sh: an emulated cluster of network namespaces
with shaped links, for the multi-host tests and benchmarks (torch-free).

    with NetCluster(hosts=2, link="200mbit") as cluster:
        p = cluster.popen(1, ["dtgen", "run", ...])   # a process on host 1
        cluster.addr(1)                                # "198.18.0.11"
        cluster.link(2, "down")                        # cut host 2 off

Leaving the block kills everything that runs in the cluster's namespaces and deletes
them, also when the block raised. Each cluster gets its own name prefix, so parallel
runs (and other users of the machine) never touch each other's namespaces.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "netcluster.sh"


def unavailable_reason() -> str | None:
    """Why no cluster can be made here (None when one can)."""
    if not SCRIPT.is_file():
        return f"{SCRIPT.name} not found (run from a source checkout)"
    if os.geteuid() != 0:
        return "emulated cluster needs root (ip netns, tc)"
    for tool in ("ip", "tc", "unshare"):
        if shutil.which(tool) is None:
            return f"emulated cluster needs '{tool}' (iproute2 / util-linux)"
    return None


def namespaces(prefix: str = "") -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return sorted(line.split()[0] for line in out.splitlines() if line.split() and line.startswith(prefix))


class NetCluster:
    def __init__(self, hosts: int, link: str = "200mbit", name: str | None = None):
        self.hosts, self.link = hosts, link
        self.name = name or f"dtc{uuid.uuid4().hex[:8]}"
        self.procs: list[subprocess.Popen] = []

    def _script(self, *args, check=True, **kw):
        return subprocess.run(["bash", str(SCRIPT), *args], check=check, capture_output=True, text=True, **kw)

    def up(self) -> "NetCluster":
        r = self._script("up", "--name", self.name, "--hosts", str(self.hosts), "--link", self.link, check=False)
        if r.returncode:
            raise RuntimeError(r.stderr.strip())
        return self

    def down(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
        self._script("down", "--name", self.name, check=False)
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass

    def __enter__(self):
        return self.up()

    def __exit__(self, *exc):
        self.down()
        return False

    @staticmethod
    def addr(host: int) -> str:
        return f"198.18.0.{10 + host}"

    def namespace(self, host: int) -> str:
        return f"{self.name}-h{host}"

    def command(self, host: int, argv: list[str]) -> list[str]:
        return ["bash", str(SCRIPT), "exec", "--name", self.name, str(host), *argv]

    def popen(self, host: int, argv: list[str], **kw) -> subprocess.Popen:
        p = subprocess.Popen(self.command(host, argv), **kw)
        self.procs.append(p)
        return p

    def run(self, host: int, argv: list[str], **kw) -> subprocess.CompletedProcess:
        return subprocess.run(self.command(host, argv), **kw)

    def link_state(self, host: int, state: str) -> None:
        self._script("link", "--name", self.name, str(host), state)

    def pids(self, host: int) -> list[int]:
        out = subprocess.run(["ip", "netns", "pids", self.namespace(host)], capture_output=True, text=True).stdout
        return [int(p) for p in out.split()]
