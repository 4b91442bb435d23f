"""A step on a cluster from its datasheet, simulated with one representative rank per stage.

The ranks of one pipeline stage (its data replicas and tensor peers) run the same
schedule at the same times on a datasheet (no noise, no stragglers), so one rank per
stage stands for all of them: the simulation is p lanes, not p·d·t, and the trace holds
those lanes only (what the timeline draws). 1,024 GPUs of GPT-3 175B are 16 lanes.

The schedule is dtgen's: each rank's microbatches in the order torch runs its schedule
(GPipe, 1F1B; interleaved 1F1B and looped BFS with v virtual stages per rank, the model
cut into p·v stages, rank r holding r, r + p, ...: pipeline_schedules.rank_orders),
activations sent to the next stage after each forward
and their gradients back after each backward (on the receiver's critical path; on the
sender's too where the framework waits for its sends: datasheet.PIPELINE_SENDS), the tied embedding
summed between the first and the last stage, then the data-parallel gradient all-reduce
(a mesh reduces after the pipeline flush: no overlap; kind allreduce's DDP buckets overlap
the backward) or FSDP's gathers and reduce-scatter (Layout.shard), then Adam; ZeRO-1's
Adam updates 1/d of the parameters and each rank then broadcasts its part. The costs of
each piece: datasheet.py. Must not import torch.
"""

from __future__ import annotations

from dataclasses import replace

from ..errors import DtgenError
from ..hardware import DEVICES, LINKS
from ..strategies.pipeline_schedules import SCHEDULES, ScheduleOrderError, single_stage_ops, stages_per_rank
from ..strategies.pipeline_schedules import rank_orders as schedule_orders
from .datasheet import (MAMF_SOURCE, PIPELINE_SENDS, WAVE_SOURCE, Cluster, Counted, Layout, Model,
                        hbm_efficiency, matmul_efficiency, optimizer_seconds, stage_params, stage_pass)
from .device_probe import DeviceProbe, probed_caption, probed_cluster
from .engine import Recorder
from .nccl import NCCL_TUNING
from .plugin import REGISTRY

KINDS = ("single", "allreduce", "fsdp", "tensor", "pipeline", "mesh")
DDP_BUCKET_BYTES = 25 * 2**20  # torch DDP's bucket_cap_mb default: the last bucket reduces after the backward
MAX_LANE_EVENTS = 3_000_000    # trace events a cluster prediction may write (predict.MAX_EVENTS)


def recompute_of(spec) -> str:
    """training.recompute where the spec has it (none | selective | full), else none."""
    return str((spec.data.get("training") or {}).get("recompute") or "none")


def layout_of(spec) -> Layout:
    """The spec's strategy as pipeline x data x tensor degrees (its predict plugin's
    `cluster_layout`)."""
    kind, batch = spec.strategy.kind, spec.training.batch_size
    if kind not in KINDS:
        raise DtgenError(_located(spec, ("strategy", "kind"), f"datasheet costs (hardware:) cover kinds "
                                  f"{', '.join(KINDS)}; '{kind}' is predicted from a calibration (--calibration)"))
    p, d, t, algorithm, shard, overlap = REGISTRY.get(kind).cluster_layout(spec)
    m = spec.strategy.microbatches if p > 1 else 1
    v = stages_per_rank(spec.strategy) if p > 1 else 1  # a multi-stage schedule's virtual stages per rank
    if p > 1 and not simulated(spec.strategy.schedule):
        raise DtgenError(_located(spec, ("strategy", "schedule"), WHOLE_BACKWARD.format(spec.strategy.schedule)))
    return Layout(p, d, t, m, batch // m, spec.strategy.schedule if p > 1 else "gpipe", algorithm, shard,
                  overlap_data=overlap, chunks=v)


