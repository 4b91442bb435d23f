"""Collectives as NCCL's cost model has them (predict/nccl.py): ring, tree, NCCL's choice
of the two, dtgen's hierarchical, each against the formula written out by hand."""

from __future__ import annotations

import math

import pytest

from opentikz_dt.hardware import DEVICES, LINKS
from opentikz_dt.predict import nccl
from opentikz_dt.predict.datasheet import Cluster

US = 1e-6
NV, NIC = 235e9, 25e9  # an A100 host's NVLink at NCCL's bus cap, one HDR port per GPU
A100 = Cluster(DEVICES["a100-sxm-80gb"], 8, LINKS["nvlink3-a100"], LINKS["ib-hdr"], "fp16")


def test_a_tree_pays_log2_of_the_hosts_in_latency_and_2_bytes_over_its_bus():
    # 8 ranks on 8 hosts: 2 x log2(8) x 50 us; bus 0.9 x one port's 25 GB/s
    expected = 2 * (3 * 50) * US + 2 * 1e8 / (0.9 * NIC)
    assert nccl.tree(1e8, 8, 8, NV, "nvlink", NIC) == pytest.approx(expected)
    # 64 ranks on 8 hosts: 2 x ((8 - 1) x 28 us + log2(8) x 50 us); 8 ports a host, but a
    # tree over more than two hosts at most 80 GB/s
    expected = 2 * (7 * 28 + 3 * 50) * US + 2 * 1e8 / 80e9
    assert nccl.tree(1e8, 64, 8, NV, "nvlink", NIC) == pytest.approx(expected)
    # inside one host the chain's hops are NVLink's, and the bus is capped at 110 GB/s
    assert nccl.tree(1e8, 8, 1, NV, "nvlink", NIC) == pytest.approx(2 * 7 * 28 * US + 2 * 1e8 / 110e9)


def test_a_tree_over_many_hosts_beats_a_ring_on_small_messages_and_loses_on_large():
    hosts = 512  # one rank per host: the ring's 2 x 511 network steps against the tree's 2 x log2(512)
    small, large = 64 * 1024, 4e9
    ring = lambda n: nccl.ring("all-reduce", n, hosts, hosts, NV, "nvlink", NIC)  # noqa: E731
    tree = lambda n: nccl.tree(n, hosts, hosts, NV, "nvlink", NIC)  # noqa: E731
    assert tree(small) < ring(small) and ring(large) < tree(large)
    native = lambda n: nccl.all_reduce("native", n, hosts, hosts, NV, "nvlink", NIC)  # noqa: E731
    assert native(small) == tree(small) and native(large) == ring(large)  # NCCL takes the faster
    # 64 KiB is under 512/16 x 64 KiB: no plateau factor; 4 GB is over it: x1.9
    assert ring(small) == pytest.approx((8.4 + 2 * 511 * 9.6) * US + small * 2 * 511 / 512 / NIC)
    assert ring(large) == pytest.approx(1.9 * (8.4 + 2 * 511 * 9.6) * US + large * 2 * 511 / 512 / NIC)
    assert math.log2(hosts) == 9
    # below n/16 x 64 KiB a multi-node ring takes its latency without NCCL's 1.9 plateau
    tiny = 16 * 1024
    assert nccl.ring("all-reduce", tiny, 16, 2, NV, "nvlink", NIC) == pytest.approx(
        (8.4 + 28 * 3.4 + 2 * 9.6) * US + tiny * 2 * 15 / 16 / (8 * NIC))  # 8 ranks, 8 ports a host


def test_hierarchical_is_a_host_reduce_scatter_a_cross_host_ring_of_a_share_and_a_gather():
    nbytes, ppn, hosts = 8e8, 8, 4
    scatter = (8.4 + 7 * 3.4) * US + nbytes * 7 / 8 / NV
    across = 1.9 * (8.4 + 6 * 9.6) * US + (nbytes / ppn) * 2 * 3 / 4 / NIC
    assert nccl.hierarchical(nbytes, 32, hosts, NV, "nvlink", NIC) == pytest.approx(2 * scatter + across)
    # NCCL's ring crosses hosts on all 8 ports of a host at once, the same network bytes a
    # port as the hierarchy's 8 rings of a share; the hierarchy's host phases come on top
    flat = nccl.ring("all-reduce", nbytes, 32, hosts, NV, "nvlink", NIC)
    assert flat < nccl.hierarchical(nbytes, 32, hosts, NV, "nvlink", NIC)


