"""Costs from physics: a transformer step on a cluster, from the device's datasheet.

The model (docs/planning.md states it in full, with its sources):
- Compute. Each matrix multiply, at its own shape, on the roofline: its FLOPs at the
  datasheet's dense peak for the precision times an achievable efficiency (the best-shape
  matmul throughput measured on that device and published, MATMUL_EFFICIENCY, with its
  source; never a constant fitted to the rows the model is checked against), or its
  operands and result at HBM bandwidth, whichever is slower. Memory-bound work (layer
  norms, the masked softmax, GELU, residual adds, dropout and its masks, the loss) moves
  its bytes at the HBM bandwidth a streaming kernel measured on the device reaches
  (HBM_EFFICIENCY, with its source; the datasheet's where none is published).
- FLOPs per transformer layer and microbatch of b samples (Narayanan et al., SC'21, Eq. 2-3):
  forward 24·b·s·h² + 4·b·s²·h, split over the tensor degree t; backward twice the
  forward; full recomputation one more forward. The head: 2·b·s·h·V forward (split over t).
- Collectives: latency + bytes·factor/bandwidth over the links the group crosses (NVLink
  inside a host; across hosts one NIC port for each of the group's ranks on a host, as
  NCCL lays its channels, at most NVLink's), with the latencies,
  algorithm factors and bandwidth caps of NCCL's own cost model (predict/nccl.py): ring,
  tree, NCCL's choice of the two, dtgen's hierarchical.
- Tensor parallelism (Megatron-style, dtgen's mesh): two all-reduces of the layer's
  output (b·s·h values) per layer forward, two backward, two more in a recomputed
  forward; none overlaps compute (they sit between the matmuls that need their result).
  With sequence parallelism (Layout.sequence_parallel; Korthikanti et al. 2022, §4.2.2)
  each all-reduce is a reduce-scatter and an all-gather of the same tensor, and the
  norms, residual adds and hidden dropout run on 1/t of the tokens.

Must not import torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..hardware import DevicePreset, LinkPreset
from . import nccl

# Best-shape matmul throughput measured on the device (no sparsity), over the dense
# datasheet peak: S. Bekman, "Machine Learning Engineering", Maximum Achievable Matmul
# FLOPS comparison table (mamf-finder.py, mean of 100 iterations after 50 warm-up), its
# BF16 and FP8 tables. fp16 takes the bf16 figure (the same tensor-core rate); fp32 and
# tf32 have no row and take it too (said so in every prediction's assumptions).
MAMF_SOURCE = ("https://github.com/stas00/ml-engineering/blob/master/compute/accelerator/README.md"
               "#maximum-achievable-matmul-flops-comparison-table")
MATMUL_EFFICIENCY = {
    "a100-sxm-80gb": {"bf16": (271.2 / 312, "A100 SXM bf16: 271.2 of 312 TFLOP/s measured (86.9%)")},
    "h100-sxm": {"bf16": (794.5 / 989, "H100 SXM bf16: 794.5 of 989 TFLOP/s measured (80.3%)"),
                 "fp8": (1402.6 / 1979, "H100 SXM fp8: 1402.6 of 1979 TFLOP/s measured (70.9%)")},
    "h100-pcie": {"bf16": (794.5 / 989, "no H100 PCIe row: the H100 SXM's bf16 794.5 of 989 (80.3%) taken"),
                  "fp8": (1402.6 / 1979, "no H100 PCIe row: the H100 SXM's fp8 1402.6 of 1979 (70.9%) taken")},
    "h200": {"bf16": (794.5 / 989, "H200 bf16: the H100 SXM row, 794.5 of 989 (80.3%), noted 'H200 is the same'"),
             "fp8": (1453.4 / 1979, "H200 SXM fp8: 1453.4 of 1979 TFLOP/s measured (73.4%)")},
    "b200": {"bf16": (1745.0 / 2250, "B200 SXM bf16: 1745.0 of 2250 TFLOP/s measured (77.6%)"),
             "fp8": (3432.5 / 4500, "B200 SXM fp8: 3432.5 of 4500 TFLOP/s measured (76.3%)")},
}


def matmul_efficiency(device: str, precision: str) -> tuple[float, str]:
    """(efficiency, what was measured) for matmuls of `precision` on `device`."""
    table = MATMUL_EFFICIENCY[device]
    if precision == "fp8" and "fp8" in table:
        return table["fp8"]
    value, note = table["bf16"]
    return (value, note) if precision in ("bf16", "fp16") else (value, f"{note}; no {precision} row: taken for it")


# Wave quantization (NVIDIA, "Matrix Multiplication Background User's Guide", §3.2): a GEMM's
# output is cut into thread-block tiles, one tile per SM at a time; a last wave that fills
# only some SMs costs a whole wave. The guide's example: 256 x 128 tiles, one per SM, a
# wave of 108 tiles on an A100. SM counts from NVIDIA's architecture whitepapers; a device
# without a sourced count is not quantized. The best-shape efficiency above was measured at
# full waves, so a GEMM's rate is that efficiency times its own wave fill.
WAVE_SOURCE = "https://docs.nvidia.com/deeplearning/performance/dl-performance-matrix-multiplication/index.html"
TILE = (256, 128)
SMS = {"a100-sxm-80gb": (108, "https://images.nvidia.com/aem-dam/en-zz/Solutions/data-center/"
                              "nvidia-ampere-architecture-whitepaper.pdf (A100: 108 SMs)"),
       "h100-sxm": (132, "https://resources.nvidia.com/en-us-tensor-core (H100 SXM5: 132 SMs)"),
       "h100-pcie": (114, "https://resources.nvidia.com/en-us-tensor-core (H100 PCIe: 114 SMs)")}


def wave_fill(device: str, batch: float, m: float, n: float) -> float:
    """The fraction of the SMs' waves a GEMM's tiles fill (1 where no SM count is sourced)."""
    if device not in SMS:
        return 1.0
    sms = SMS[device][0]
    tiles = batch * math.ceil(m / TILE[0]) * math.ceil(n / TILE[1])
    return tiles / (math.ceil(tiles / sms) * sms)


# Streaming bandwidth measured on the device over its datasheet HBM bandwidth: no kernel
# reaches the datasheet's rate, and memory-bound work (norms, softmax, GELU, dropout,
# residual adds, Adam) runs at about what a streaming kernel reaches. A device with no
# published measurement keeps its datasheet rate (optimistic; a device probe measures it).
A100_STREAM_SOURCE = "https://forums.developer.nvidia.com/t/trouble-to-reach-peak-bandwidth-of-a100/339083"
GPU_BENCHES_SOURCE = "https://github.com/te42kyfo/gpu-benches"
HBM_EFFICIENCY = {
    "a100-sxm-80gb": (1800 / 2039, "A100 80GB SXM: 1.80 of 2.039 TB/s read by a streaming kernel, 88% of the "
                                   f"peak as Nsight Compute reports it ({A100_STREAM_SOURCE})"),
    "h100-pcie": (1704 / 2000, "H100 PCIe: 1,704 of 2,000 GB/s by gpu-benches' scale kernel (a load and a store "
                               f"stream) at full occupancy ({GPU_BENCHES_SOURCE}, README)"),
    "h200": (3780 / 4800, "H200: 3,780 of 4,800 GB/s by gpu-benches' roofline kernel at its lowest intensity "
                          f"({GPU_BENCHES_SOURCE}, gpu-roofline/h200.txt)"),
}


def hbm_efficiency(device: str) -> tuple[float, str]:
    """(efficiency, what was measured) of the HBM bandwidth memory-bound work reaches on `device`."""
    return HBM_EFFICIENCY.get(device, (1.0, f"no published streaming measurement of {device}: its datasheet "
                                            "bandwidth (optimistic)"))


BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1}


@dataclass(frozen=True)
class Model:
    """A GPT-style decoder: layers, hidden size, heads, sequence length, vocabulary."""
    layers: int
    hidden: int
    heads: int
    seq: int
    vocab: int
    dropout: bool = False   # attention and hidden dropout (Megatron's GPT); dtgen's transformer has none

    @property
    def params(self) -> float:
        """12·l·h² (attention 4h², MLP 8h²) + the layers' biases and norms, + V·h tied embedding."""
        h, l = self.hidden, self.layers
        return l * (12 * h * h + 13 * h) + self.vocab * h + self.seq * h

    def iteration_flops(self, batch: int, recompute: bool = True) -> float:
        """Narayanan et al. (SC'21) Eq. 3: 96·B·s·l·h²(1 + s/6h + V/16lh) with recomputation
        (the layers' four passes; the head's three, 6·B·s·h·V); without it the layers take
        three passes: 72·B·s·l·h²(1 + s/6h) + 6·B·s·h·V."""
        b, s, l, h, v = batch, self.seq, self.layers, self.hidden, self.vocab
        passes = 4 if recompute else 3
        return 24 * passes * b * s * l * h * h * (1 + s / (6 * h)) + 6 * b * s * h * v


