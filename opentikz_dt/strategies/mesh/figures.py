"""Figures of hybrid parallelism on a device mesh (kind: mesh).

Topology (figures/topology_mesh.py): one grid per pipeline stage, tensor index across and
data index down, each dimension's groups outlined in their own colour and line style,
hosts as boxes, a legend; bounded at 1,024 workers. A run's topology adds each
dimension's bytes per worker and step to its legend line (annotate_measured).

Expected schedule: one step as every worker runs it, each collective labelled with its
dimension (an all-reduce box whose phase names it, e.g. "tensor all-reduce"): its slice
of the forward, its tensor group's all-reduces (`tp AR`), the backward and its tensor
all-reduces, then the data dimension (`dp AR`: one gradient all-reduce; with fsdp the
all-gather `dp AG` before the forward and the reduce-scatter `dp RS`, whole-model here
for simplicity: the runner gathers and scatters unit by unit, overlapped with the
passes), then the update of its slices. With a pipeline dimension (> 1) each pipeline rank
runs its microbatches (and, under a multi-stage schedule, its chunks: virtual stages a, b,
...) in the order torch's schedule issues (pipeline_schedules.rank_orders, kind pipeline's
one source), each pass followed by its tensor all-reduce and its send to a stage on
another rank (`pp`); a zero-bubble weight gradient (W) is its own box kind, local, with
neither; then the data dimension and the update.
Must not import torch."""

from __future__ import annotations

from ...errors import DtgenError
from .strategy import coordinates, degrees, shards_parameters
from ..pipeline_schedules import SCHEDULES, op_label, play, rank_orders, rank_stages, stage_rank, stages_per_rank
from ...figures.model import elide
from ...figures.schedule import STEPS, Sim, one_panel
from ...figures.texts import label_tex, label_text, lane_text
from ...figures.timeline import Lane, Panel, Timeline
from ...figures.topology_mesh import bytes_per_dimension, measured_legend, mesh_layout

KIND = "mesh"
# Every collective is an all-reduce box whose phase names its dimension ("tensor
# all-reduce", "data reduce-scatter"): the timeline gives each phase its own fill (plain,
# dotted, crosshatched) and legend entry.
TIMELINE_BOXES = ("forward", "backward", "wgrad", "slowdown", "allreduce", "allreduce-b", "allreduce-c", "send", "wait",
                  "optimizer", "skipped")


def layout(spec, spacing):
    return mesh_layout(spec, spacing)


def annotate_measured(spec, layout, run):
    """A run's topology: each dimension's legend line with its bytes per worker and step,
    from the trace's collectives (their `dim`) and sends."""
    return measured_legend(spec, layout, bytes_per_dimension(run.trace.spans, len(run.trace.ranks)), run.metrics)


def spacing_needs(sizes):
    # The grid sets its own gaps (topology_mesh): colsep and rowsep are only the units its
    # positions are written in, so any the spec asks for will do.
    return 0.5, 0.5


def expected_timeline(spec, cost):
    d = degrees(spec)
    if d["pipeline"] > 1:
        return _pipelined_timeline(spec, cost, d)
    sim, end = _schedule(spec, cost)
    return one_panel(spec, sim, end, f"{d['data']} data x {d['tensor']} tensor: each collective in its dimension's "
                                     "group (tp: tensor, dp: data)")


def _micro(spec) -> tuple[int, str]:
    """(microbatches, schedule) of the pipeline dimension: the mesh's own keys where the spec
    gives them, else the strategy block's pipeline defaults."""
    options = spec.strategy.options
    return int(options.get("microbatches", spec.strategy.microbatches)), options.get("schedule", spec.strategy.schedule)


