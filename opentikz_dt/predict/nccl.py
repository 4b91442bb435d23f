"""Collective costs as NCCL models them: ring, tree and hierarchical all-reduce on a datasheet.

A collective over `n` ranks spread over `nodes` hosts (`ppn = n / nodes` ranks in each)
costs latency + bytes / bandwidth, with the latency and the bandwidth factors NCCL's own
tuner predicts them with (NCCL_TUNING, src/graph/tuning.cc, the A100-era NCCL 2.8 model),
Simple protocol (the one large messages take):

- ring (all-reduce 2(n-1) steps, all-gather, reduce-scatter and broadcast n-1): a base latency of
  8.4 µs plus one hop latency per step, 3.4 µs on NVLink, 5.7 µs on PCIe, 9.6 µs per step
  that crosses the network; a multi-node ring all-reduce of a large message takes 1.9x
  that latency ("plateau effect of ring"). Bytes move at the bus bandwidth times
  2(n-1)/n (all-reduce), (n-1)/n (all-gather, reduce-scatter) or 1 (broadcast).
- tree (all-reduce only; NCCL's double binary tree across hosts, a chain inside one):
  latency 2·((ppn-1)·28 µs + log2(nodes)·50 µs) (a 256 kB chunk per hop, NVLink, network);
  bus bandwidth 0.9 of the ring's, at most 80 GB/s across more than two hosts (110 GB/s
  within two), and an all-reduce moves 2·bytes over it.
- NCCL's choice ("native", what torch.distributed's NCCL backend runs): the faster of the two.
- hierarchical (dtgen's algorithm, strategies/allreduce.py): an intra-host reduce-scatter
  over NVLink, an inter-host ring all-reduce of each rank's 1/ppn share over its own NIC
  port (ppn rings side by side, one rank a host each), an intra-host all-gather: the three
  ring costs in sequence.

The bus bandwidth is NVLink's inside one host. Across hosts it is NCCL's busBw =
nChannels x speedInter: the topology search lays one channel through each network port
the group's ranks on a host reach, so a group with ppn ranks on each host, each GPU on
its own port (the presets' NIC), moves ppn ports' worth, no more than its NVLink hops
inside the host carry (network_bus). NCCL's engineers answer measurements the same way
(github.com/NVIDIA/nccl-tests issues): 12.2 GB/s all-reduce bus bandwidth is the most one
100 Gb/s card gives, a DGX-1 reaches 48 GB/s with its four (issue 29); an 8-GPU host with
four HDR ports peaks at their 100 GB/s (issue 175); NDR gives 46-48 GB/s per port (issue 290).

NCCL's model caps the bus bandwidth of compute capability 8.0 GPUs (A100) at 235 GB/s:
NVLINK_BUS_CAP. Must not import torch.
"""

from __future__ import annotations

import math

NCCL_TUNING = ("https://github.com/NVIDIA/nccl/blob/01afd20a77b5804e0ecf1042509dd9d20ebf9e93/"
               "src/graph/tuning.cc")
US = 1e-6
RING_BASE_S = 8.4 * US                                               # baseLat[Ring][Simple]
RING_HOP_S = {"nvlink": 3.4 * US, "pci": 5.7 * US, "net": 9.6 * US}  # hwLat[*][Ring][Simple]
TREE_HOP_S = {"nvlink": 28 * US, "pci": 28 * US, "net": 50 * US}     # hwLat[*][Tree][Simple]
RING_PLATEAU = 1.9      # a multi-node ring all-reduce of at least PLATEAU_BYTES x n / 16
PLATEAU_BYTES = 65536
TREE_BUS_FACTOR = 0.9   # busBw * .9 for a tree
TREE_MAX_BUS = {"few": 110e9, "many": 80e9}  # at most 2 nodes, more than 2 (bytes/s)
NVLINK_BUS_CAP = {"a100-sxm-80gb": 235e9}    # compCap80: busBw = min(busBw, 235 GB/s)
ALGORITHMS = ("native", "ring", "tree", "hierarchical")


