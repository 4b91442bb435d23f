"""Predictions from the datasheet (a spec's `hardware:`, predict/datasheet.py and
cluster.py): the physics pieces, one lane per pipeline stage, what the run directory and
the figure say, and the one-line refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from opentikz_dt.cli import main
from opentikz_dt.errors import DtgenError
from opentikz_dt.hardware import DEVICES, LINKS
from opentikz_dt.predict.cluster import size_check, step_seconds
from opentikz_dt.predict.datasheet import Cluster, Layout, Model, stage_pass

A100 = Cluster(DEVICES["a100-sxm-80gb"], 8, LINKS["nvlink3-a100"], LINKS["ib-hdr"], "fp16")
GPT3 = Model(96, 12288, 96, 2048, 51200)
SMALL = ("strategy: {kind: mesh, parallelism: {pipeline: 2, data: 2, tensor: 2}, microbatches: 4}\n"
         "topology: {workers: {count: 8}}\n"
         "training:\n  model: {kind: transformer, layers: 4, d_model: 256, heads: 4, seq_len: 128, vocab: 512}\n"
         "  batch_size: 8\n  precision: bf16\n")


def test_ring_collectives_cross_the_slowest_link_their_group_spans():
    gb, us = 1e9, 1e-6
    # 8 consecutive ranks share a host: NVLink at NCCL's A100 bus cap (235 GB/s), 2(n-1)/n of
    # the bytes, NCCL's ring latency 8.4 us + 14 steps x 3.4 us
    assert A100.collective("all-reduce", gb, 1, 8, "ring") == pytest.approx(
        (8.4 + 14 * 3.4) * us + gb * 2 * 7 / 8 / 235e9)
    assert A100.collective("all-gather", gb, 1, 8) == pytest.approx((8.4 + 7 * 3.4) * us + gb * 7 / 8 / 235e9)
    # ranks 8 apart are on different hosts: the NIC port, 25 GB/s, 6 network steps, x1.9 (NCCL's plateau)
    assert A100.collective("all-reduce", gb, 8, 4, "ring") == pytest.approx(
        1.9 * (8.4 + 6 * 9.6) * us + gb * 2 * 3 / 4 / 25e9)
    assert A100.link(2, 4) is A100.intra and A100.link(4, 4) is A100.inter
    assert A100.collective("all-reduce", gb, 1, 1) == 0.0


def test_the_model_counts_the_papers_flops_exactly():
    """Every stage's matmuls x microbatches x replicas x tensor ranks = SC'21 Eq. 3."""
    layout = Layout(16, 8, 8, 192, 1)
    counted = sum(stage_pass(GPT3, layout, A100, "full", s).matmul_flops for s in range(16)) * 192 * 8 * 8
    assert counted == pytest.approx(GPT3.iteration_flops(1536, recompute=True), rel=1e-12)
    plain = sum(stage_pass(GPT3, layout, A100, "none", s).matmul_flops for s in range(16)) * 192 * 8 * 8
    assert plain == pytest.approx(GPT3.iteration_flops(1536, recompute=False), rel=1e-12)


def test_recomputation_bubbles_and_precision_move_the_step_the_right_way():
    layout = Layout(16, 8, 8, 192, 1)
    none, full = (step_seconds(GPT3, layout, A100, r) for r in ("none", "full"))
    assert 1.25 < full / none < 1.4  # one more forward of four passes' three
    fewer = step_seconds(GPT3, Layout(16, 8, 8, 32, 6), A100, "none")  # the same batch in 32 microbatches
    assert fewer > none  # the bubble (p - 1)/m grows
    h100 = Cluster(DEVICES["h100-sxm"], 8, LINKS["nvlink4-h100"], LINKS["ib-ndr"], "bf16")
    fp8 = Cluster(DEVICES["h100-sxm"], 8, LINKS["nvlink4-h100"], LINKS["ib-ndr"], "fp8")
    assert step_seconds(GPT3, layout, fp8, "none") < step_seconds(GPT3, layout, h100, "none") < none


def test_fp8_runs_the_linear_layers_in_fp8_and_the_attention_core_and_head_in_bf16():
    """Transformer Engine's recipes quantize its Linear modules only (fp8_dpa off), and
    Megatron's output layer is not one of them (datasheet.unquantized)."""
    from opentikz_dt.predict.datasheet import (BYTES, backward_gemm_seconds, gemm_seconds, head_costs,
                                               layer_costs, layer_gemms)

    layout = Layout(1, 1, 8, 1, 1)
    bf16 = Cluster(DEVICES["h100-sxm"], 8, LINKS["nvlink4-h100"], LINKS["ib-ndr"], "bf16")
    fp8 = Cluster(DEVICES["h100-sxm"], 8, LINKS["nvlink4-h100"], LINKS["ib-ndr"], "fp8")
    e = BYTES["bf16"]
    # heads of 2,048 wide: the attention core is compute-bound (GPT-3's 128-wide heads are on
    # the HBM roofline at either rate), so fp8 would shorten it if it ran it
    model = Model(2, 8192, 4, 4096, 51200)
    gemms = layer_gemms(model, layout, 8)
    assert all(gemm_seconds(*g, fp8, e) < gemm_seconds(*g, bf16, e) for g in gemms)
    linear = [g for i, g in enumerate(gemms) if i not in (1, 2)]  # QKV, projection, the MLP's two
    saved_fwd = sum(gemm_seconds(*g, bf16, e) - gemm_seconds(*g, fp8, e) for g in linear)
    saved_bwd = sum(backward_gemm_seconds(*g, bf16, e) - backward_gemm_seconds(*g, fp8, e) for g in linear)
    before, after = layer_costs(model, layout, bf16, "none"), layer_costs(model, layout, fp8, "none")
    assert saved_fwd > 0 and before.forward - after.forward == pytest.approx(saved_fwd, rel=1e-9)
    assert before.backward - after.backward == pytest.approx(saved_bwd, rel=1e-9)
    assert head_costs(model, layout, fp8).forward == pytest.approx(head_costs(model, layout, bf16).forward)
    assert head_costs(model, layout, fp8).backward == pytest.approx(head_costs(model, layout, bf16).backward)


