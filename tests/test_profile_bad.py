"""Profiler traces dtgen cannot draw as they are: one clear line each, no traceback.

The traces are written here in Kineto's shape (the fields torch.profiler writes: a
header with distributedInfo before traceEvents, X events with ts and dur in µs), each
with the one defect under test. Also: group dimensions from --mesh, and bus bandwidth.
"""

from __future__ import annotations

import gzip
import json

import pytest
from click.testing import CliRunner

from opentikz_dt.cli import main
from opentikz_dt.measured.profile_set import group_dims, load_profile_set, parse_mesh
from opentikz_dt.measured.profile_stats import bus_factor, comm_rows


def kineto(rank: int | None, world: int = 2, steps: int = 2, t0: float = 1000.0, groups=None, step_names=True):
    events = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}}]
    t = t0
    for n in range(steps):
        if step_names:
            events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n + 1}", "pid": 1, "tid": 1,
                           "ts": t, "dur": 100.0, "args": {}})
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t + 1, "dur": 40.0,
                       "args": {}})
        events.append({"ph": "X", "cat": "cpu_op", "name": "autograd::engine::evaluate_function: MmBackward0",
                       "pid": 1, "tid": 1, "ts": t + 45, "dur": 30.0, "args": {}})
        events.append({"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 1, "tid": 7,
                       "ts": t + 50, "dur": 40.0, "args": {"Input Dims": [[1000]], "Input type": ["float"]}})
        events.append({"ph": "X", "cat": "user_annotation", "name": "Optimizer.step#SGD.step", "pid": 1, "tid": 1,
                       "ts": t + 80, "dur": 15.0, "args": {}})
        t += 100.0
    doc = {"schemaVersion": 1, "trace_id": f"ID{rank}"}
    if rank is not None:
        doc["distributedInfo"] = {"backend": "gloo", "rank": rank, "world_size": world, "pg_count": 1,
                                  "pg_config": groups or [{"pg_name": "0", "pg_desc": "default_pg",
                                                           "pg_size": world, "ranks": list(range(world))}]}
    doc["traceEvents"] = events
    return doc


def write(path, doc):
    path.write_text(json.dumps(doc, indent=1))
    return path


def dtgen(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def error_line(result, code: int = 1) -> str:
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    return result.stderr.splitlines()[-1]


def warnings(result) -> list:
    return [line for line in result.stderr.splitlines() if line.startswith("dtgen: warning: ")]


def test_not_a_kineto_trace(tmp_path):
    bad = tmp_path / "t" / "rank0.json"
    bad.parent.mkdir()
    bad.write_text('{"hello": 1}')
    assert error_line(dtgen("figure", bad.parent, "-o", tmp_path / "out")) == (
        f'dtgen: error: {bad}: not a Kineto trace (no "traceEvents" list: torch.profiler writes one object per '
        f"rank with it)")
    bad.write_text("this is not json")
    assert error_line(dtgen("figure", bad.parent, "-o", tmp_path / "out")) == (
        f"dtgen: error: {bad}: not a Kineto trace (not JSON: Expecting value at line 1 column 1)")
    assert not (tmp_path / "out").exists()


def test_a_json_spec_is_still_a_spec(tmp_path):
    spec = tmp_path / "j.json"
    spec.write_text(json.dumps({"name": "j", "topology": {"workers": {"count": 2}},
                                "strategy": {"kind": "allreduce", "algorithm": "native"}}))
    result = dtgen("figure", spec, "-o", tmp_path / "out", "--kind", "topology")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "j-topology.tex").is_file()


def test_no_distributed_info_is_one_rank(tmp_path):
    one = write(tmp_path / "solo.json", kineto(None))
    result = dtgen("figure", one, "-o", tmp_path / "out", "--kind", "timeline")
    assert result.exit_code == 0, result.output
    assert warnings(result) == [f"dtgen: warning: {one}: no distributedInfo (profiled without torch.distributed): "
                                f"drawn as one rank"]
    assert "rank 0" in (tmp_path / "out" / "measured-solo.json-timeline.tex").read_text()


def test_ranks_of_different_runs(tmp_path):
    a = write(tmp_path / "r0.json", kineto(0))
    b = write(tmp_path / "r1.json", kineto(1, world=4))
    assert error_line(dtgen("figure", a, b, "-o", tmp_path / "out")) == (
        f"dtgen: error: {b}: from a different run than {a} (world size 4, not 2)")
    write(b, kineto(1, t0=5e6 + 1000))
    assert error_line(dtgen("figure", a, b, "-o", tmp_path / "out")) == (
        f"dtgen: error: {b}: from a different run than {a} (its profiled window starts 5.0 s after the other's "
        f"ends; ranks of one run overlap)")
    write(b, kineto(0))
    assert error_line(dtgen("figure", a, b, "-o", tmp_path / "out")) == (
        f"dtgen: error: {b}: rank 0 again (also {a}): traces of different runs?")
    assert not (tmp_path / "out").exists()