def link_kind(link_name: str) -> str:
    """nvlink, pci or net: which of NCCL's hop latencies a link preset takes."""
    if link_name.startswith("nvlink"):
        return "nvlink"
    return "pci" if link_name.startswith("pcie") else "net"


def network_bus(n: int, nodes: int, intra_bw: float, inter_bw: float) -> float:
    """Bus bandwidth of a collective over n ranks on `nodes` (> 1) hosts: one port
    (inter_bw) for each of the group's ranks on a host, at most NVLink's (intra_bw)."""
    ppn = max(1, n // nodes)
    return inter_bw if ppn == 1 else min(ppn * inter_bw, intra_bw)


def ring(kind: str, nbytes: float, n: int, nodes: int, intra_bw: float, intra_kind: str, inter_bw: float) -> float:
    """Seconds of a ring collective over n ranks on `nodes` hosts: NVLink (or PCIe) inside
    one host, the group's NIC ports (inter_bw each, network_bus) as soon as it crosses hosts."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    steps = 2 * (n - 1) if kind == "all-reduce" else n - 1
    inter_steps = (2 if kind == "all-reduce" else 1) * (nodes - 1)
    latency = RING_BASE_S + (steps - inter_steps) * RING_HOP_S[intra_kind] + inter_steps * RING_HOP_S["net"]
    if nodes > 1 and kind == "all-reduce" and nbytes >= n / 16 * PLATEAU_BYTES:
        latency *= RING_PLATEAU
    bandwidth = intra_bw if nodes == 1 else network_bus(n, nodes, intra_bw, inter_bw)
    # a broadcast pipelines the whole buffer down the ring's chain: each link carries all of
    # it once (NCCL's bus bandwidth of a broadcast is its algorithm bandwidth)
    moved = nbytes if kind == "broadcast" else nbytes * steps / n
    return latency + moved / bandwidth


def tree(nbytes: float, n: int, nodes: int, intra_bw: float, intra_kind: str, inter_bw: float) -> float:
    """Seconds of NCCL's tree all-reduce over n ranks on `nodes` hosts."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    ppn = n // nodes
    latency = 2 * ((ppn - 1) * TREE_HOP_S[intra_kind] + math.log2(nodes) * TREE_HOP_S["net"]) if nodes > 1 else \
        2 * (ppn - 1) * TREE_HOP_S[intra_kind]
    speed = intra_bw if nodes == 1 else network_bus(n, nodes, intra_bw, inter_bw)
    bus = min(speed * TREE_BUS_FACTOR, TREE_MAX_BUS["few" if nodes <= 2 else "many"])
    return latency + 2 * nbytes / bus


def hierarchical(nbytes: float, n: int, nodes: int, intra_bw: float, intra_kind: str, inter_bw: float) -> float:
    """Intra-host reduce-scatter, inter-host ring all-reduce of a 1/ppn share, intra-host all-gather."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    ppn = n // nodes
    inside = ring("reduce-scatter", nbytes, ppn, 1, intra_bw, intra_kind, inter_bw)
    across = ring("all-reduce", nbytes / ppn, nodes, nodes, intra_bw, intra_kind, inter_bw)
    return 2 * inside + across  # the all-gather costs what the reduce-scatter does


def all_reduce(algorithm: str, nbytes: float, n: int, nodes: int, intra_bw: float, intra_kind: str,
               inter_bw: float) -> float:
    """An all-reduce by the named algorithm; native: NCCL's choice, the faster of ring and tree."""
    args = (nbytes, n, nodes, intra_bw, intra_kind, inter_bw)
    if algorithm == "ring":
        return ring("all-reduce", *args)
    if algorithm == "tree":
        return tree(*args)
    if algorithm == "hierarchical":
        return hierarchical(*args) if nodes > 1 else ring("all-reduce", *args)
    return min(ring("all-reduce", *args), tree(*args))