def test_predict_writes_one_lane_per_stage_from_the_datasheet(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text(SMALL + "hardware: {device: h100-sxm}\n")
    result = CliRunner().invoke(main, ["predict", str(spec), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "illustrative" not in result.output
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert run["predicted"]["source"] == "datasheet" and run["world_size"] == 2  # 2 stages stand for 8 ranks
    assert run["predicted"]["caption"] == "expected on 8 H100 SXM, datasheet costs"
    assert run["predicted"]["device_source"] == DEVICES["h100-sxm"].source
    trace = json.loads((tmp_path / "out" / "trace.json").read_text())
    assert {e["pid"] for e in trace["traceEvents"]} == {0, 1}
    assert {e["args"]["id"] for e in trace["traceEvents"] if e["ph"] == "X"} == {"w1", "w5"}
    assert json.loads((tmp_path / "out" / "metrics.json").read_text())["samples_per_s"] > 0


def test_a_tensor_group_across_hosts_is_predicted_with_a_located_warning(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text(SMALL + "hardware: {device: h100-sxm, gpus_per_host: 1}\n")
    result = CliRunner().invoke(main, ["predict", str(spec), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert f"dtgen: warning: {spec}:7:45:" in result.output and "cross the NIC" in result.output


def test_a_kind_the_datasheet_model_does_not_cover_is_one_located_line(tmp_path):
    spec = tmp_path / "ps.yaml"
    spec.write_text("strategy: {kind: parameter-server}\ntopology: {workers: {count: 8}, servers: {count: 1}}\n"
                    "training: {model: {kind: transformer}}\nhardware: {device: h100-sxm}\n")
    result = CliRunner().invoke(main, ["predict", str(spec), "-o", str(tmp_path / "out")])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.output == (f"dtgen: error: {spec}:1:18: strategy.kind: datasheet costs (hardware:) cover kinds "
                             "single, allreduce, fsdp, tensor, pipeline, mesh; 'parameter-server' is predicted "
                             "from a calibration (--calibration)\n")
    assert not (tmp_path / "out").exists()


def test_a_trace_too_large_even_with_one_lane_per_stage_is_refused():
    class Spec:
        source = "big.yaml"
    with pytest.raises(DtgenError, match=r"big.yaml: hardware: the prediction would write about 3,145,728 trace"):
        size_check(Spec(), Layout(64, 1, 1, 4096, 1), 3)


def test_figure_draws_the_expected_timeline_from_the_datasheet_and_says_so(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text(SMALL + "hardware: {device: h100-sxm}\n")
    result = CliRunner().invoke(main, ["figure", str(spec), "-o", str(tmp_path / "fig"), "--kind", "timeline",
                                       "--format", "pdf"])
    assert result.exit_code == 0, result.output
    tex = (tmp_path / "fig" / "s-timeline.tex").read_text()
    assert "expected on 8 H100 SXM, datasheet costs" in tex and "predicted" in tex
    # each lane is named by the stage its representative stands for, with the ranks it stands for
    assert "Stage 1, 4 ranks" in tex and "Stage 2, 4 ranks" in tex and "Worker" not in tex
    assert (tmp_path / "fig" / "s-timeline.pdf").stat().st_size > 0
    spec.write_text(SMALL)  # without hardware: the illustrative schedule, as before
    CliRunner().invoke(main, ["figure", str(spec), "-o", str(tmp_path / "plain"), "--kind", "timeline"])
    assert "datasheet" not in (tmp_path / "plain" / "s-timeline.tex").read_text()


def test_ddp_hides_its_all_reduce_behind_the_backward_and_a_mesh_does_not():
    """Kind allreduce (DDP buckets) adds only what outlasts the backward; a mesh reduces after
    the flush, so the same layout is slower by about the whole all-reduce."""
    model = Model(24, 2304, 24, 2048, 51200)  # 1.7B: 6.8 GB of fp32 gradients over the NIC
    overlapped = step_seconds(model, Layout(1, 32, 1, 1, 16, "gpipe", overlap_data=True), A100, "none")
    after = step_seconds(model, Layout(1, 32, 1, 1, 16, "gpipe"), A100, "none")
    reduce = A100.collective("all-reduce", 4 * model.params, 1, 32)
    last_bucket = A100.collective("all-reduce", 25 * 2**20, 1, 32)
    # the backward (about 1.1 s) outlasts the all-reduce (0.51 s): all of it hidden but the last bucket
    assert after - overlapped == pytest.approx(reduce - last_bucket, rel=1e-6)


def test_a_model_known_by_its_flop_count_splits_over_data_only(tmp_path):
    """An mlp (or cnn, or a python model once described) is its FLOPs and parameters: data
    parallelism predicts it; a pipeline of it is one located line."""
    from opentikz_dt.predict.blocks import model_blocks
    from opentikz_dt.predict.cluster import model_of
    from opentikz_dt.spec import load_spec

    spec = load_spec("examples/allreduce-ring.yaml")
    result = CliRunner().invoke(main, ["predict", "examples/allreduce-ring.yaml", "--set", "hardware.device=h100-sxm",
                                       "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    counted = model_of(load_spec(tmp_path / "out" / "spec.yaml"))
    assert counted.params == sum(b.params for b in model_blocks(spec))
    assert run["predicted"]["step_s"] > 3 * counted.forward_flops * spec.training.batch_size / 989.5e12
    pipe = tmp_path / "pipe.yaml"
    pipe.write_text("strategy: {kind: pipeline, microbatches: 4}\ntopology: {workers: {count: 2}}\n"
                    "training: {model: {kind: mlp, layers: [32, 64, 64, 10]}}\nhardware: {device: h100-sxm}\n")
    result = CliRunner().invoke(main, ["predict", str(pipe), "-o", str(tmp_path / "p")])
    assert result.exit_code == 1 and result.output.count("\n") == 1
    assert "split a 'mlp' model over data parallelism only" in result.output


def test_the_heads_score_products_are_memory_bound_and_dropout_moves_more_bytes():
    from opentikz_dt.predict.datasheet import elementwise_bytes, gemm_seconds, layer_gemms

    layout = Layout(16, 8, 8, 192, 1)
    qkv, scores = layer_gemms(GPT3, layout, 8)[:2]
    assert scores == (12, 2048, 128, 2048)  # b·a/t heads, s x h/a by h/a x s
    moved = 2 * 12 * (2048 * 128 * 2 + 2048 * 2048)
    assert gemm_seconds(*scores, A100, 2) == pytest.approx(moved / A100.hbm_rate)  # below the ridge
    # QKV is compute-bound: 8 x 36 tiles of 256 x 128 fill 288 of 3 waves of 108 SMs
    assert gemm_seconds(*qkv, A100, 2) == pytest.approx(2 * 2048 * 12288 * 4608 / (A100.matmul_rate * 288 / 324))
    dropped = Model(96, 12288, 96, 2048, 51200, dropout=True)
    extra = elementwise_bytes(dropped, layout, 8, 2) - elementwise_bytes(GPT3, layout, 8, 2)
    assert extra == pytest.approx(5 * 12 * 2048 * 2048 + 2 * 2048 * 12288)  # scores' dropout, two masks


def test_memory_bound_work_runs_at_the_streaming_bandwidth_measured_on_the_device():
    """The A100's memory-bound work at the 1.80 TB/s a streaming kernel reached on one (not
    the datasheet's 2,039 GB/s); the H200's at gpu-benches' 3,780 GB/s; a device with no
    published measurement (H100 SXM) at its datasheet rate."""
    from opentikz_dt.predict.datasheet import optimizer_seconds

    assert A100.hbm_rate == pytest.approx(1800e9)
    assert optimizer_seconds(1e9, A100) == pytest.approx(30e9 / 1800e9)  # Adam: 30 bytes a parameter
    h200 = Cluster(DEVICES["h200"], 8, LINKS["nvlink4-h200"], LINKS["ib-ndr"], "bf16")
    assert h200.hbm_rate == pytest.approx(3780e9)
    h100 = Cluster(DEVICES["h100-sxm"], 8, LINKS["nvlink4-h100"], LINKS["ib-ndr"], "bf16")
    assert h100.hbm_rate == DEVICES["h100-sxm"].hbm_bytes_per_s


def test_a_gemm_whose_tiles_leave_a_wave_part_empty_runs_at_that_fill():
    from opentikz_dt.predict.datasheet import wave_fill

    assert wave_fill("a100-sxm-80gb", 1, 256 * 9, 128 * 12) == 1.0  # 108 tiles: one full wave
    assert wave_fill("a100-sxm-80gb", 1, 256 * 9, 128 * 12 + 1) == pytest.approx(117 / 216)  # a 2nd wave of 9
    assert wave_fill("h100-sxm", 1, 256, 128 * 133) == pytest.approx(133 / 264)  # 132 SMs
    assert wave_fill("b200", 1, 256, 128 * 133) == 1.0  # no sourced SM count: not quantized


def test_each_microbatch_but_the_first_adds_its_gradients_into_the_accumulated_ones():
    from opentikz_dt.predict.datasheet import accumulate_seconds, stage_params

    layout = Layout(16, 8, 8, 192, 1)
    held = stage_params(GPT3, layout, 3)
    # fp16 gradients read, fp32 accumulated ones read and written: 10 bytes a parameter, 191 of 192 times
    assert accumulate_seconds(GPT3, layout, A100, 3) == pytest.approx(held * 10 / A100.hbm_rate * 191 / 192)
    assert accumulate_seconds(GPT3, Layout(16, 8, 8, 1, 192), A100, 3) == 0.0  # one microbatch: nothing to add


def test_the_data_all_reduce_is_costed_by_the_algorithm_the_spec_names():
    from opentikz_dt.predict.cluster import layout_of
    from opentikz_dt.spec import spec_from_data

    model = {"kind": "transformer", "layers": 2, "d_model": 64, "heads": 2, "seq_len": 16, "vocab": 64}

    def layout(strategy: dict):
        return layout_of(spec_from_data({"strategy": strategy, "topology": {"workers": {"count": 16}},
                                         "training": {"model": model, "batch_size": 16},
                                         "hardware": {"device": "h100-sxm"}}))

    assert layout({"kind": "allreduce", "algorithm": "tree"}).algorithm == "tree"
    assert layout({"kind": "allreduce"}).algorithm == "native"
    mesh = {"kind": "mesh", "parallelism": {"data": 16}}
    assert layout({**mesh, "data_parallel": "ring"}).algorithm == "ring"
    assert layout(mesh).algorithm == "native"
    # 16 ranks on 2 hosts: the tree and the ring of 64 MB cost what nccl.py says, and differ
    ring, tree = (A100.collective("all-reduce", 64e6, 1, 16, a) for a in ("ring", "tree"))
    assert ring != tree and A100.collective("all-reduce", 64e6, 1, 16) == min(ring, tree)


INTERLEAVED = ("strategy: {kind: mesh, parallelism: {pipeline: 4, data: 2, tensor: 8}, microbatches: 8,\n"
               "           schedule: SCHEDULE}\n"
               "topology: {workers: {count: 64}}\n"
               "training:\n  model: {kind: transformer, layers: 32, d_model: 8192, heads: 64, seq_len: 2048,"
               " vocab: 51200}\n  batch_size: 8\n  precision: bf16\n"
               "runtime: {device: cuda}\nhardware: {device: a100-sxm-80gb}\n")


def test_an_interleaved_schedule_is_simulated_in_torchs_order_with_v_chunks_a_rank(tmp_path):
    from opentikz_dt.predict.cluster import cluster_result, layout_of
    from opentikz_dt.spec import load_spec

    def spec(schedule: str):
        path = tmp_path / f"{schedule}.yaml"
        path.write_text(INTERLEAVED.replace("SCHEDULE", schedule))
        return load_spec(path)

    plain, looped = spec("1f1b"), spec("interleaved-1f1b")
    assert (layout_of(plain).chunks, layout_of(looped).chunks) == (1, 2)  # stages_per_rank's default
    one, two = (cluster_result(s, steps=2)[2]["step_s"] for s in (plain, looped))
    # the bubble (p - 1)/m = 3/8 of the compute under 1F1B, 3/16 with two chunks a rank (SC'21 §2.2.2),
    # less what the chunks' extra sends cost: the step is shorter, by less than the bubbles' difference
    assert one / two == pytest.approx((1 + 3 / 8) / (1 + 3 / 16), rel=0.06)
    assert 1.0 < one / two < (1 + 3 / 8) / (1 + 3 / 16)
    rec = cluster_result(looped, steps=2)[0]
    # the model in 4 x 2 stages, rank r holding r and r + 4: the first lane runs stages 1 and 5
    assert {e["args"]["stage"] for e in rec.result.events[0] if e["name"] == "forward"} == {1, 5}
    assert {e["args"]["stage"] for e in rec.result.events[3] if e["name"] == "forward"} == {4, 8}


def test_a_schedule_that_splits_the_backward_is_refused_at_its_key(tmp_path):
    spec = tmp_path / "zb.yaml"
    spec.write_text(INTERLEAVED.replace("SCHEDULE", "zbv-zero-bubble"))
    result = CliRunner().invoke(main, ["predict", str(spec), "-o", str(tmp_path / "out")])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.output == (f"dtgen: error: {spec}:2:22: strategy.schedule: datasheet costs (hardware:) simulate "
                             "the schedules with a whole backward (gpipe, 1f1b, interleaved-1f1b, looped-bfs); "
                             "'zbv-zero-bubble' splits it into input and weight gradients\n")


def test_sequence_parallelism_splits_the_norms_over_t_and_keeps_the_bytes_moved():
    from dataclasses import replace

    from opentikz_dt.predict.datasheet import elementwise_bytes, layer_costs

    dropped = Model(96, 12288, 96, 2048, 51200, dropout=True)
    layout = Layout(8, 1, 8, 64, 1)
    sequence = replace(layout, sequence_parallel=True)
    tokens = 2048 * 12288
    # two norms (read, write) and two residual adds (two reads, a write) at 2 bytes, two 1-byte
    # dropout masks: on 1/8 of the tokens on each tensor rank (Korthikanti et al. 2022, §4.2.2)
    saved = elementwise_bytes(dropped, layout, 8, 2) - elementwise_bytes(dropped, sequence, 8, 2)
    assert saved == pytest.approx((2 * (2 * 2 + 2 * 3) + 2) * tokens * 7 / 8)
    plain, split = layer_costs(dropped, layout, A100, "none"), layer_costs(dropped, sequence, A100, "none")
    assert plain.forward - split.forward == pytest.approx(saved / A100.hbm_rate)
    # each all-reduce becomes a reduce-scatter and an all-gather of the same b·s·h: the same bytes
    rs_ag = A100.collective("reduce-scatter", 2 * tokens, 1, 8) + A100.collective("all-gather", 2 * tokens, 1, 8)
    assert split.forward_comm == pytest.approx(2 * rs_ag)
    assert layer_costs(dropped, replace(Layout(1, 8, 1, 1, 1), sequence_parallel=True), A100, "none") == \
        layer_costs(dropped, Layout(1, 8, 1, 1, 1), A100, "none")  # t = 1: nothing to split


def test_megatrons_pipeline_sends_are_split_over_the_tensor_group_and_hold_the_sender():
    """datasheet.PIPELINE_SENDS: torch's pipelining sends each tensor rank's whole boundary
    tensor beside the next compute; Megatron-LM (and DeepSpeed's pipeline engine) sends 1/t
    of it from each tensor rank, the receiver gathers the parts over NVLink, and the sender
    computes again only once its send is done."""
    from dataclasses import replace

    from opentikz_dt.predict.cluster import simulate_cluster

    layout = Layout(4, 1, 8, 8, 1)  # tensor 8 fills a host: every stage boundary crosses the NIC
    act = 2 * 2048 * 12288          # fp16 b·s·h at microbatch 1
    runs = {sends: simulate_cluster(GPT3, replace(layout, pipeline_sends=sends), A100, "none", 1)
            for sends in ("torch", "megatron")}
    held = {}
    for sends, rec in runs.items():
        lanes = rec.result.events
        sent = [e for lane in lanes.values() for e in lane if e.get("name") == "send"]
        one = A100.p2p(act if sends == "torch" else act / 8, 8) * 1e6
        assert sent and all(e["dur"] == pytest.approx(one, abs=1e-3) for e in sent)
        assert rec.result.bytes[0][0] == pytest.approx(len([e for e in sent if e["pid"] == 0]) * act / (
            1 if sends == "torch" else 8), rel=1e-6)
        # how long after a send starts its lane computes again, against the send's length
        gaps = []
        for e in sent:
            after = [c["ts"] for c in lanes[e["pid"]] if c.get("tid") == 0 and c["ts"] >= e["ts"]]
            if after:
                gaps.append(min(after) - (e["ts"] + e["dur"]))
        held[sends] = gaps
    assert min(held["megatron"]) >= -1e-3  # never before the send is done
    assert min(held["torch"]) < -1.0       # torch's next compute runs beside the send
    # the receiver holds the tensor a gather later: the second stage's first forward starts
    # after the first stage's, the 1/t send and the all-gather of the whole tensor over NVLink
    first = {s: sorted(c["ts"] for c in rec.result.events[1] if c["name"] == "forward")[0]
             for s, rec in runs.items()}
    f0 = stage_pass(GPT3, layout, A100, "none", 0)
    assert first["megatron"] == pytest.approx((f0.forward + f0.forward_comm + A100.p2p(act / 8, 8)
                                               + A100.collective("all-gather", act, 1, 8)) * 1e6, abs=0.01)


def test_a_mesh_of_16384_gpus_validates_and_is_predicted_one_lane_a_stage(tmp_path):
    spec = tmp_path / "gpt3-16k.yaml"
    spec.write_text("strategy: {kind: mesh, parallelism: {pipeline: 16, data: 128, tensor: 8}, microbatches: 16}\n"
                    "topology: {workers: {count: 16384}}\n"
                    "training:\n  model: {kind: transformer, layers: 96, d_model: 12288, heads: 96, seq_len: 2048,"
                    " vocab: 51200}\n  batch_size: 16\n  precision: fp16\n"
                    "runtime: {device: cuda}\nhardware: {device: a100-sxm-80gb}\n")
    assert CliRunner().invoke(main, ["validate", str(spec)]).exit_code == 0
    result = CliRunner().invoke(main, ["predict", str(spec), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    predicted = json.loads((tmp_path / "out" / "run.json").read_text())["predicted"]
    assert (predicted["ranks"], predicted["lanes"]) == (16384, 16)
    assert 3.0 < predicted["step_s"] < 4.0  # 16 microbatches of 2,048 tokens a replica, 128 replicas


def test_each_zero_stage_adds_its_own_collectives_on_the_datasheet():
    """ZeRO-1 is DDP's step with Adam on 1/d of the parameters and then d broadcasts (each
    rank's updated 1/d of the fp32 weights, the whole buffer down a ring's chain); ZeRO-2
    gathers each unit once a step, ZeRO-3 again for the backward: comm-bound, one
    all-gather of the weights apart."""
    from opentikz_dt.predict.cluster import simulate_cluster
    from opentikz_dt.predict.datasheet import optimizer_seconds

    gb, us = 1e9, 1e-6
    assert A100.collective("broadcast", gb, 1, 8) == pytest.approx((8.4 + 7 * 3.4) * us + gb / 235e9)
    model = Model(24, 2304, 24, 2048, 51200)
    ddp = Layout(1, 32, 1, 1, 16, "gpipe", overlap_data=True)
    zero1 = Layout(1, 32, 1, 1, 16, "gpipe", shard="optimizer", overlap_data=True)
    broadcasts = 32 * A100.collective("broadcast", 4 * model.params / 32, 1, 32)
    saved = optimizer_seconds(model.params, A100) - optimizer_seconds(model.params / 32, A100)
    assert step_seconds(model, zero1, A100, "none") - step_seconds(model, ddp, A100, "none") == pytest.approx(
        broadcasts - saved, rel=1e-6)
    rec = simulate_cluster(model, zero1, A100, "none", 2)
    spans = {(e["name"], e["args"].get("phase")): e for e in rec.result.events[0] if e["args"]["step"] == 1}
    cast, update = spans[("allreduce", "broadcast")], spans[("optimizer", None)]
    assert cast["args"]["bytes"] == 4 * model.params and cast["args"]["sources"] == 32
    # both end together; ts and dur are each rounded to the nanosecond (predict/engine.py)
    assert cast["ts"] + cast["dur"] == pytest.approx(update["ts"] + update["dur"], abs=2e-3)
    slow = Cluster(DEVICES["a100-sxm-80gb"], 1, LINKS["nvlink3-a100"], LINKS["100gbe"], "fp16")
    zero2, zero3 = (step_seconds(model, Layout(1, 32, 1, 1, 1, "gpipe", shard=level), slow, "none")
                    for level in ("gradients", "parameters"))
    assert zero3 - zero2 == pytest.approx(slow.collective("all-gather", 2 * model.params, 1, 32), rel=1e-6)


def test_predict_of_a_datasheet_says_what_its_lanes_stand_for_and_whether_it_fits(tmp_path):
    """The summary of a datasheet prediction: the ranks its lanes stand for, the model FLOP/s
    per GPU, each lane's memory (its own stage's, activations included) and the device fit."""
    from opentikz_dt.memory import expected_memory
    from opentikz_dt.spec import load_spec

    spec = tmp_path / "s.yaml"
    spec.write_text(SMALL + "hardware: {device: h100-sxm}\n")
    result = CliRunner().invoke(main, ["predict", str(spec), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert (run["device"], run["backend"]) == ("cuda", "nccl")  # what the datasheet is of, not this box
    # dtgen runs torch's pipelining: its sends, said as the assumption they are
    assert run["predicted"]["pipeline_sends"].startswith("as torch's pipelining sends them: each tensor rank")
    lines = result.stdout.splitlines()
    assert lines[0].startswith("s: predicted mesh, 8 ranks as 2 lane(s) (one rank per pipeline stage stands for")
    assert "from datasheets (expected on 8 H100 SXM, datasheet costs; matmuls at " in lines[0]
    memory = {m.id: m for m in expected_memory(load_spec(spec))}
    assert memory["w1"].total != memory["w5"].total  # the lanes' stages hold different layers
    rows = {line.split()[1]: line.split() for line in lines[3:5]}
    assert rows["w1"][-1] == f"{memory['w1'].total / 1e6:.2f}" and rows["w5"][-1] == f"{memory['w5'].total / 1e6:.2f}"
    tail = lines[5]
    assert f"; {run['predicted']['model_tflops_per_gpu']:,.1f} model TFLOP/s per GPU" in tail
    assert "optimizer state and activations" in tail
    fullest = max(memory.values(), key=lambda m: m.total)
    assert tail.endswith(f"on H100 SXM: fits: the fullest rank, {fullest.id} (rank {fullest.rank}), needs "
                         f"{fullest.total / 1e9:.3g} GB of 80 GB")


GPT3_EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "planning" / "gpt3-175b-a100.yaml"


@pytest.mark.latex
def test_the_shapes_sweep_marks_the_shapes_that_do_not_fit_the_device(tmp_path):
    """GPT-3 on 1,024 A100s (the planning example): each shape's fit is its fullest rank against 80 GB; the table
    says yes or no, the figure draws the device's line and the shapes over it open, cuts the
    bars far over it with their value, and names the fastest shape that fits."""
    from opentikz_dt.memory import device_capacity
    from opentikz_dt.predict.shapes import CAPACITY_SPAN, render_shapes, run_shapes

    path = GPT3_EXAMPLE
    points, refused, spec, assumed, count = run_shapes(path)
    capacity = device_capacity(spec)
    assert capacity == 80e9
    assert all(p.fits == (p.memory_bytes <= capacity) for p in points)
    over = [p for p in points if not p.fits]
    fitting = [p for p in points if p.fits]
    assert over and fitting  # both kinds, or the marks below would test nothing
    assert any(p.memory_bytes > CAPACITY_SPAN * capacity for p in over)  # some bars are cut
    result = CliRunner().invoke(main, ["predict", str(path), "--sweep", "shapes", "-o", str(tmp_path / "out"),
                                       "--format", "pdf"])
    assert result.exit_code == 0, result.output
    table = (tmp_path / "out" / "predicted-shapes.txt").read_text().splitlines()
    assert table[0].split()[-1] == "fits"
    for p in points:
        row = next(line for line in table if line.startswith(p.label + " "))
        assert row.split()[-1] == ("yes" if p.fits else "no"), row
    tex = (tmp_path / "out" / "predicted-shapes.tex").read_text()
    assert tex == render_shapes(points, refused, spec, assumed, count)
    # the device's line at 80 GB on the GB axis; one open dot per shape over it
    assert r"\draw[otink, line width=0.6pt, densely dashed] (axis cs:80,0.4)" in tex
    assert tex.count("fill=otpaper, draw=otorange") == len([p for p in over if points.index(p) < 24])
    opened = tex.split("mark=o,")[1].split("};")[0]
    assert len([line for line in opened.splitlines() if line.strip().startswith("(")]) == len(over)
    cut = max(over, key=lambda p: p.memory_bytes)
    assert f"{{{cut.memory_bytes / 1e9:,.0f}}}" in tex  # its value, written in its cut bar
    assert (f"open dots and bars: over it, does not fit; {len(fitting)} of {len(points)} shapes fit, the fastest "
            f"{fitting[0].label.replace(' x ', 'x')}") in " ".join(tex.split())
    # the notes are escaped once: the caption's measured HBM fraction prints as 88%
    assert r"HBM at 88\% of its datasheet bandwidth" in " ".join(tex.split()) and r"\textbackslash" not in tex
    assert (tmp_path / "out" / "predicted-shapes.pdf").stat().st_size > 0


def test_the_tied_embedding_sum_starts_when_both_ends_are_done_and_the_earlier_one_waits(tmp_path):
    spec = tmp_path / "mesh.yaml"
    spec.write_text(SMALL + "hardware: {device: h100-sxm}\n")
    result = CliRunner().invoke(main, ["predict", str(spec), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    events = [e for e in json.loads((tmp_path / "out" / "trace.json").read_text())["traceEvents"]
              if e.get("ph") == "X" and e["args"].get("phase") == "tied"]
    waits = [e for e in events if e["name"] == "wait"]
    for step in {e["args"]["step"] for e in events}:
        sums = [e for e in events if e["name"] == "allreduce" and e["args"]["step"] == step]
        assert len(sums) == 2 and sums[0]["ts"] == sums[1]["ts"] and sums[0]["dur"] == sums[1]["dur"]
        # the lane that finished its backward first waits, drawn as a wait, until the other joins
        (wait,) = [e for e in waits if e["args"]["step"] == step]
        assert wait["ts"] + wait["dur"] == pytest.approx(sums[0]["ts"], abs=0.01) and wait["dur"] > 0


def test_a_zero3_group_across_hosts_carries_what_the_published_rows_say_of_it(tmp_path):
    """The model gives a sharded data group NCCL's rate over its ranks' ports; the published
    ZeRO-3 runs of that kind reached about one port's: the prediction says so, only there."""
    from opentikz_dt.predict.cluster import sharded_caveat

    assert "crosses 4 hosts on 8 ports a host" in sharded_caveat(Layout(1, 32, 1, 1, 1, shard="parameters"), A100)
    assert sharded_caveat(Layout(1, 8, 1, 1, 1, shard="parameters"), A100) is None   # one host
    assert sharded_caveat(Layout(1, 8, 8, 1, 1, shard="parameters"), A100) is None   # one rank a host
    assert sharded_caveat(Layout(1, 32, 1, 1, 1, shard="optimizer"), A100) is None   # ZeRO-1
    spec = tmp_path / "fsdp.yaml"
    spec.write_text("strategy: {kind: fsdp}\ntopology: {workers: {count: 32}}\n"
                    "training:\n  model: {kind: transformer, layers: 4, d_model: 1024, heads: 8, seq_len: 512, "
                    "vocab: 1024}\n  batch_size: 8\n  precision: bf16\nruntime: {device: cuda}\n"
                    "hardware: {device: a100-sxm-80gb}\n")
    result = CliRunner().invoke(main, ["predict", str(spec), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "caveat: its sharded data group crosses 4 hosts on 8 ports a host" in result.output
    assert json.loads((tmp_path / "out" / "run.json").read_text())["predicted"]["caveat"].endswith("(docs/planning.md)")