def _pipelined_timeline(spec, cost, d):
    """The 3-D step: every stage runs its microbatches in the pipeline's order (GPipe: all
    forwards, then all backwards; 1F1B: one of each once warm), each forward and backward
    followed by its tensor group's all-reduce (`tp AR`) and its send to the next (previous)
    stage (`pp`), waiting where a microbatch has not arrived (the bubble); then the data
    dimension and the update. The workers of one stage run alike, so past
    figure.max_workers_drawn lanes one worker per stage stands for its stage."""
    sim, end, stage_of = _pipelined_schedule(spec, cost, d)
    micro, schedule = _micro(spec)
    ids = spec.topology.workers.ids
    per_stage = d["data"] * d["tensor"]
    limit = spec.figure.max_workers_drawn
    if len(ids) <= limit:
        drawn = [(w, sim.boxes[stage_of[w]]) for w in ids]
        shown = ""
    else:
        stages = elide(d["pipeline"], limit)
        drawn = [None if s is None else (f"w{(s - 1) * per_stage + 1}", sim.boxes[f"s{s}"]) for s in stages]
        shown = "; one worker per stage"
    lanes = []
    for k, item in enumerate(drawn):
        if item is None:
            hidden = d["pipeline"] - (len(drawn) - 1)
            lanes.append(Lane(f"w{int(drawn[k - 1][0][1:]) + per_stage}-more",
                              label_text(spec, "more_stages", n=f"{hidden:,}"), (), role="gap", hidden=hidden))
            continue
        w, boxes = item
        stage = (int(w[1:]) - 1) // per_stage + 1
        label = lane_text(spec, w) + (f" (stage {stage})" if shown else "")
        lanes.append(Lane(w, label, tuple(boxes)))
    title = spec.figure.labels.get("panel") or (
        f"{d['data']} data x {d['tensor']} tensor x {d['pipeline']} pipeline{_chunks(spec)}, "
        f"{SCHEDULES[schedule].printed}, {micro} microbatches{shown}")
    panel = Panel("main", title, tuple(lanes))
    return Timeline(spec.title, (panel,), 0.0, end, label_tex(spec, "timeline_note"), label_tex(spec, "time_axis"))


# Compute time of one operation per unit of a virtual stage's forward (kind pipeline's:
# B = 2F, a split backward's halves I = W = F).
OP_COST = {"F": 1.0, "B": 2.0, "I": 1.0, "W": 1.0}


def _chunks(spec) -> str:
    v = stages_per_rank(spec.strategy)
    return f" x {v} chunks ({', '.join('abcdefghijklmnop'[:v])})" if v > 1 else ""