# How a pipeline stage sends its boundary activations to the next stage (and their gradients
# back), by the framework that runs the schedule:
# torch: torch.distributed.pipelining, which dtgen runs: each tensor rank sends the whole
#   tensor, and the send runs beside the next compute (a schedule waits for a send only
#   before its next one);
# megatron: Megatron-LM's p2p_communication, and DeepSpeed's pipeline engine that
#   Megatron-DeepSpeed runs: each tensor rank sends 1/t of the tensor and the receiver
#   all-gathers the parts inside its tensor group (Narayanan et al. 2021 §4.1, the
#   scatter/gather optimization, on by default; DeepSpeed's partitioned pipe buffers), and
#   the sender waits for its send before it computes again (Megatron waits on each request
#   and then synchronizes the device; DeepSpeed's p2p.send is a blocking dist.send). With
#   sequence parallelism (Korthikanti et al.) the tensor is already 1/t a rank: sent as it
#   is, no gather.
# Each with what run.json's `predicted.pipeline_sends` says of it.
PIPELINE_SENDS = {
    "torch": "as torch's pipelining sends them: each tensor rank the whole boundary tensor, beside its next "
             "compute (Megatron-LM and DeepSpeed send 1/t of it and wait for the send)",
    "megatron": "as Megatron-LM and DeepSpeed send them: 1/t of the boundary tensor from each tensor rank, "
                "gathered by the receiver over NVLink, the sender waiting for its send",
}


