"""The datasheet model against published throughput (tests/data/published_throughput.yaml):
looser bounds than the benchmark's goals (benchmarks/bench_cluster_published.py: median
|error| <= 10%, none over 20%). Here: every row within 25% of published and the median
within 15%, except the rows the model is known to miss by more (MISSES: they stay in the
benchmark with their error, and fail here the day they come within the bound, so that the
list is cut). The benchmark's result file has the table."""

from __future__ import annotations

import statistics
from functools import lru_cache
from pathlib import Path

import pytest
import yaml

from opentikz_dt.predict.cluster import cluster_result
from opentikz_dt.predict.published import check_row, row_setup
from opentikz_dt.spec import spec_from_data

ROWS = yaml.safe_load((Path(__file__).parent / "data" / "published_throughput.yaml").read_text())
# ZeRO-3 (DeepSpeed's, SC'21 Table 2): its gathers and scatter cross hosts on all 8 ports of a
# host (NCCL's channels, predict/nccl.py) and hide behind the compute (prefetch), so the model
# has every such step compute-bound; the published steps are 1.7 to 5.4 times longer (the
# benchmark's "sharded rows" table) and stay near 67 s (174.6B) and 180 s (529.6B) as the
# width doubles and the compute halves, as a communication-bound step would: what held
# those collectives back is not in the model.
# BLOOM (BigScience's tr11 log, Jean Zay): the model of what it ran (DeepSpeed's partitioned,
# blocking pipeline sends; ZeRO-1's collectives over Omni-Path at its ports' rate) takes 83 s
# of its 104.7 s step; nothing cited accounts for the rest.
MISSES = {row["name"] for row in ROWS["rows"] if row.get("sharded")} | {"BLOOM 176B, 384 GPUs (BigScience tr11 log)"}


@lru_cache(maxsize=None)
def checked(name: str):
    """One row checked once (the interleaved rows take torch's schedule table, a subprocess)."""
    return check_row(next(r for r in ROWS["rows"] if r["name"] == name), ROWS["hardware"])


@pytest.mark.parametrize("row", [pytest.param(r, marks=pytest.mark.xfail(strict=True, reason="a known miss"))
                                 if r["name"] in MISSES else r for r in ROWS["rows"]], ids=lambda r: r["name"])
def test_a_published_row_is_predicted_within_a_quarter(row):
    result = checked(row["name"])
    assert abs(result.error) <= 0.25, (result.predicted, result.published)


def test_the_rows_median_error_is_within_15_percent():
    errors = [abs(checked(row["name"]).error) for row in ROWS["rows"]]
    assert statistics.median(errors) <= 0.15, errors


def test_the_rows_count_flops_as_the_paper_and_agree_with_their_own_iteration_time():
    row = ROWS["rows"][0]  # GPT-3 175B: 138 TFLOP/s per GPU and ~32 s per iteration, both published
    model, layout, _ = row_setup(row, ROWS["hardware"])
    flops = model.iteration_flops(row["batch"])
    assert flops / row["iteration_s"] / row["gpus"] / 1e12 == pytest.approx(row["tflops_per_gpu"], rel=0.03)
    assert (layout.pipeline, layout.data, layout.tensor, layout.microbatches) == (16, 8, 8, 192)


@pytest.mark.parametrize("row", [r for r in ROWS["rows"] if "train_days_300b" in r], ids=lambda r: r["name"])
def test_a_table_2_row_agrees_with_its_own_training_time(row):
    """SC'21 Table 2 gives each row's days for 300B tokens: 300e9 / (B·s) iterations at Eq. 3's
    FLOPs over the published TFLOP/s. A mistyped model, width or throughput shows here."""
    model, _, _ = row_setup(row, ROWS["hardware"])
    seconds = model.iteration_flops(row["batch"]) / (row["tflops_per_gpu"] * 1e12 * row["gpus"])
    days = 300e9 / (row["batch"] * row["seq"]) * seconds / 86400
    assert days == pytest.approx(row["train_days_300b"], abs=1.0)