def model_of(spec):
    """The transformer's shape (every piece modelled), else the model's counted FLOPs and
    parameters (model_blocks: mlp and cnn from opentikz_dt.workload, a python model as a
    calibration or run described it), which data parallelism alone can split."""
    m = spec.training.model
    if m.get("kind") == "transformer":
        return Model(int(m["layers"]), int(m["d_model"]), int(m["heads"]), int(m["seq_len"]), int(m["vocab"]))
    from .blocks import is_known, model_blocks, step_flops

    if not is_known(spec):
        raise DtgenError(_located(spec, ("training", "model", "kind"), "datasheet costs (hardware:) need the "
                                  "model's FLOPs: a python model is counted once built, which needs PyTorch "
                                  "(dtgen predict counts one trial step where it is installed)"))
    layout = layout_of(spec)
    if layout.pipeline > 1 or layout.tensor > 1:
        raise DtgenError(_located(spec, ("strategy", "kind"), f"datasheet costs split a '{m.get('kind')}' model "
                                  "over data parallelism only (single, allreduce, fsdp, a mesh of data); a "
                                  "pipeline or tensor split is modelled for the built-in transformer"))
    blocks = model_blocks(spec)
    params = float(sum(b.params for b in blocks))
    step = step_flops(spec)  # a python model's counted trial step (runner/describe.count_python_model)
    if step is not None:
        return Counted(str(m.get("kind")), step["forward"], params, step["backward"])
    return Counted(str(m.get("kind")), sum(b.flops for b in blocks), params)


def _located(spec, path: tuple, message: str) -> str:
    """file:line:col: key: message, at the key (or where its section would be)."""
    return str(spec.located.issue(path, message)) if spec.located is not None else f"{'.'.join(path)}: {message}"


def cluster_of(spec) -> Cluster:
    hw = spec.hardware
    return Cluster(DEVICES[hw.device], hw.gpus_per_host, LINKS[hw.intra_host], LINKS[hw.inter_host],
                   hw.precision or spec.training.precision, nics_per_host=hw.nics_per_host)


def representatives(layout: Layout) -> list[int]:
    """The 0-based worker rank standing for each stage (its first rank: tensor innermost)."""
    return [s * layout.data * layout.tensor for s in range(layout.pipeline)]


WHOLE_BACKWARD = ("datasheet costs (hardware:) simulate the schedules with a whole backward (gpipe, 1f1b, "
                  "interleaved-1f1b, looped-bfs); '{}' splits it into input and weight gradients")


def simulated(schedule: str) -> bool:
    """Whether the datasheet simulation runs `schedule`: one stage per rank, or v looped ones,
    each backward whole (the zero-bubble schedules' split one has no datasheet cost yet)."""
    return not SCHEDULES[schedule].splits_backward and SCHEDULES[schedule].placement in ("one", "loop")


def rank_orders(layout: Layout, p: int, m: int) -> tuple:
    """Each rank's operations, ((op, microbatch, global stage), ...), in the order torch runs
    them: GPipe and 1F1B from its code (single_stage_ops), the looped schedules from the table
    torch computes (pipeline_schedules.rank_orders)."""
    if not simulated(layout.schedule):
        raise DtgenError(WHOLE_BACKWARD.format(layout.schedule))
    if SCHEDULES[layout.schedule].placement == "one":
        return tuple(tuple((op, mb, r) for op, mb in single_stage_ops(layout.schedule, r, p, m)) for r in range(p))
    try:
        return schedule_orders(layout.schedule, p, m, layout.chunks)
    except ScheduleOrderError as e:
        raise DtgenError(f"pipeline schedule '{layout.schedule}': {e}") from None