@dataclass(frozen=True)
class Layout:
    pipeline: int
    data: int
    tensor: int
    microbatches: int       # per replica and step
    micro_batch: int        # samples per microbatch
    schedule: str = "1f1b"  # a pipeline schedule's name (pipeline_schedules.SCHEDULES)
    algorithm: str = "native"  # the data all-reduce: native (NCCL's choice) | ring | tree | hierarchical
    # What the data dimension shards, ZeRO's stage, and so its collectives: "" nothing (the
    # gradients all-reduced); optimizer (all-reduced, then each rank's updated parameters
    # broadcast: torch's ZeroRedundancyOptimizer); gradients (FSDP: each unit gathered once a
    # step, its gradients reduce-scattered); parameters (gathered again for the backward)
    shard: str = ""
    overlap_data: bool = False  # DDP buckets overlap the backward (kind allreduce, ZeRO-1); a mesh reduces after
    chunks: int = 1         # virtual stages per pipeline rank (interleaved 1F1B: v)
    sequence_parallel: bool = False  # Korthikanti et al. 2022, §4.2.2: norms and dropout on 1/t of the tokens
    pipeline_sends: str = "torch"  # how a stage sends its boundary activations: PIPELINE_SENDS

    @property
    def sharded(self) -> bool:
        """The parameters and gradients sharded (FSDP: all-gather + reduce-scatter)."""
        return self.shard in ("gradients", "parameters")

    @property
    def gpus(self) -> int:
        return self.pipeline * self.data * self.tensor


