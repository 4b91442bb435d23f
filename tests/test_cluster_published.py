"""The datasheet model against published throughput (tests/data/published_throughput.yaml):
looser bounds than the benchmark's goals (benchmarks/bench_cluster_published.py). The model
takes matmuls at the best-shape efficiency measured on the device (or their HBM roofline)
and no framework overhead, so it is an upper bound: every row is predicted at least as fast as published,
and not more than 45% faster (today: 8-30%; the goal, median 10% and none over 20%, is
not met and the benchmark says so)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from opentikz_dt.predict.cluster import cluster_result
from opentikz_dt.predict.published import check_row, row_setup
from opentikz_dt.spec import spec_from_data

ROWS = yaml.safe_load((Path(__file__).parent / "data" / "published_throughput.yaml").read_text())


@pytest.mark.parametrize("row", ROWS["rows"], ids=lambda r: r["name"])
def test_a_published_row_is_predicted_fast_but_not_too_fast(row):
    checked = check_row(row, ROWS["hardware"])
    assert 0.0 <= checked.error <= 0.45, (checked.predicted, checked.published)


def test_the_rows_count_flops_as_the_paper_and_agree_with_their_own_iteration_time():
    row = ROWS["rows"][0]  # GPT-3 175B: 138 TFLOP/s per GPU and ~32 s per iteration, both published
    model, layout, _ = row_setup(row, ROWS["hardware"])
    flops = model.iteration_flops(row["batch"])
    assert flops / row["iteration_s"] / row["gpus"] / 1e12 == pytest.approx(row["tflops_per_gpu"], rel=0.03)
    assert (layout.pipeline, layout.data, layout.tensor, layout.microbatches) == (16, 8, 8, 192)


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
    # a spec says no recomputation (training.recompute is not a key here yet) and dtgen's
    # transformer has no dropout: the row without either
    without = check_row({**row, "recompute": "none", "dropout": False}, ROWS["hardware"])
    assert assumed["step_s"] == pytest.approx(without.step_s, rel=1e-6)  # run.json keeps 9 digits
