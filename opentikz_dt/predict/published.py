"""Published throughput rows against the datasheet model: shared by the benchmark
(benchmarks/bench_cluster_published.py) and its CI test. A row is a model, a layout and a
cluster; the prediction is the same model for every row (predict/datasheet.py and
predict/cluster.py), with nothing taken from the row but what the source says it ran.
Must not import torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..hardware import DEVICES, LINKS, LinkPreset, resolve_hardware
from .cluster import simulate_cluster
from .datasheet import PIPELINE_SENDS, Cluster, Layout, Model


@dataclass(frozen=True)
class Checked:
    name: str
    published: float        # TFLOP/s per GPU
    predicted: float
    step_s: float
    published_step_s: float | None

    @property
    def error(self) -> float:
        return (self.predicted - self.published) / self.published


SHARDS = {"parameters", "optimizer"}  # a row's `shard`: ZeRO-3 (as FSDP) or ZeRO-1 (optimizer state only)
# Every source here ran its pipeline with Megatron-LM's or DeepSpeed's point-to-point sends;
# a row run by another framework says so in `pipeline_sends`.
SENDS = "megatron"


def row_setup(row: dict, hardware: dict) -> tuple:
    """(Model, Layout, Cluster) of one published row; a row's own `hardware` (another
    cluster than the file's) replaces the file's."""
    hw = resolve_hardware(row.get("hardware") or hardware)
    model = Model(row["layers"], row["hidden"], row["heads"], row["seq"], row["vocab"], bool(row.get("dropout")))
    d = row["gpus"] // (row["tensor"] * row["pipeline"])
    per_replica = row["batch"] // d
    # the replica's batch in microbatches of micro_batch samples (gradient accumulation without
    # a pipeline): the GEMMs' shapes (their wave fill) depend on it
    # interleave: the sources' interleaved 1F1B with v model chunks per pipeline rank
    v = int(row.get("interleave", 1))
    schedule = ("interleaved-1f1b" if v > 1 else "1f1b") if row["pipeline"] > 1 else "gpipe"
    shard = "parameters" if row.get("sharded") else str(row.get("shard") or "")
    if shard and shard not in SHARDS:
        raise ValueError(f"{row['name']}: shard: {shard!r}, not one of {sorted(SHARDS)}")
    sends = str(row.get("pipeline_sends") or SENDS)
    if sends not in PIPELINE_SENDS:
        raise ValueError(f"{row['name']}: pipeline_sends: {sends!r}, not one of {list(PIPELINE_SENDS)}")
    layout = Layout(row["pipeline"], d, row["tensor"], per_replica // row["micro_batch"], row["micro_batch"], schedule,
                    shard=shard, chunks=v, sequence_parallel=bool(row.get("sequence_parallel")),
                    pipeline_sends=sends)
    inter = LINKS[hw.inter_host]
    nic = row.get("nic")
    if nic:  # a network no vendor preset describes (a site's ports per host): the row's source says it
        inter = LinkPreset(f"{row['name']} network", str(nic["what"]), float(nic["gbit_per_gpu"]) * 1e9 / 8, None,
                           str(nic["source"]), str(nic["what"]))
    cluster = Cluster(DEVICES[hw.device], hw.gpus_per_host, LINKS[hw.intra_host], inter, row["precision"])
    return model, layout, cluster


def check_row(row: dict, hardware: dict) -> Checked:
    """Predicted against published throughput. A row that publishes an iteration time only
    (Korthikanti et al. give time and MFU) is compared at the FLOPs the model counts for
    it (Eq. 3 with full recomputation, the three passes otherwise): the error is then the
    ratio of the two times."""
    model, layout, cluster = row_setup(row, hardware)
    rec = simulate_cluster(model, layout, cluster, row["recompute"], 2, record=False)
    ends = rec.result.step_end
    step = (ends[1] - ends[0]) / 1e6
    flops = model.iteration_flops(row["batch"], row["recompute"] == "full")
    published = row.get("tflops_per_gpu") or flops / row["iteration_s"] / row["gpus"] / 1e12
    return Checked(row["name"], float(published), flops / step / row["gpus"] / 1e12, step, row.get("iteration_s"))