def test_truncated_rank_is_drawn_and_named(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    write(folder / "r0.json", kineto(0))
    text = json.dumps(kineto(1), indent=1)
    cut = text[: text.rindex("Optimizer.step") - 40]  # a rank that died mid-write
    with gzip.open(folder / "r1.json.gz", "wt") as handle:
        handle.write(cut)
    result = dtgen("figure", folder, "-o", tmp_path / "out")
    assert result.exit_code == 0, result.output
    assert warnings(result) == [f"dtgen: warning: {folder / 'r1.json.gz'}: rank 1's trace is cut off (did it "
                                f"crash?): drawn up to its last complete event"]
    tex = (tmp_path / "out" / "measured-run-timeline.tex").read_text()
    assert "rank 1 cut off" in tex and "rank 1" in tex


def test_no_profiler_step_uses_the_whole_window(tmp_path):
    one = write(tmp_path / "r0.json", kineto(0, world=1, step_names=False))
    result = dtgen("figure", one, "-o", tmp_path / "out", "--kind", "timeline")
    assert result.exit_code == 0, result.output
    assert warnings(result) == ["dtgen: warning: no ProfilerStep spans (profiled without prof.step()): the whole "
                                "profiled window is drawn as one step"]
    tex = (tmp_path / "out" / "measured-r0.json-timeline.tex").read_text()
    assert "the whole profiled window (no ProfilerStep)" in tex


def test_subset_of_ranks_is_said(tmp_path):
    a = write(tmp_path / "r0.json", kineto(0, world=8))
    result = dtgen("figure", a, "-o", tmp_path / "out", "--kind", "comm")
    assert result.exit_code == 0, result.output
    assert warnings(result) == ["dtgen: warning: 1 of 8 ranks traced (ranks 0): the others are not drawn"]


def test_mesh_names_group_dimensions(tmp_path):
    mesh = parse_mesh("pipeline=2,data=2,tensor=2")
    groups = {(0, 1): "", (2, 3): "", (0, 2): "", (1, 3): "", (0, 4): "", (0, 1, 2, 3, 4, 5, 6, 7): "default_pg",
              (0, 3): ""}
    assert group_dims(groups, 8, mesh) == {(0, 1): "tensor", (2, 3): "tensor", (0, 2): "data", (1, 3): "data",
                                           (0, 4): "pipeline", (0, 1, 2, 3, 4, 5, 6, 7): "world", (0, 3): ""}
    # a DeviceMesh names its groups itself
    assert group_dims({(0, 2): "mesh_dp", (0, 1): "mesh_tp"}, 4, None) == {(0, 2): "data", (0, 1): "tensor"}
    result = dtgen("figure", write(tmp_path / "r0.json", kineto(0)), "--mesh", "data=3")
    assert error_line(result, 2) == "dtgen: error: --mesh data=3: 3 ranks, but the traces say the world has 2"
    result = dtgen("figure", tmp_path / "r0.json", "--mesh", "data")
    assert error_line(result, 2) == ("dtgen: error: --mesh 'data': expected dim=N,dim=N (e.g. "
                                     "pipeline=2,data=4,tensor=8), outermost first")


def test_bus_bandwidth_as_nccl_tests(tmp_path):
    assert bus_factor("all-reduce", 8) == 2 * 7 / 8
    assert bus_factor("all-gather", 8) == bus_factor("reduce-scatter", 8) == 7 / 8
    assert bus_factor("broadcast", 8) == bus_factor("send", 2) == 1.0
    write(tmp_path / "r0.json", kineto(0))
    write(tmp_path / "r1.json", kineto(1))
    [row] = comm_rows(load_profile_set([tmp_path]))
    assert (row.kind, row.group, row.size, row.calls_per_step) == ("all-reduce", (0, 1), 4000, 1)
    assert row.time_us == 40.0 and row.algbw == pytest.approx(4000 / 40e-6) and row.busbw == pytest.approx(row.algbw)


@pytest.mark.parametrize("name, phase", [
    ("Optimizer.step#AdamW.step", ("optimizer", "")),
    ("autograd::engine::evaluate_function: AddmmBackward0", ("backward", "")),
    ("PP:1B3", ("backward", "")), ("PP:0F2", ("forward", "")), ("PP:0SEND_F2", ("send", "send")),
    ("gloo:all_gather", ("comm", "all-gather")), ("c10d::_reduce_scatter_base_", ("comm", "reduce-scatter")),
    ("record_param_comms", ("forward", "")),  # its kind is in its args, read as a collective, not a phase name
    ("_c10d_functional::wait_tensor", ("wait", "")), ("FSDP::post_backward_rs_wait (0)", ("wait", "")),
    ("c10d::recv_", ("recv", "recv")), ("DistributedDataParallel.forward", ("forward", "")),
])
def test_main_thread_spans_are_classified_by_name(name, phase):
    from opentikz_dt.measured.kineto import phase_of

    assert phase_of(name) == phase


def test_a_column_wide_timeline_names_ranks_not_workers(tmp_path):
    write(tmp_path / "r0.json", kineto(0))
    write(tmp_path / "r1.json", kineto(1))
    result = dtgen("figure", tmp_path, "-o", tmp_path / "out", "--kind", "timeline", "--width", "column")
    assert result.exit_code == 0, result.output
    tex = (tmp_path / "out" / f"measured-{tmp_path.name}-timeline.tex").read_text()
    assert "{r1 comm}" in tex and "r: rank, s: CUDA stream" in tex
    assert "{W1}" not in tex and "{W2}" not in tex  # a run's worker numbers are not ranks


SPEC = """name: profiled
topology: {workers: {count: 2}}
strategy: {kind: allreduce, algorithm: native}
runtime: {backend: gloo, device: cpu}
training: {steps: 4, batch_size: 4, model: {kind: mlp, layers: [8, 8]}}
"""


def test_calibrate_from_profile_fits_alpha_beta_over_two_sizes(tmp_path):
    # all-reduces of two sizes on 2 ranks timed exactly as 2(n-1) alpha + 2(n-1)/n S beta
    alpha_us, beta_us = 20.0, 1e-3  # 20 µs, 1 GB/s
    folder = tmp_path / "prof"
    folder.mkdir()
    for rank in (0, 1):
        doc = kineto(rank, steps=4)
        reduces = [e for e in doc["traceEvents"] if e["name"] == "gloo:all_reduce"]
        for i, e in enumerate(reduces):
            elements = 1000 if i % 2 else 4000
            e["args"]["Input Dims"] = [[elements]]
            e["dur"] = 2 * alpha_us + elements * 4 * beta_us
        write(folder / f"rank{rank}.json", doc)
    (tmp_path / "s.yaml").write_text(SPEC)
    result = dtgen("calibrate", "--from-profile", folder, tmp_path / "s.yaml", "-o", tmp_path / "cal.json")
    assert result.exit_code == 0, result.output
    cal = json.loads((tmp_path / "cal.json").read_text())
    assert cal["comm"]["allreduce"]["alpha_s"] == pytest.approx(alpha_us / 1e6)
    assert cal["comm"]["allreduce"]["beta_s_per_byte"] == pytest.approx(beta_us / 1e6)
    assert "least squares over 8 collectives on 1 group, 2 sizes" in cal["provenance"]["comm"]["allreduce"]
    # forward 40 µs, backward 30 µs, optimizer 15 µs per step (kineto() above), by FLOPs over one block
    block = cal["compute"]["blocks"][0]
    assert block["forward"][1] * 4 == pytest.approx(40e-6) and block["backward"][1] * 4 == pytest.approx(30e-6)


def test_calibrate_from_profile_refuses_what_it_cannot_fit(tmp_path):
    (tmp_path / "s.yaml").write_text(SPEC)
    folder = tmp_path / "nosteps"
    folder.mkdir()
    for rank in (0, 1):
        write(folder / f"rank{rank}.json", kineto(rank, step_names=False))
    out = tmp_path / "cal.json"
    line = error_line(dtgen("calibrate", "--from-profile", folder, tmp_path / "s.yaml", "-o", out))
    assert line.endswith("no ProfilerStep spans: a calibration needs the time per step (profile with a schedule "
                         "and prof.step())") and not out.exists()
    line = error_line(dtgen("calibrate", "--from-profile", folder, "-o", out), 2)
    assert line == ("dtgen: error: --from-profile needs SPEC: the spec of the profiled run (its model and per-worker "
                    "batch; a trace records neither)")
    line = error_line(dtgen("calibrate", "--from-profile", folder, "--from", tmp_path, tmp_path / "s.yaml"), 2)
    assert line.startswith("dtgen: error: --from-profile cannot be combined with --from")