@pytest.mark.parametrize("row", [r for r in ROWS["rows"] if "mfu" in r], ids=lambda r: r["name"])
def test_a_table_5_row_agrees_with_its_own_model_flops_utilization(row):
    """Korthikanti et al.'s MFU counts the model's three passes (their Appendix A, dtgen's
    count without recomputation) over the iteration time and the A100's 312 TFLOP/s."""
    model, layout, _ = row_setup(row, ROWS["hardware"])
    mfu = model.iteration_flops(row["batch"], recompute=False) / row["iteration_s"] / row["gpus"] / 312e12
    assert mfu == pytest.approx(row["mfu"], abs=0.005)
    assert layout.data == 1  # "no data parallelism is used in our evaluations" (Table 3)


def test_the_spec_path_predicts_what_the_row_does():
    row = ROWS["rows"][3]  # 145.6B, t8 p8 on 1,536 GPUs: a spec can say it
    d = row["gpus"] // 64
    spec = spec_from_data({
        "strategy": {"kind": "mesh", "parallelism": {"pipeline": 8, "data": d, "tensor": 8},
                     "microbatches": row["batch"] // d},
        "topology": {"workers": {"count": row["gpus"]}},
        "training": {"model": {"kind": "transformer", "layers": 80, "d_model": 12288, "heads": 96,
                               "seq_len": 2048, "vocab": 51200},
                     "batch_size": row["batch"] // d, "precision": "fp16"},
        "runtime": {"device": "cuda"},
        "hardware": ROWS["hardware"]})
    _, _, assumed = cluster_result(spec)
    # a spec says no recomputation (training.recompute is not a key here yet), dtgen's
    # transformer has no dropout and dtgen runs torch's pipelining: the row without either,
    # with torch's sends
    without = check_row({**row, "recompute": "none", "dropout": False, "pipeline_sends": "torch"}, ROWS["hardware"])
    assert assumed["step_s"] == pytest.approx(without.step_s, rel=1e-6)  # run.json keeps 9 digits


def test_every_source_ran_its_pipeline_with_megatrons_sends_and_a_row_may_say_otherwise():
    assert {row_setup(row, ROWS["hardware"])[1].pipeline_sends for row in ROWS["rows"]} == {"megatron"}
    row = ROWS["rows"][0]
    assert row_setup({**row, "pipeline_sends": "torch"}, ROWS["hardware"])[1].pipeline_sends == "torch"
    with pytest.raises(ValueError, match=r"GPT-3 175B .*pipeline_sends: 'deepspeed', not one of"):
        row_setup({**row, "pipeline_sends": "deepspeed"}, ROWS["hardware"])


def test_a_sharded_row_is_the_spec_paths_fsdp():
    """A ZeRO-3 row is what kind fsdp predicts for the same model on the same GPUs."""
    row = next(r for r in ROWS["rows"] if r.get("sharded") and r["gpus"] == 768)
    spec = spec_from_data({
        "strategy": {"kind": "fsdp"},
        "topology": {"workers": {"count": row["gpus"]}},
        "training": {"model": {"kind": "transformer", "layers": 96, "d_model": 12288, "heads": 96,
                               "seq_len": 2048, "vocab": 51200},
                     "batch_size": row["micro_batch"], "precision": "fp16"},
        "runtime": {"device": "cuda"},
        "hardware": ROWS["hardware"]})
    _, _, assumed = cluster_result(spec)
    without = check_row({**row, "recompute": "none", "dropout": False}, ROWS["hardware"])
    assert assumed["step_s"] == pytest.approx(without.step_s, rel=1e-6)


@pytest.mark.parametrize("row", [r for r in ROWS["rows"] if "tflops_logged" in r], ids=lambda r: r["name"])
def test_a_logged_row_counts_the_flops_its_log_printed(row):
    """A training log's TFLOPs over its iteration time are Eq. 3's count (Megatron's, with the
    recomputed forward): a mistyped model, batch or time shows here."""
    model, layout, _ = row_setup(row, ROWS["hardware"])
    tflops = model.iteration_flops(row["batch"], row["recompute"] == "full") / row["iteration_s"] / row["gpus"] / 1e12
    assert tflops == pytest.approx(row["tflops_logged"], rel=0.005)
    assert (layout.pipeline, layout.data, layout.tensor, layout.microbatches, layout.shard) == (12, 8, 4, 128, "optimizer")
