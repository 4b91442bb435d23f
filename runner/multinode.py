"""Several hosts, one run, no shared filesystem.

Launcher side (`NodeGroup`, one per `dtgen run` process):
- node 0 hosts a TCP store at `--rdzv-endpoint` before torch's c10d rendezvous starts
  (the rendezvous then shares it: c10d falls back to a client, or reuses the server in
  the same process); every node connects within `--rdzv-timeout` or stops with one
  line saying the endpoint did not answer;
- each node puts the hash of its resolved spec there and refuses to start when any
  node's differs (different specs would deadlock or silently train different models);
- each node bumps a heartbeat counter every second: when a run fails, node 0 names the
  hosts whose counter stopped (killed launcher, cut link) and their ranks.

Rank side (called from worker.py):
- `exchange_hosts`: every rank learns every rank's node, address and hostname
  (`hosts.json` in every node's run folder; run.json and the topology read it);
- `agreed_checkpoint`: the last step every rank checkpointed, each rank looking only in
  its own node's folder;
- `gather_to_node0`: at the end, every rank sends its trace, metrics, log, model part
  and rank info over the control group to the first rank of node 0, which writes what
  its folder lacks, so node 0's merged trace.json/metrics.json/model.pt are complete.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import socket
import struct
import threading
import time
from datetime import timedelta
from pathlib import Path

from ..errors import InputError, RunError, UsageError

HEARTBEAT_S = 1.0
GATHERED = ("trace/rank{r}.jsonl", "metrics/rank{r}.json", "logs/rank{r}.log", "model_parts/rank{r}.pt",
            "ranks/rank{r}.json")


def parse_endpoint(endpoint: str) -> tuple[str, int]:
    host, sep, port = endpoint.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"--rdzv-endpoint {endpoint!r}: expected HOST:PORT")
    return host.strip("[]"), int(port)


def local_address(endpoint: str) -> str:
    """This machine's address on the route to the rendezvous endpoint (no packet is sent)."""
    host, port = parse_endpoint(endpoint)
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((host, port))
            return s.getsockname()[0]
    except OSError as exc:
        raise RunError(f"--rdzv-endpoint {endpoint}: no route to {host} ({exc.strerror or exc})") from None


def interface_of(addr: str) -> str | None:
    """The network interface holding IPv4 `addr` (Linux), so gloo binds to it rather than
    to whatever the hostname resolves to (often loopback on small clusters)."""
    SIOCGIFADDR = 0x8915
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            try:
                req = struct.pack("256s", name.encode()[:15])
                got = socket.inet_ntoa(fcntl.ioctl(s.fileno(), SIOCGIFADDR, req)[20:24])
            except OSError:
                continue
            if got == addr:
                return name
    return None


def gloo_env(addr: str) -> dict:
    """GLOO_SOCKET_IFNAME for the interface holding `addr`, unless the user set it."""
    if os.environ.get("GLOO_SOCKET_IFNAME"):
        return {}
    iface = interface_of(addr)
    return {"GLOO_SOCKET_IFNAME": iface} if iface else {}


def spec_hash(spec_data: dict) -> str:
    return hashlib.sha256(json.dumps(spec_data, sort_keys=True).encode()).hexdigest()[:16]