def test_the_cluster_costs_a_data_group_by_the_algorithm_its_layout_names():
    # 32 ranks one apart: 4 hosts of 8
    assert A100.hosts_spanned(1, 32) == 4 and A100.hosts_spanned(8, 8) == 8 and A100.hosts_spanned(1, 8) == 1
    args = (8e8, 32, 4, NV, "nvlink", NIC)
    for algorithm, expected in (("ring", nccl.ring("all-reduce", *args)), ("tree", nccl.tree(*args)),
                                ("hierarchical", nccl.hierarchical(*args))):
        assert A100.collective("all-reduce", 8e8, 1, 32, algorithm) == pytest.approx(expected)
    # an H100 host's NVLink has no bus cap in this model: the datasheet's 450 GB/s
    h100 = Cluster(DEVICES["h100-sxm"], 8, LINKS["nvlink4-h100"], LINKS["ib-ndr"], "bf16")
    assert h100.collective("all-gather", 1e9, 1, 8) == pytest.approx((8.4 + 7 * 3.4) * US + 1e9 * 7 / 8 / 450e9)


def test_a_group_crosses_hosts_on_one_port_for_each_of_its_ranks_there():
    """NCCL's busBw = nChannels x speedInter (tuning.cc): a channel through each network port
    the group's ranks on a host reach, each GPU on its own port; no more than NVLink carries."""
    nbytes = 4e9
    one = nccl.ring("all-gather", nbytes, 16, 16, NV, "nvlink", NIC)    # 1 rank a host: 1 port
    two = nccl.ring("all-gather", nbytes, 32, 16, NV, "nvlink", NIC)    # 2 a host: 2 ports
    eight = nccl.ring("all-gather", nbytes, 128, 16, NV, "nvlink", NIC)  # 8 a host: 8 ports
    assert one == pytest.approx((8.4 + 15 * 9.6) * US + nbytes * 15 / 16 / NIC)
    assert two == pytest.approx((8.4 + 16 * 3.4 + 15 * 9.6) * US + nbytes * 31 / 32 / (2 * NIC))
    assert eight == pytest.approx((8.4 + 112 * 3.4 + 15 * 9.6) * US + nbytes * 127 / 128 / (8 * NIC))
    # 8 NDR ports (8 x 50 GB/s) outrun an A100's NVLink at NCCL's 235 GB/s cap: NVLink bounds
    assert nccl.network_bus(128, 16, NV, 50e9) == NV and nccl.network_bus(16, 16, NV, 50e9) == 50e9
    # on the cluster: ZeRO-3 over 4 whole hosts uses their 8 ports, a tensor-8 layout's data
    # group (8 ranks 8 apart, one a host) one port
    assert A100.collective("all-gather", nbytes, 1, 32) == pytest.approx(
        nccl.ring("all-gather", nbytes, 32, 4, NV, "nvlink", NIC))
    assert A100.collective("all-gather", nbytes, 1, 32) < A100.collective("all-gather", nbytes, 8, 8) / 7


def test_a_host_with_fewer_ports_than_gpus_gives_each_gpu_its_share(tmp_path):
    """hardware.nics_per_host: four 100 Gb/s ports for eight GPUs give each GPU half a port,
    so a group of whole hosts moves four ports' worth across them, and a pipeline send half
    a port; inside a host nothing changes."""
    from opentikz_dt.predict.cluster import cluster_of
    from opentikz_dt.spec import load_spec

    spec = tmp_path / "s.yaml"
    spec.write_text("strategy: {kind: allreduce}\ntopology: {workers: {count: 32}}\n"
                    "hardware: {device: a100-sxm-80gb, inter_host: 100gbe, nics_per_host: 4}\n")
    four = cluster_of(load_spec(spec))
    eight = Cluster(DEVICES["a100-sxm-80gb"], 8, LINKS["nvlink3-a100"], LINKS["100gbe"], "fp16")
    port = LINKS["100gbe"].bytes_per_s
    assert four.bandwidth(four.inter) == port / 2 and eight.bandwidth(eight.inter) == port
    nbytes = 4e9
    assert four.collective("all-gather", nbytes, 1, 32) == pytest.approx(
        nccl.ring("all-gather", nbytes, 32, 4, NV, "nvlink", port / 2))
    assert eight.collective("all-gather", nbytes, 1, 32) == pytest.approx(
        nccl.ring("all-gather", nbytes, 32, 4, NV, "nvlink", port))
    assert four.p2p(nbytes, 8) == pytest.approx(eight.p2p(nbytes, 8) + nbytes / (port / 2) - nbytes / port)
    assert four.collective("all-reduce", nbytes, 1, 8) == eight.collective("all-reduce", nbytes, 1, 8)