@dataclass(frozen=True)
class Cluster:
    device: DevicePreset
    gpus_per_host: int
    intra: LinkPreset
    inter: LinkPreset
    precision: str
    # A calibration made on this device (cluster.calibrated_compute): its measured forward
    # and backward over the datasheet's for the same model and microbatch; every compute cost
    # is the datasheet's times this. 1.0: the datasheet's own.
    compute_scale: float = 1.0
    # A device probe of this device (predict/device_probe.py): its best matmul rate
    # (FLOP/s), copy rate (bytes/s) and bus bandwidth inside a host (bytes/s) in place of
    # the datasheet's; None: the datasheet's.
    matmul_measured: float | None = None
    hbm_measured: float | None = None
    intra_measured: float | None = None
    # Network ports of a host, each at the inter link's rate, shared by its GPUs; None: one
    # port a GPU (DGX, HGX). A GPU's share of the network is ports x rate / gpus_per_host.
    nics_per_host: int | None = None

    @property
    def matmul_rate(self) -> float:
        if self.matmul_measured is not None:
            return self.matmul_measured
        return self.device.peak(self.precision) * matmul_efficiency(self.device.name, self.precision)[0]

    @property
    def hbm_rate(self) -> float:
        if self.hbm_measured is not None:
            return self.hbm_measured
        return self.device.hbm_bytes_per_s * hbm_efficiency(self.device.name)[0]

    def link(self, stride: int, size: int) -> LinkPreset:
        """The slowest link a group of `size` ranks `stride` apart crosses (hosts of
        gpus_per_host consecutive ranks): NVLink if they share a host, else the NIC."""
        if size <= 1:
            return self.intra
        return self.intra if self.hosts_spanned(stride, size) == 1 else self.inter

    def hosts_spanned(self, stride: int, size: int) -> int:
        """Hosts a group of `size` ranks `stride` apart spans (an equal share on each)."""
        g = self.gpus_per_host
        inside = stride * (size - 1) < g and g % (stride * size) == 0
        if inside:
            return 1
        per_host = max(1, min(size, g // stride)) if stride < g else 1
        return max(1, -(-size // per_host))

    def bandwidth(self, link: LinkPreset) -> float:
        """Bytes/s a collective moves over a link for each GPU: the datasheet's, capped where
        NCCL's model caps the device's bus bandwidth (nccl.NVLINK_BUS_CAP); across hosts a
        GPU's share of its host's ports (nics_per_host)."""
        if link is self.inter and self.nics_per_host is not None:
            return link.bytes_per_s * self.nics_per_host / self.gpus_per_host
        if link is self.intra and self.intra_measured is not None:
            return self.intra_measured
        if link is self.intra and nccl.link_kind(link.name) == "nvlink":
            return min(link.bytes_per_s, nccl.NVLINK_BUS_CAP.get(self.device.name, link.bytes_per_s))
        return link.bytes_per_s

    def collective(self, kind: str, nbytes: float, stride: int, size: int, algorithm: str = "native") -> float:
        """Seconds of a collective over `size` ranks `stride` apart, as NCCL's model costs it
        (predict/nccl.py): all-reduce by `algorithm`, all-gather, reduce-scatter and broadcast
        as rings."""
        if size <= 1 or nbytes <= 0:
            return 0.0
        nodes = self.hosts_spanned(stride, size)
        args = (nbytes, size, nodes, self.bandwidth(self.intra), nccl.link_kind(self.intra.name),
                self.bandwidth(self.inter))
        if kind == "all-reduce":
            return nccl.all_reduce(algorithm, *args)
        return nccl.ring(kind, *args)

    def p2p(self, nbytes: float, stride: int) -> float:
        """A pipeline send: NCCL's base latency and one hop, the bytes at the link's bandwidth."""
        link = self.link(stride, 2)
        return nccl.RING_BASE_S + nccl.RING_HOP_S[nccl.link_kind(link.name)] + nbytes / self.bandwidth(link)


@dataclass(frozen=True)
class PassCosts:
    """Seconds of one microbatch through one stage, and its collectives."""
    forward: float            # compute (matmul + memory-bound) of the forward
    backward: float           # of the backward, with the recomputed forward if any
    forward_comm: float       # tensor all-reduces inside the forward
    backward_comm: float      # inside the backward (and the recomputed forward)
    matmul_flops: float       # counted by the model (fwd + bwd + recompute), per microbatch


def gemm_seconds(batch: float, m: float, k: float, n: float, cluster: Cluster, e: int) -> float:
    """A (batched) m x k by k x n matmul on the roofline: its FLOPs at the matmul rate, or
    its operands and result (e bytes each) at HBM bandwidth, whichever takes longer. The
    attention's per-head products (k or n = h/a, s x s scores) are where the bytes win."""
    flops = 2 * batch * m * k * n
    moved = e * batch * (m * k + k * n + m * n)
    return max(flops / (cluster.matmul_rate * wave_fill(cluster.device.name, batch, m, n)), moved / cluster.hbm_rate)


def unquantized(cluster: Cluster) -> Cluster:
    """The cluster a matmul outside the transformer's Linear layers runs on. An fp8 recipe
    quantizes only Transformer Engine's Linear modules (QKV, the output projection, the
    MLP's two); its dot-product attention stays in bf16 unless the recipe's `fp8_dpa`, a
    beta feature, is set (it is off in every recipe: transformer_engine/common/recipe),
    and Megatron's output layer is its own ColumnParallelLinear, not a Transformer Engine
    module. So under fp8 the attention core and the head run at the bf16 rate."""
    return replace(cluster, precision="bf16") if cluster.precision == "fp8" else cluster


def layer_gemms(model: Model, layout: Layout, t: int) -> list[tuple]:
    """(batch, m, k, n) of one layer's forward matmuls on one tensor rank, Megatron's split:
    QKV (column-parallel), the heads' scores Q·Kᵀ and their product with V, the output
    projection (row-parallel), the MLP's two. FLOPs: 24·b·s·h²/t + 4·b·s²·h/t."""
    b, s, h, a = layout.micro_batch, model.seq, model.hidden, model.heads
    tokens, heads, d = b * s, b * a / t, h / a
    return [(1, tokens, h, 3 * h / t), (heads, s, d, s), (heads, s, s, d), (1, tokens, h / t, h),
            (1, tokens, h, 4 * h / t), (1, tokens, 4 * h / t, h)]


def elementwise_bytes(model: Model, layout: Layout, t: int, e: int) -> float:
    """HBM bytes of one layer's memory-bound forward work on one tensor rank, each a read of
    its inputs and a write of its output (the activations Korthikanti et al. 2022, §4.1,
    enumerate): two layer norms and two residual adds over b·s·h (whole on every tensor
    rank), GELU over b·s·4h/t, the causal mask and softmax (one fused pass) over the
    b·(a/t)·s² scores; with dropout (Megatron's GPT: attention and hidden dropout 0.1),
    the scores' dropout (read, write, a 1-byte mask) and a 1-byte mask in each fused
    bias-dropout-add. With sequence parallelism (Korthikanti et al. 2022, §4.2.2) the norms,
    the residual adds and the hidden dropout run on 1/t of the tokens on each tensor rank."""
    b, s, h, a = layout.micro_batch, model.seq, model.hidden, model.heads
    tokens, scores = b * s * h, b * a * s * s / t
    split = tokens / (t if layout.sequence_parallel else 1)  # what the norms and residual adds run on
    moved = e * (2 * 2 * split + 2 * 3 * split + 2 * 4 * tokens / t + 2 * scores)
    if model.dropout:
        moved += (2 * e + 1) * scores + 2 * split
    return moved


def backward_gemm_seconds(batch: float, m: float, k: float, n: float, cluster: Cluster, e: int) -> float:
    """The two matmuls a forward m x k by k x n one takes backward: the input's gradient
    (m x n by n x k) and the weight's (k x m by m x n), each at its own shape."""
    return gemm_seconds(batch, m, n, k, cluster, e) + gemm_seconds(batch, k, m, n, cluster, e)


def layer_costs(model: Model, layout: Layout, cluster: Cluster, recompute: str) -> PassCosts:
    """One transformer layer, one microbatch, one tensor rank. The backward runs two matmuls
    per forward one (backward_gemm_seconds) and moves twice the forward's memory-bound bytes."""
    b, s, h, t = layout.micro_batch, model.seq, model.hidden, layout.tensor
    e = BYTES[cluster.precision if cluster.precision != "fp8" else "bf16"]  # fp8 matmuls, bf16 elsewhere
    gemms = layer_gemms(model, layout, t)
    attention = unquantized(cluster)
    on = (cluster, attention, attention, cluster, cluster, cluster)  # the Linear layers', the core's
    matmul = sum(2 * g[0] * g[1] * g[2] * g[3] for g in gemms)
    elementwise = elementwise_bytes(model, layout, t, e) / cluster.hbm_rate
    fwd = sum(gemm_seconds(*g, c, e) for g, c in zip(gemms, on)) + elementwise
    bwd = sum(backward_gemm_seconds(*g, c, e) for g, c in zip(gemms, on)) + 2 * elementwise
    if layout.sequence_parallel:  # each all-reduce a reduce-scatter and an all-gather of the same b·s·h (§4.2.2)
        ar = sum(cluster.collective(kind, e * b * s * h, 1, t) for kind in ("reduce-scatter", "all-gather"))
    else:
        ar = cluster.collective("all-reduce", e * b * s * h, 1, t)
    passes = 3
    if recompute == "full":
        bwd += fwd
        passes = 4
    elif recompute == "selective":  # the attention core (scores, softmax, their product with V) again
        core = sum(gemm_seconds(*g, attention, e) for g in gemms[1:3])
        bwd += core + (e * 2 * b * model.heads * s * s / t) / cluster.hbm_rate
    return PassCosts(fwd, bwd, 2 * ar, (2 + (2 if recompute == "full" else 0)) * ar, passes * matmul)


def head_costs(model: Model, layout: Layout, cluster: Cluster) -> PassCosts:
    """The last stage's head (logits over the vocabulary, split over t) and its loss."""
    b, s, h, v, t = layout.micro_batch, model.seq, model.hidden, model.vocab, layout.tensor
    e = BYTES[cluster.precision if cluster.precision != "fp8" else "bf16"]
    matmul = 2 * b * s * h * v / t
    loss = 4 * b * s * v / t * 2  # softmax + cross-entropy over the logits in fp32, read + write
    fwd = gemm_seconds(1, b * s, h, v / t, unquantized(cluster), e) + loss / cluster.hbm_rate
    bwd = backward_gemm_seconds(1, b * s, h, v / t, unquantized(cluster), e) + 2 * loss / cluster.hbm_rate
    ar = cluster.collective("all-reduce", 4 * b * s, 1, t)  # the vocabulary-parallel loss's sums
    return PassCosts(fwd, bwd, ar, ar, 3 * matmul)


def embed_costs(model: Model, layout: Layout, cluster: Cluster) -> PassCosts:
    """The first stage's token and position embedding: a gather and an add (memory-bound)."""
    b, s, h = layout.micro_batch, model.seq, model.hidden
    e = BYTES[cluster.precision if cluster.precision != "fp8" else "bf16"]
    moved = 3 * e * b * s * h
    ar = cluster.collective("all-reduce", e * b * s * h, 1, layout.tensor)  # vocabulary-parallel embedding
    return PassCosts(moved / cluster.hbm_rate, 2 * moved / cluster.hbm_rate, ar, 0.0, 0.0)


@dataclass(frozen=True)
class Counted:
    """A model known by its FLOP count only (mlp, cnn, a python model built once on the CPU:
    runner/describe.py counts one trial step with torch.utils.flop_counter): one stage, no
    tensor split. Every counted FLOP runs at the matmul rate; memory-bound work is not
    modelled. `backward_flops` is the counted backward where one was counted, else twice
    the forward."""
    name: str
    forward_flops: float     # per sample
    params: float
    backward_flops: float | None = None  # per sample, counted; None: 2 x forward

    @property
    def backward(self) -> float:
        return self.backward_flops if self.backward_flops is not None else 2 * self.forward_flops

    def iteration_flops(self, batch: int, recompute: bool = False) -> float:
        return ((2 if recompute else 1) * self.forward_flops + self.backward) * batch


def counted_pass(model: Counted, layout: Layout, cluster: Cluster, recompute: str) -> PassCosts:
    fwd = model.forward_flops * layout.micro_batch / cluster.matmul_rate
    bwd = model.backward * layout.micro_batch / cluster.matmul_rate + (fwd if recompute == "full" else 0.0)
    return PassCosts(fwd, bwd, 0.0, 0.0, model.iteration_flops(layout.micro_batch, recompute == "full"))


def stage_layers(layers: int, stages: int) -> list[int]:
    """Blocks per stage: an even split, the remainder to the first stages."""
    base, extra = divmod(layers, stages)
    return [base + (1 if s < extra else 0) for s in range(stages)]


def accumulate_seconds(model, layout: Layout, cluster: Cluster, stage: int) -> float:
    """Gradient accumulation, per microbatch: every microbatch of a step but the first adds
    its weight gradients (e bytes each) into the accumulated fp32 ones (read both, write
    one: e + 8 bytes per parameter) at HBM bandwidth, as autograd's `grad +=` and Megatron's
    unfused main_grad add do; spread evenly over the step's backwards."""
    m = layout.microbatches
    if m <= 1:
        return 0.0
    e = BYTES[cluster.precision if cluster.precision != "fp8" else "bf16"]
    return stage_params(model, layout, stage) * (e + 8) / cluster.hbm_rate * (m - 1) / m


def stage_pass(model: Model, layout: Layout, cluster: Cluster, recompute: str, stage: int) -> PassCosts:
    """One microbatch through one stage (its blocks; the embedding on the first, the head on
    the last), its backward with its share of the gradient accumulation; the compute times
    the cluster's compute_scale (the collectives stay the links' own)."""
    accumulate = accumulate_seconds(model, layout, cluster, stage)
    k = cluster.compute_scale
    if isinstance(model, Counted):
        one = counted_pass(model, layout, cluster, recompute)
        return PassCosts(k * one.forward, k * (one.backward + accumulate), 0.0, 0.0, one.matmul_flops)
    n = stage_layers(model.layers, layout.pipeline)[stage]
    one = layer_costs(model, layout, cluster, recompute)
    parts = [(one, n)]
    if stage == 0:
        parts.append((embed_costs(model, layout, cluster), 1))
    if stage == layout.pipeline - 1:
        parts.append((head_costs(model, layout, cluster), 1))
    fwd, bwd, fcomm, bcomm, flops = (sum(getattr(p, f) * k for p, k in parts)
                                     for f in ("forward", "backward", "forward_comm", "backward_comm", "matmul_flops"))
    return PassCosts(k * fwd, k * (bwd + accumulate), fcomm, bcomm, flops)


def stage_params(model: Model, layout: Layout, stage: int) -> float:
    """Parameters one rank of a stage holds: its blocks' over the tensor degree, plus the
    (tied) embedding on the first and the last stage."""
    if isinstance(model, Counted):
        return model.params
    h = model.hidden
    n = stage_layers(model.layers, layout.pipeline)[stage]
    held = n * (12 * h * h + 13 * h) / layout.tensor
    if stage == 0 or stage == layout.pipeline - 1:
        held += model.vocab * h / layout.tensor
    if stage == 0:
        held += model.seq * h
    return held


def optimizer_seconds(params: float, cluster: Cluster) -> float:
    """Adam over a rank's parameters is memory-bound: fp32 weight, gradient and two moments
    read, weight and moments written, the low-precision weight copy written (30 bytes per
    parameter, 16 bytes without a low-precision copy)."""
    per = 30 if BYTES[cluster.precision] < 4 else 28
    return per * params / cluster.hbm_rate


def efficiency_lines() -> list[str]:
    """`dtgen predict --list-presets`: the measured matmul efficiency each device is predicted with."""
    lines = [f"matmul efficiency (measured, best shape): {name} {value:.3f} ({note})"
             for name, table in MATMUL_EFFICIENCY.items() for value, note in table.values()]
    waves = ", ".join(f"{name} {count} SMs" for name, (count, _) in SMS.items())
    return lines + [f"  source: {MAMF_SOURCE}",
                    f"each GEMM at its wave fill ({TILE[0]} x {TILE[1]} tiles; {waves}; others unquantized): "
                    f"{WAVE_SOURCE}",
                    *[f"HBM efficiency (measured, streaming): {name} {value:.3f} ({note})"
                      for name, (value, note) in HBM_EFFICIENCY.items()],
                    "HBM of the other devices at its datasheet bandwidth (no measurement cited; a device probe "
                    "of your own GPU, dtgen calibrate --device-probe, measures it).",
                    "collectives: NCCL's cost model (latencies, tree and ring factors, A100 bus cap): "
                    f"{nccl.NCCL_TUNING}"]