def _pipelined_schedule(spec, cost, d) -> tuple[Sim, float, dict]:
    """Boxes per stage (lanes s1..sP) and the stage of each worker."""
    sim = Sim(spec, cost)
    tp, dp, stages = d["tensor"], d["data"], d["pipeline"]
    micro, schedule = _micro(spec)
    v = stages_per_rank(spec.strategy)
    total = stages * v  # virtual stages: v per pipeline rank under a multi-stage schedule
    samples = spec.training.batch_size / micro
    widths = sim.workload.activations if sim.workload is not None and sim.workload.activations else (1,)
    pairs = max(1, len(widths) // total)  # a virtual stage's share of the layer pairs
    reduce_tp = pairs * sim.link(4 * samples * max(widths) * 2 * (tp - 1) / tp) if tp > 1 else 0.0
    send = sim.link(4 * samples * max(widths))  # a microbatch's activations (its gradient back)
    held = sim.params / tp / stages
    reduce_dp = sim.link(4 * held * 2 * (dp - 1) / dp) if dp > 1 else 0.0
    fwd = samples * sim.flops / tp / total / cost.flops_per_ms
    orders = rank_orders(schedule, stages, micro, v)
    chunk_of = {st: c for r in range(stages) for c, st in enumerate(rank_stages(schedule, r, stages, v))}

    def duration(rank, op, stage):
        sent = send if _sends(schedule, op, stage, total, stages) else 0.0
        return fwd * OP_COST[op] + (0.0 if op == "W" else reduce_tp) + sent

    opt = max(cost.min_ms, 2 * held / (dp if _fsdp(spec) else 1) / cost.flops_per_ms)
    t = 0.0
    for _ in range(STEPS):
        free = [t] * stages
        if _fsdp(spec):
            free = [sim.add(f"s{k + 1}", t, t + reduce_dp / 2, "allreduce", "dp AG", phase="data all-gather")
                    for k in range(stages)]
        # each pipeline rank's operations in torch's order (pipeline_schedules.rank_orders, as
        # kind pipeline draws them), played as early as their inputs allow; a pass's tensor
        # all-reduce and its send to a stage on another rank are part of its time
        for a in play(orders, stages, total, schedule, duration, lambda op, src, dst: 0.0, start=free):
            lane = f"s{a.rank + 1}"
            sim.add(lane, a.free, a.start, "wait", "")
            kind = {"F": "forward", "W": "wgrad"}.get(a.op, "backward")
            end = sim.add(lane, a.start, a.start + fwd * OP_COST[a.op], kind,
                          op_label(a.op, a.mb, chunk_of[a.stage], v))
            if a.op != "W":  # a weight gradient is local: no tensor all-reduce, nothing sent
                end = sim.add(lane, end, end + reduce_tp, "allreduce", "tp AR", phase="tensor all-reduce")
            if _sends(schedule, a.op, a.stage, total, stages):
                end = sim.add(lane, end, end + send, "send", "pp")
            free[a.rank] = end
        flush = max(free)
        for k in range(stages):
            lane = f"s{k + 1}"
            end = sim.add(lane, free[k], flush, "wait", "")
            end = max(end, flush)
            if _fsdp(spec):
                end = sim.add(lane, end, end + reduce_dp / 2, "allreduce", "dp RS", phase="data reduce-scatter")
            else:
                end = sim.add(lane, end, end + reduce_dp, "allreduce", "dp AR", phase="data all-reduce")
            free[k] = sim.add(lane, end, end + opt, "optimizer", "opt")
        t = max(free)
    stage_of = {w: f"s{coordinates(spec, int(w[1:]) - 1)['pipeline'] + 1}" for w in spec.topology.workers.ids}
    return sim, t, stage_of


def _sends(schedule: str, op: str, stage: int, total: int, ranks: int) -> bool:
    """Whether the pass sends to a stage on another rank (not at the pipeline's ends, nor
    across a V's turn, where both stages are one rank's)."""
    if op == "W":
        return False
    peer = stage + 1 if op == "F" else stage - 1
    return 0 <= peer < total and stage_rank(schedule, peer, ranks) != stage_rank(schedule, stage, ranks)


def _fsdp(spec) -> bool:
    """FSDP2 over the data groups (ZeRO-2 and 3): drawn as an all-gather and a reduce-scatter;
    ZeRO-1 all-reduces its gradient slices (its broadcasts after the update are not drawn)."""
    return shards_parameters(spec)


def _schedule(spec, cost) -> tuple[Sim, float]:
    sim = Sim(spec, cost)
    d = degrees(spec)
    tp, dp = d["tensor"], d["data"]
    batch = spec.training.batch_size
    widths = sim.workload.activations if sim.workload is not None and sim.workload.activations else (1,)
    pairs = max(1, len(widths))
    reduce_tp = pairs * sim.link(4 * batch * max(widths) * 2 * (tp - 1) / tp) if tp > 1 else 0.0
    held = sim.params / tp  # a rank's slice of the parameters (4 bytes each)
    # one all-reduce of the gradient slice; fsdp: an all-gather and a reduce-scatter (half each)
    reduce_dp = sim.link(4 * held * 2 * (dp - 1) / dp) if dp > 1 else 0.0
    fwd = batch * sim.flops / tp / cost.flops_per_ms
    opt = max(cost.min_ms, 2 * held / (dp if _fsdp(spec) else 1) / cost.flops_per_ms)
    t = 0.0
    for _ in range(STEPS):
        for w in spec.topology.workers.ids:
            end = t
            if _fsdp(spec):
                end = sim.add(w, end, end + reduce_dp / 2, "allreduce", "dp AG", phase="data all-gather")
            end = sim.add(w, end, end + fwd, "forward", "fwd")
            end = sim.add(w, end, end + reduce_tp, "allreduce", "tp AR", phase="tensor all-reduce")
            end = sim.add(w, end, end + 2 * fwd, "backward", "bwd")
            end = sim.add(w, end, end + reduce_tp, "allreduce", "tp AR", phase="tensor all-reduce")
            if _fsdp(spec):
                end = sim.add(w, end, end + reduce_dp / 2, "allreduce", "dp RS", phase="data reduce-scatter")
            else:
                end = sim.add(w, end, end + reduce_dp, "allreduce", "dp AR", phase="data all-reduce")
            end = sim.add(w, end, end + opt, "optimizer", "opt")
        t = end
    return sim, t


def run_name(spec) -> str:
    d = degrees(spec)
    return " x ".join(dim for dim in ("pipeline", "data", "tensor") if d[dim] > 1) + " mesh"


def table_name(spec) -> str:
    return "mesh"