def simulate_cluster(model: Model, layout: Layout, cluster: Cluster, recompute: str, steps: int,
                     record: bool = True) -> Recorder:
    """Simulate `steps` steps; one lane per stage. Times in µs, as every trace."""
    p, d, t, m = layout.pipeline, layout.data, layout.tensor, layout.microbatches
    ids = [f"w{r + 1}" for r in representatives(layout)]
    rec = Recorder(ids, ["worker"] * p, record)
    us = 1e6
    v = layout.chunks
    virtual = replace(layout, pipeline=p * v)  # the model cut into p·v stages, v on each rank
    passes = [stage_pass(model, virtual, cluster, recompute, g) for g in range(p * v)]
    e = 2 if cluster.precision in ("bf16", "fp16", "fp8") else 4
    # a stage boundary's activations (and their gradient); a Counted model has one stage
    act = e * layout.micro_batch * model.seq * model.hidden if p > 1 else 0.0
    owner = [g % p for g in range(p * v)]  # the looped placement: rank r holds stages r, r + p, ...
    # Megatron's sends (datasheet.PIPELINE_SENDS): 1/t of the tensor from each tensor rank,
    # gathered inside the receiver's tensor group, and the sender waits for its send. With
    # sequence parallelism the boundary tensor is already 1/t a rank: no gather.
    megatron = layout.pipeline_sends == "megatron"
    sent = act / t if megatron else act
    gather = cluster.collective("all-gather", act, 1, t) * us if megatron and not layout.sequence_parallel else 0.0
    sends = [cluster.p2p(sent, max(1, abs(owner[g] - owner[g - 1])) * d * t) * us if g else 0.0
             for g in range(p * v)]  # into stage g from stage g - 1
    hops = [send + gather if g else 0.0 for g, send in enumerate(sends)]  # until stage g holds the tensor
    params = [sum(stage_params(model, virtual, g) for g in range(r, p * v, p)) for r in range(p)]
    grad_bytes = [4 * n for n in params]  # dtgen reduces gradients in fp32
    tied = 4 * model.vocab * model.hidden / t if p > 1 else 0.0  # p > 1: a transformer
    tied_us = cluster.collective("all-reduce", tied, (p - 1) * d * t, 2) * us
    orders = rank_orders(layout, p, m)
    free_at = [0.0] * p
    for step in range(steps):
        previous = list(free_at)
        free = list(free_at)
        if layout.sharded and d > 1 and p > 1:  # FSDP in a mesh: gather before the pipeline runs
            for s in range(p):
                end = free[s] + cluster.collective("all-gather", e * params[s], t, d) * us
                free[s] = rec.span(s, "allreduce", 1, free[s], end, step, phase="all-gather", dim="data",
                                   bytes=e * params[s], **{"pass": "forward"})
        pos, done, left = [0] * p, {}, sum(len(o) for o in orders)
        backward_start = [None] * p
        while left:
            progressed = False
            for s in range(p):
                if pos[s] >= len(orders[s]):
                    continue
                op, mb, g = orders[s][pos[s]]
                forward = op == "F"
                first = g == 0 if forward else g == p * v - 1
                dep = None if first else done.get(("F", g - 1, mb) if forward else ("B", g + 1, mb))
                if dep is None and not first:
                    continue
                now = free[s]
                if dep is not None:
                    arrive = dep + (hops[g] if forward else hops[g + 1])
                    if arrive > now:
                        rec.span(s, "recv", 1, now, arrive, step, mb=mb, stage=g + 1,
                                 direction="fwd" if forward else "bwd", dim="pipeline")
                    now = max(now, arrive)
                cost = passes[g]
                compute = (cost.forward if forward else cost.backward) * us
                comm = (cost.forward_comm if forward else cost.backward_comm) * us
                if not forward and backward_start[s] is None:
                    backward_start[s] = now
                end = rec.span(s, "forward" if forward else "backward", 0, now, now + compute + comm, step,
                               mb=mb, stage=g + 1, tensor_allreduce_us=round(comm, 1))
                peer = g + 1 if forward else g - 1
                done[(op, g, mb)] = end
                if 0 <= peer < p * v:
                    out = sends[peer] if forward else sends[g]
                    rec.span(s, "send", 1, end, end + out, step, mb=mb, stage=g + 1,
                             direction="fwd" if forward else "bwd", dim="pipeline")
                    rec.moved(s, sent, 0)
                    rec.moved(owner[peer], 0, sent)
                    if megatron:
                        end += out
                free[s] = end
                pos[s] += 1
                left -= 1
                progressed = True
            if not progressed:
                raise DtgenError(f"pipeline schedule '{layout.schedule}' deadlocked in the simulation")
        if tied:  # the first and last stage sum the embedding's gradient: the earlier one waits for the other
            start = max(free[0], free[-1])
            end = start + tied_us
            for s in (0, p - 1):
                if start > free[s]:
                    rec.span(s, "wait", 1, free[s], start, step, phase="tied", dim="pipeline")
                rec.span(s, "allreduce", 1, start, end, step, phase="tied", dim="pipeline", bytes=tied,
                         **{"pass": "backward"})
                free[s] = end
        if d > 1:
            for s in range(p):
                if layout.sharded:
                    # FSDP: gradients reduce-scattered; alone (p = 1) the gathers and the scatter overlap
                    # the compute through prefetch, so only what outlasts the backward is added;
                    # each unit is gathered for its forward, and again for its backward at ZeRO-3
                    gather = cluster.collective("all-gather", e * params[s], t, d) * us
                    scatter = cluster.collective("reduce-scatter", grad_bytes[s], t, d) * us
                    busy = free[s] - previous[s]
                    gathers = 1 if layout.shard == "gradients" else 2
                    extra = scatter if p > 1 else max(0.0, gathers * gather + scatter - busy)
                    phase = "reduce-scatter"
                else:
                    reduce = cluster.collective("all-reduce", grad_bytes[s], t, d, layout.algorithm) * us
                    if layout.overlap_data:  # DDP: buckets reduce while the backward runs; the last after it
                        hidden_until = (backward_start[s] or free[s]) + reduce
                        tail = cluster.collective("all-reduce", min(DDP_BUCKET_BYTES, grad_bytes[s]), t, d,
                                                  layout.algorithm) * us
                        extra = max(tail, hidden_until - free[s])
                    else:
                        extra = reduce
                    phase = "all-reduce"
                start = free[s]
                free[s] = rec.span(s, "allreduce", 1, start, start + extra, step, phase=phase, dim="data",
                                   bytes=grad_bytes[s], **{"pass": "backward"})
                rec.moved(s, grad_bytes[s], grad_bytes[s])
        for s in range(p):
            held = params[s] / (d if layout.shard else 1)
            end = free[s] + optimizer_seconds(held, cluster) * us
            if layout.shard == "optimizer" and d > 1:
                end = _zero_broadcasts(rec, s, step, end, 4 * params[s], cluster, t, d)
            end = rec.span(s, "optimizer", 0, free[s], end, step)
            free_at[s] = end
            rec.step(ids[s], step, previous[s], end)
    return rec


