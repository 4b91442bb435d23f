"""The GPU side of a profiler trace, in the shape torch.profiler writes with NCCL: the
benchmark's generator (benchmarks/bench_profile_read.py) at a 2 x 2 x 2 mesh. Checks
that record_param_comms' metadata gives each collective its group and size, that the
NCCL kernel's time replaces the CPU call's, that compute kernels take the phase of the
span that launched them, and that a DeviceMesh's pg_desc names the groups."""

from __future__ import annotations

import pytest
from gpu_trace_helpers import write_mesh_traces

from opentikz_dt.measured.profile_figures import figure_profile_command
from opentikz_dt.measured.profile_set import load_profile_set
from opentikz_dt.measured.profile_stats import comm_rows

MESH = (("pipeline", 2), ("data", 2), ("tensor", 2))


@pytest.fixture(scope="module")
def gpu_traces(tmp_path_factory):
    return write_mesh_traces(tmp_path_factory.mktemp("gpu"), MESH, 2, 40)


def test_nccl_metadata_groups_and_kernel_times(gpu_traces):
    pset = load_profile_set([gpu_traces])
    assert pset.groups[(0, 1)] == "tensor" and pset.groups[(0, 2)] == "data" and pset.groups[(0, 4)] == "pipeline"
    rank0 = pset.ranks[0]
    assert rank0.collectives and all(c.on_gpu for c in rank0.collectives)
    assert {c.group for c in rank0.collectives} == {(0, 1), (0, 2)}
    # the generator's NCCL kernels run 200-400 µs; the CPU record_param_comms 2 µs
    assert min(c.end - c.start for c in rank0.collectives) >= 200
    assert {k.kind for k in rank0.kernels} == {"forward", "backward", "optimizer", "comm"}
    rows = {(r.kind, r.dim): r for r in comm_rows(pset)}
    reduce = rows[("all-reduce", "tensor")]
    assert reduce.size == (1 << 20) * 2  # 1 Mi bf16 elements
    assert reduce.busbw == pytest.approx(reduce.algbw)  # 2(n-1)/n = 1 at n = 2
    scatter = rows[("reduce-scatter", "data")]
    assert scatter.size == (1 << 22) * 2 and scatter.busbw == pytest.approx(scatter.algbw / 2)


def test_gpu_streams_are_lanes(gpu_traces, tmp_path):
    [tex] = figure_profile_command([gpu_traces], tmp_path, "timeline", ("tex",), False)
    text = tex.read_text()
    assert "rank 0 stream 7" in text and "rank 0 stream 20" in text
    assert "reduce-scatter" in text and "measured: torch.profiler traces of 8 ranks (nccl)" in text


def test_topology_boxes_hosts_and_names_them_in_the_note(gpu_traces, tmp_path):
    [tex] = figure_profile_command([gpu_traces], tmp_path, "topology", ("tex",), False)
    text = tex.read_text()
    # the generator puts 8 ranks per host: all 8 ranks are on node0
    assert "hosts:" not in text
    pset = load_profile_set([gpu_traces])
    for p in pset.ranks:
        p.host = f"node{p.rank // 4}"
    from opentikz_dt.measured.profile_figures import neutral_spec, render_profile_topology

    pset.hosts = {p.rank: p.host for p in pset.ranks}
    text = render_profile_topology(pset, neutral_spec("t", None, 8))
    assert "hosts: h1 node0, h2 node1 (2 in all)" in text
    assert text.count("\\draw[hostbox]") == 2
    assert "data: 4 groups of 2" in text and "tensor: 4 groups of 2" in text


def test_topology_and_comm_table_fit_one_column(tmp_path):
    """At --width column (8.5 cm) a 16-rank 2 x 4 x 2 mesh's topology and table are drawn
    no wider than the column (the compiled page is measured), their abbreviations said."""
    folder = write_mesh_traces(tmp_path / "mesh16", (("pipeline", 2), ("data", 4), ("tensor", 2)), 2, 10)
    lines = []
    written = figure_profile_command([folder], tmp_path / "out", "all", ("pdf",), False, width="column",
                                     notify=lines.append)
    assert not [line for line in lines if "wider than" in line], lines
    topology = next(p for p in written if p.name.endswith("topology.tex")).read_text()
    assert "data 4\u00d74" in topology and "ranks 7\u201314 not drawn" in topology
    comm = next(p for p in written if p.name.endswith("comm.tex")).read_text()
    assert "AR all-reduce" in comm and "tp tensor" in comm and "dp 0,2,4,6" in comm
