"""Published GPT training throughput against dtgen's datasheet model (no calibration).

    python benchmarks/bench_cluster_published.py [--rows tests/data/published_throughput.yaml]

For each row (Megatron-LM README's GPT-3 175B on 1,024 A100s; Narayanan et al. SC'21
Table 1), predicts the iteration time from the A100 datasheet, the published best-shape
matmul efficiency and the links' datasheet bandwidths (predict/datasheet.py, cluster.py),
and prints predicted against published TFLOP/s per GPU (counted with the paper's Eq. 3).
The same model for every row; nothing is fitted to them. Also times one prediction of
the 175B row through `dtgen predict` (the spec path, one lane per stage). Goals: median
|error| <= 10%, none over 20%; the table says whether they are met.

    python benchmarks/bench_cluster_published.py --mechanisms

also prints the rows' errors with each mechanism of the model left out in turn (what each
one moves), and with the assumptions the sources leave open taken the other way.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from opentikz_dt.predict import datasheet, nccl  # noqa: E402
from opentikz_dt.predict.cluster import step_seconds  # noqa: E402
from opentikz_dt.predict.datasheet import Layout  # noqa: E402
from opentikz_dt.predict.published import check_row, row_setup  # noqa: E402

GPT3_SPEC = """\
name: gpt3-175b
strategy:
  kind: mesh
  parallelism: {pipeline: 16, data: 8, tensor: 8}
  microbatches: 192
topology: {workers: {count: 1024}}
training:
  model: {kind: transformer, layers: 96, d_model: 12288, heads: 96, seq_len: 2048, vocab: 51200}
  batch_size: 192
  precision: fp16
  steps: 10
runtime: {device: cuda}
hardware: {device: a100-sxm-80gb, gpus_per_host: 8, intra_host: nvlink3-a100, inter_host: ib-hdr}
"""


def time_gpt3_prediction() -> tuple[float, int]:
    """Seconds of `dtgen predict` (in process) of GPT-3 175B on 1,024 GPUs, and its trace's bytes."""
    from opentikz_dt.predict.predict import predict

    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "gpt3.yaml"
        spec.write_text(GPT3_SPEC)
        t0 = time.perf_counter()
        path, _ = predict(spec, Path(tmp) / "out")
        seconds = time.perf_counter() - t0
        return seconds, (path / "trace.json").stat().st_size


def _errors(rows, hardware) -> str:
    errors = [check_row(row, hardware).error for row in rows]
    return " ".join(f"{e:+7.1%}" for e in errors) + f"   median {statistics.median(map(abs, errors)):.1%}"


def mechanisms(data: dict) -> None:
    """Each mechanism left out in turn, and the sources' open assumptions taken the other way."""
    rows, hw = data["rows"], data["hardware"]
    no_latency = {"nvlink": 0.0, "pci": 0.0, "net": 0.0}
    variants = [
        ("the model as it is", ()),
        ("no gradient accumulation (Megatron's fused wgrad)", (mock.patch.object(datasheet, "accumulate_seconds",
                                                                                 lambda *a: 0.0),)),
        ("no wave quantization", (mock.patch.object(datasheet, "wave_fill", lambda *a: 1.0),)),
        ("no NCCL bus cap on the A100's NVLink", (mock.patch.dict(nccl.NVLINK_BUS_CAP, {}, clear=True),)),
        ("no collective latency", (mock.patch.object(nccl, "RING_BASE_S", 0.0),
                                   mock.patch.dict(nccl.RING_HOP_S, no_latency),
                                   mock.patch.dict(nccl.TREE_HOP_S, no_latency))),
    ]
    print("\nrows in order:", "; ".join(r["name"] for r in rows))
    for label, patches in variants:
        for p in patches:
            p.start()
        try:
            print(f"{label:52} {_errors(rows, hw)}")
        finally:
            for p in patches:
                p.stop()
    print(f"{'rows without dropout':52} {_errors([{**r, 'dropout': False} for r in rows], hw)}")
    one_pass = [{**r, "micro_batch": r["batch"] // (r["gpus"] // (r["tensor"] * r["pipeline"]))}
                if r["pipeline"] == 1 else r for r in rows]
    print(f"{'rows without a pipeline: one pass of the batch':52} {_errors(one_pass, hw)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default=str(ROOT / "tests" / "data" / "published_throughput.yaml"))
    parser.add_argument("--mechanisms", action="store_true", help="also each mechanism left out in turn")
    args = parser.parse_args()
    data = yaml.safe_load(Path(args.rows).read_text())
    checked = [check_row(row, data["hardware"]) for row in data["rows"]]
    print(f"{'row':34} {'published':>10} {'predicted':>10} {'error':>8} {'step s (pred/pub)':>18}")
    for c in checked:
        step = f"{c.step_s:.2f}" + (f" / {c.published_step_s:g}" if c.published_step_s else "")
        print(f"{c.name:34} {c.published:10.1f} {c.predicted:10.1f} {c.error:+8.1%} {step:>18}")
    errors = [abs(c.error) for c in checked]
    median, worst = statistics.median(errors), max(errors)
    print(f"median |error| {median:.1%} (goal <= 10%: {'met' if median <= 0.10 else 'NOT met'}); "
          f"largest {worst:.1%} (goal <= 20%: {'met' if worst <= 0.20 else 'NOT met'})")
    seconds, size = time_gpt3_prediction()
    print(f"dtgen predict GPT-3 175B on 1,024 A100s: {seconds:.2f} s (goal <= 5 s), trace.json {size / 1e6:.1f} MB")
    # the simulation is one lane per stage: 16 times the GPUs (data 128) costs what 1,024 do
    model, _, cluster = row_setup(data["rows"][0], data["hardware"])
    t0 = time.perf_counter()
    step = step_seconds(model, Layout(16, 128, 8, 12, 1), cluster, "full")
    print(f"GPT-3 175B on 16,384 A100s (t8 p16 d128, same global batch): step {step:.2f} s, "
          f"simulated in {time.perf_counter() - t0:.2f} s")
    if args.mechanisms:
        mechanisms(data)


if __name__ == "__main__":
    main()