def _zero_broadcasts(rec: Recorder, s: int, step: int, updated: float, nbytes: float, cluster: Cluster,
                     stride: int, d: int) -> float:
    """ZeroRedundancyOptimizer's parameter sync after the update: each of the d ranks
    broadcasts the 1/d of the fp32 weights it updated, one source after the other; drawn as
    one span (phase broadcast, `sources` d) inside the `optimizer` span. Returns its end."""
    one = cluster.collective("broadcast", nbytes / d, stride, d) * 1e6
    end = rec.span(s, "allreduce", 1, updated, updated + d * one, step, phase="broadcast", dim="data", bytes=nbytes,
                   sources=d)
    rec.moved(s, nbytes / d, nbytes * (d - 1) / d)
    return end


def step_seconds(model: Model, layout: Layout, cluster: Cluster, recompute: str) -> float:
    """The steady step time: the second of two simulated steps, without recording."""
    rec = simulate_cluster(model, layout, cluster, recompute, 2, record=False)
    ends = rec.result.step_end
    return (ends[1] - ends[0]) / 1e6


def flops_source(model) -> str:
    """Where the model's FLOPs come from, for run.json's `predicted`."""
    if isinstance(model, Counted) and model.backward_flops is not None:
        return (f"counted: one trial step on one sample with torch.utils.flop_counter, forward "
                f"{model.forward_flops:.6g}, backward {model.backward_flops:.6g} FLOPs per sample")
    if isinstance(model, Counted):
        return f"the model description's forward, {model.forward_flops:.6g} FLOPs per sample; backward twice it"
    return "the transformer's matmuls by shape (Narayanan et al., SC'21, Eq. 2-3)"