class NodeGroup:
    """The launchers of one multi-node run, met at the rendezvous endpoint's store."""

    def __init__(self, endpoint: str, nnodes: int, node_rank: int, spec_data: dict, run_id: str,
                 rdzv_timeout: float):
        from torch.distributed import TCPStore

        self.nnodes, self.node_rank, self.endpoint = nnodes, node_rank, endpoint
        self.addr = local_address(endpoint)
        host, port = parse_endpoint(endpoint)
        self.prefix = f"dtgen/{run_id}"
        timeout = timedelta(seconds=rdzv_timeout)
        self.store, self.hosts_store = None, False
        if node_rank == 0:
            try:  # multi_tenant: torch's rendezvous in this process reuses this server
                self.store = TCPStore(host, port, is_master=True, multi_tenant=True, timeout=timeout,
                                      wait_for_workers=False)
                self.hosts_store = True
            except (RuntimeError, ValueError, OSError):
                self.store = None  # not this machine's address, or already served: join as a client
        if self.store is None:
            started = time.monotonic()
            try:
                self.store = TCPStore(host, port, is_master=False, timeout=timeout, wait_for_workers=False)
            except (RuntimeError, TimeoutError, ValueError, OSError) as exc:
                raise RunError(f"rendezvous endpoint {endpoint} did not answer within {rdzv_timeout:g} s "
                               f"(--rdzv-timeout; node {node_rank} at {self.addr}): is node 0 started and "
                               f"reachable? ({str(exc).splitlines()[0][:120]})") from None
            if time.monotonic() - started > rdzv_timeout + 5:
                raise RunError(f"rendezvous endpoint {endpoint} did not answer within {rdzv_timeout:g} s")
        self.timeout_s = rdzv_timeout
        self._stop = threading.Event()
        self._thread = None
        self._check_specs(spec_hash(spec_data))

    def _key(self, *parts) -> str:
        return "/".join((self.prefix, *map(str, parts)))

    def _check_specs(self, mine: str) -> None:
        self.store.set(self._key("spec", self.node_rank), mine)
        self.store.set(self._key("addr", self.node_rank), self.addr)
        keys = [self._key("spec", r) for r in range(self.nnodes)]
        try:
            self.store.wait(keys, timedelta(seconds=self.timeout_s))
        except Exception:
            missing = [r for r, k in enumerate(keys) if not self.store.check([k])]
            raise RunError(f"rendezvous at {self.endpoint}: node(s) {', '.join(map(str, missing))} of "
                           f"{self.nnodes} did not join within {self.timeout_s:g} s (--rdzv-timeout)") from None
        hashes = {r: self.store.get(k).decode() for r, k in enumerate(keys)}
        differ = [r for r, h in hashes.items() if h != hashes[0]]
        self.store.set(self._key("checked", self.node_rank), "1")
        if differ and self.hosts_store:
            # Serve the store until every node has read the hashes, so each can say why it stops.
            try:
                self.store.wait([self._key("checked", r) for r in range(self.nnodes)], timedelta(seconds=10))
            except Exception:
                pass
        if differ:
            addrs = {r: self._get(self._key("addr", r)) for r in differ}
            where = ", ".join(f"node {r} ({addrs[r]})" for r in differ)
            raise InputError(f"spec differs between nodes: {where} resolved a spec with hash {hashes[differ[0]]}, "
                           f"node 0 {hashes[0]}; run the same spec (and --steps) on every node")

    def _get(self, key: str, default: str = "?") -> str:
        try:
            return self.store.get(key).decode() if self.store.check([key]) else default
        except Exception:
            return default

    # --- heartbeats --------------------------------------------------------------------
    def start_heartbeat(self, cut_off_s: float | None = None, on_cut_off=None) -> None:
        """Bump this node's counter every second on a client of its own (short timeout).
        A node that cannot reach the store for `cut_off_s` (its link is down, or node 0
        is gone) calls `on_cut_off(seconds)`: torch's agent would wait on the store far
        longer."""
        from torch.distributed import TCPStore

        host, port = parse_endpoint(self.endpoint)
        client = TCPStore(host, port, is_master=False, timeout=timedelta(seconds=5), wait_for_workers=False)
        key = self._key("alive", self.node_rank)

        last_ok = [time.monotonic()]

        def beat():
            while not self._stop.wait(HEARTBEAT_S):
                try:
                    client.add(key, 1)
                    last_ok[0] = time.monotonic()
                except Exception:
                    pass

        def watch():
            # A separate thread: on a cut link a store call can block in TCP retransmits
            # for many minutes, whatever the store's timeout says (measured: 15 min).
            while not self._stop.wait(HEARTBEAT_S):
                silent = time.monotonic() - last_ok[0]
                if cut_off_s is not None and on_cut_off is not None and silent > cut_off_s:
                    on_cut_off(silent)
                    return

        threading.Thread(target=watch, name="dtgen-cut-off", daemon=True).start()
        client.add(key, 1)
        self._thread = threading.Thread(target=beat, name="dtgen-heartbeat", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def silent_nodes(self, wait_s: float = 3 * HEARTBEAT_S) -> list[int]:
        """Nodes whose heartbeat did not advance over `wait_s` (called on node 0 after a failure)."""
        try:
            first = {r: self.store.add(self._key("alive", r), 0) for r in range(self.nnodes) if r != self.node_rank}
            time.sleep(wait_s)
            return [r for r in first if self.store.add(self._key("alive", r), 0) == first[r]]
        except Exception:
            return []

    def node_addr(self, r: int) -> str:
        return self._get(self._key("addr", r))


def lost_hosts_line(group: NodeGroup, run_dir: Path) -> str | None:
    """'lost host 2 (198.18.0.12, ranks 2, 3): its launcher stopped answering' or None."""
    silent = group.silent_nodes()
    if not silent:
        return None
    table = read_hosts(run_dir)
    parts = []
    for node in silent:
        ranks = [e["rank"] for e in table if e.get("node_rank") == node]
        rank_text = f", ranks {', '.join(map(str, ranks))}" if ranks else ""
        parts.append(f"node {node} ({group.node_addr(node)}{rank_text})")
    return f"lost host: {'; '.join(parts)} stopped answering (launcher killed, host down or link cut)"


# --- rank side ---------------------------------------------------------------------------

def die_with_parent() -> None:
    """Have the kernel SIGKILL this rank when its launcher dies (a SIGKILLed launcher
    cannot stop its ranks itself). Linux only; elsewhere a no-op."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, 9)
        if os.getppid() == 1:  # the launcher died before prctl took effect
            os._exit(137)
    except (OSError, AttributeError):
        pass


def exchange_hosts(run_dir: Path, rank: int, world: int, local_rank: int, launch: dict, group,
                   clock: dict | None = None) -> list[dict]:
    """Every rank's node, address, hostname, pid and clock offset to rank 0 (with its
    bound), known to every rank; written to hosts.json in each node's folder (by its
    first local rank)."""
    import torch.distributed as dist

    mine = {"rank": rank, "node_rank": launch.get("node_rank", 0), "addr": launch.get("node_addr"),
            "hostname": socket.gethostname(), "pid": os.getpid(), "node_token": launch.get("node_token"), "clock": clock}
    table = [None] * world
    dist.all_gather_object(table, mine, group=group)
    if local_rank == 0:
        path = Path(run_dir) / "hosts.json"
        tmp = path.with_name(f".hosts.{rank}.tmp")
        tmp.write_text(json.dumps(table, indent=1), encoding="utf-8")
        os.replace(tmp, path)
    return table


def read_hosts(run_dir: Path) -> list[dict]:
    try:
        return json.loads((Path(run_dir) / "hosts.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []


def agreed_checkpoint(run_dir: Path, rank: int, world: int, group) -> int | None:
    """The last step that every rank has a checkpoint for, each rank reading its own
    node's folder (there may be no shared filesystem)."""
    import torch.distributed as dist

    root = Path(run_dir) / "checkpoints"
    mine = sorted(int(p.parent.name[4:]) for p in root.glob(f"step*/rank{rank}.pt") if p.parent.name[4:].isdigit())
    everyone = [None] * world
    dist.all_gather_object(everyone, mine, group=group)
    common = set(everyone[0]).intersection(*map(set, everyone[1:]))
    return max(common, default=None)


def gather_to_node0(run_dir: Path, rank: int, world: int, table: list[dict], group) -> None:
    """Send this rank's files to the first rank of node 0, which writes those its folder
    lacks (none, on a shared filesystem). Called by every rank after it flushed."""
    import torch.distributed as dist

    dst = min((e["rank"] for e in table if e["node_rank"] == 0), default=0)
    run_dir = Path(run_dir)
    mine = {}
    for pattern in GATHERED:
        rel = pattern.format(r=rank)
        try:
            mine[rel] = (run_dir / rel).read_bytes()
        except OSError:
            pass
    out = [None] * world if rank == dst else None
    dist.gather_object(mine, out, dst=dst, group=group)
    if rank != dst:
        return
    my_token = table[rank].get("node_token")
    for r, files in enumerate(out):
        if table[r].get("node_token") == my_token:
            continue  # same node: already here
        for rel, data in (files or {}).items():
            path = run_dir / rel
            if path.exists():
                continue  # shared filesystem: the rank wrote it here itself
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.gathered")
            tmp.write_bytes(data)
            os.replace(tmp, path)


def node_token() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{time.time_ns()}"