def assumptions(spec, layout: Layout, cluster: Cluster, recompute: str, model=None) -> dict:
    """What a datasheet prediction assumed, for run.json's `predicted` and captions."""
    hw = spec.hardware
    efficiency, measured = matmul_efficiency(cluster.device.name, cluster.precision)
    efficiency_source = f"{measured}; {MAMF_SOURCE}"
    if cluster.matmul_measured is not None:
        efficiency = cluster.matmul_measured / cluster.device.peak(cluster.precision)
        efficiency_source = "the device probe's best matmul rate over the datasheet peak"
    return {"model_flops": flops_source(model) if model is not None else None,
            "calibration": "datasheet (no calibration)", "source": "datasheet", "illustrative": False,
            "hardware": {"device": hw.device, "gpus_per_host": hw.gpus_per_host, "intra_host": hw.intra_host,
                         "inter_host": hw.inter_host, "nics_per_host": hw.nics_per_host or hw.gpus_per_host,
                         "precision": cluster.precision},
            "device_source": cluster.device.source, "intra_source": cluster.intra.source,
            "inter_source": cluster.inter.source,
            "matmul_efficiency": round(efficiency, 4), "matmul_efficiency_source": efficiency_source,
            "matmul_shapes": f"each GEMM at its wave fill or on the HBM roofline, whichever is slower: {WAVE_SOURCE}",
            "hbm_efficiency": round(cluster.hbm_rate / cluster.device.hbm_bytes_per_s, 4),
            "hbm_efficiency_source": ("the device probe's copy rate over the datasheet bandwidth"
                                      if cluster.hbm_measured is not None else hbm_efficiency(cluster.device.name)[1]),
            "collectives": f"NCCL's cost model (ring, tree; Simple protocol): {NCCL_TUNING}",
            "data_all_reduce": layout.algorithm,
            "pipeline_sends": PIPELINE_SENDS[layout.pipeline_sends] if layout.pipeline > 1 else None,
            "recompute": recompute,
            "ranks": layout.gpus, "lanes": layout.pipeline,
            "representatives": "one rank per pipeline stage stands for its data replicas and tensor peers",
            "lane_stages": {f"w{r + 1}": s + 1 for s, r in enumerate(representatives(layout))},
            "caveat": sharded_caveat(layout, cluster),
            "caption": f"expected on {hw.describe(layout.gpus)}, datasheet costs"}


def sharded_caveat(layout: Layout, cluster: Cluster) -> str | None:
    """What the published rows say of a ZeRO-3 data group spanning hosts with several ranks
    on each: the model gives its collectives NCCL's rate over all those ranks' ports; the
    published DeepSpeed ZeRO-3 runs reached about one port's rate (docs/planning.md)."""
    hosts = cluster.hosts_spanned(layout.tensor, layout.data)
    if layout.shard != "parameters" or hosts < 2 or layout.data // hosts < 2:
        return None
    return (f"its sharded data group crosses {hosts:,} hosts on {layout.data // hosts} ports a host, at NCCL's "
            "rate; the published ZeRO-3 runs of that kind (SC'21 Table 2) were communication-bound at about one "
            "port's rate, their steps 1.7-5.4 times this model's (docs/planning.md)")


RECORDED_STEPS = 3  # a datasheet step repeats exactly: the first (warm-up in a figure's window) and two more


def size_check(spec, layout: Layout, steps: int) -> None:
    """Refuse a trace too large even with one lane per stage, naming the bound."""
    events = layout.pipeline * steps * layout.microbatches * 4
    if events > MAX_LANE_EVENTS:
        raise DtgenError(f"{spec.source}: hardware: the prediction would write about {events:,} trace events with one lane "
                         f"per stage ({layout.pipeline} stages x {layout.microbatches} microbatches x {steps} steps; "
                         f"at most {MAX_LANE_EVENTS:,}): use fewer microbatches or --steps")


def calibrated_compute(cal, spec, model, layout: Layout, cluster: Cluster) -> tuple[Cluster, dict]:
    """A calibration made on the hardware's own device replaces the datasheet's compute.

    The calibration's per-block fits (seconds = c0 + c1·samples, the whole model on one
    device, as every calibrated prediction reads them) give the spec's forward and backward
    at its microbatch of b samples; the datasheet model gives the same pass (one device, no
    tensor split, no recomputation). Their ratio scales every compute cost of the cluster
    prediction, so what the device measured on this model carries to every layout, with the
    datasheet's shape effects (wave fill, a tensor split, recomputation) on top. The links,
    the collectives and the optimizer's memory-bound Adam stay the datasheets'."""
    from .datasheet import stage_pass

    b = layout.micro_batch
    fits = cal.blocks
    measured = sum(f[0] + f[1] * b for block in fits for f in (block["forward"], block["backward"]))
    one = stage_pass(model, Layout(1, 1, 1, 1, b), replace(cluster, compute_scale=1.0), "none", 0)
    sheet = one.forward + one.backward
    if not measured > 0 or not sheet > 0:
        raise DtgenError(f"{cal.path}: compute: its blocks' forward and backward at {b} sample(s) sum to "
                         f"{measured:.3g} s; a calibration's compute must be positive")
    scale = measured / sheet
    from .calibration import describe_device

    device = describe_device(cal.data["device"])
    note = {"calibration": cal.path, "device": device, "samples": b,
            "measured_s": float(f"{measured:.6g}"), "datasheet_s": float(f"{sheet:.6g}"),
            "scale": round(scale, 4),
            "model": f"forward and backward of the whole model at {b} sample(s) on one GPU: measured "
                     f"{measured * 1e3:.4g} ms ({device}, {cal.path}), the datasheet's {sheet * 1e3:.4g} ms; "
                     f"every compute cost x {scale:.3f}; links, collectives and Adam from the datasheets"}
    return replace(cluster, compute_scale=scale), note


def measured_caption(spec, layout: Layout, compute: dict) -> str:
    """The caption of a cluster prediction whose compute a calibration set (calibrated_compute)."""
    return f"expected on {spec.hardware.describe(layout.gpus)}, compute measured on {compute['device']}, " \
           "links from datasheets"


def rated_cluster(cal, spec, model, layout: Layout) -> tuple[Cluster, dict]:
    """The spec's cluster with what was measured on its device, and what run.json's
    `predicted` says of it: a calibration's compute (calibrated_compute) or a device probe's
    matmul, HBM and NVLink rates (device_probe.probed_cluster); the datasheet's own for none."""
    cluster = cluster_of(spec)
    if cal is None:
        return cluster, {}
    if isinstance(cal, DeviceProbe):
        cluster, note = probed_cluster(cal, cluster)
        return cluster, {"device_probe": note, "caption": probed_caption(spec, layout.gpus, note)}
    cluster, compute = calibrated_compute(cal, spec, model, layout, cluster)
    return cluster, {"calibration": cal.path, "measured_compute": compute,
                     "caption": measured_caption(spec, layout, compute)}


def cluster_result(spec, steps: int | None = None, cal=None):
    """(Recorder, steps simulated, what was assumed) of the spec's hardware prediction;
    `cal`, a calibration made on the hardware's device, replaces the datasheet's compute,
    a device probe of it the datasheet's rates (rated_cluster)."""
    model, layout = model_of(spec), layout_of(spec)
    cluster, measured = rated_cluster(cal, spec, model, layout)
    recompute = recompute_of(spec)
    steps = min(RECORDED_STEPS, spec.training.steps if steps is None else steps)
    steps = max(2, steps)
    size_check(spec, layout, steps)
    rec = simulate_cluster(model, layout, cluster, recompute, steps)
    assumed = assumptions(spec, layout, cluster, recompute, model)
    assumed.update(measured)
    ends = rec.result.step_end
    step_s = (ends[steps - 1] - ends[steps - 2]) / 1e6
    flops = model.iteration_flops(layout.data * layout.microbatches * layout.micro_batch, recompute == "full")
    assumed["step_s"] = float(f"{step_s:.9g}")
    assumed["model_tflops_per_gpu"] = round(flops / step_s / layout.gpus / 1e12, 2)
    assumed["steps_simulated"] = steps
    return rec, steps, assumed


def predict_cluster(spec, out, cal=None) -> tuple:
    """`dtgen predict` of a spec with `hardware:` (and no calibration, or one made on its
    device): the run directory (one lane per stage) and the warnings to print."""
    from pathlib import Path

    from ..rules import check_warnings
    from .rundir import write_run_dir

    rec, steps, assumed = cluster_result(spec, cal=cal)
    out = Path(out) if out is not None else Path("runs") / f"{spec.name}-predicted"
    from ..memory import predicted_memory

    path = write_run_dir(out, spec, rec.result, steps, predicted=assumed,
                         extra_metrics={"memory": predicted_memory(spec)})
    return path, check_warnings(spec) + (list(cal.warnings) if cal is not None else [])
