"""Hybrid parallelism on a pipeline x data x tensor mesh (kind: mesh), composed from the
three dimensions in the runner's span vocabulary (every collective an `allreduce` span
on the comm thread with its `dim`; the pipeline's messages `send`/`recv` spans with
dim pipeline):

- pipeline: the blocks are split into `pipeline` stages (workload.stage_units, as kind
  pipeline splits them) and each step's batch into `strategy.microbatches` microbatches
  that run through the stages in GPipe or 1F1B order (`strategy.schedule`; kind
  pipeline's op order, opentikz_dt/strategies/pipeline/predict.py). Rank (stage s, data d, tensor t)
  receives a microbatch's activations from (s - 1, d, t) and its gradient from
  (s + 1, d, t), at the point-to-point cost. With no pipeline (degree 1) a step is one
  forward and one backward of the whole batch, as in the 2-D mesh.
- tensor: inside each stage every rank computes its 1/tensor slice of the stage's layer
  pairs (kind tensor's split, workload.tensor_plan) and the rest whole; each pair's
  all-reduce (microbatch rows x values per sample x 4 bytes) waits for the ranks of its
  tensor group only, at the all-reduce cost;
- data: after a stage's last backward each data group (the same stage and tensor slice
  in every replica) all-reduces the stage's gradient slice (data_parallel: allreduce), or
  with fsdp reduce-scatters it and all-gathers the parameters before the step's first
  forward, waiting for the group's ranks only, at the all-reduce cost (half of it for a
  reduce-scatter or all-gather). A transformer's tied embedding is summed between the
  first and the last stage of each pipeline group first (phase `tied`, dim pipeline);
- the update of the rank's slice (1/data of it with fsdp), then the next step. ZeRO-2
  (`shard: gradients`) is drawn as ZeRO-3 is (one gather per step, here as in the run);
  ZeRO-1 (`shard: optimizer`) all-reduces the gradient slices as data_parallel allreduce
  does, updates the tensors ZeroRedundancyOptimizer assigns the rank (strategy.zero_slices),
  then in each data group every data index broadcasts its updated slices in turn (spans
  as the runner's: algorithm zero, phase broadcast, src, bytes, dim data), inside the
  `optimizer` span.

A FIRST APPROXIMATION, like kind tensor's (not fitted to runs yet): a unit's time splits
between its layer pairs by FLOPs, and FSDP's per-unit gathers and scatters are drawn as
one collective each (the runner issues one per unit, overlapped with the passes). An mlp
pair cut by a stage boundary is computed whole with no all-reduce (strategies/mesh.py's
memory says the same). Speed: a stage's ranks advance together as lists, each group's
collective over a slice of them, bytes summed per stage: 1,024 ranks x 100 steps take
0.1-7 s of CPU by shape (benchmarks/results/predict-scale_cpu2core_2026-11.md), and `simulation_weight` tells predict.py's size
bounds what a rank-step costs. Must not import torch.
"""

from __future__ import annotations

import statistics

from ...errors import DtgenError
from ...memory import model_sizes
from .strategy import data_method, data_shard, degrees, shards_parameters, stage_slices, zero_slices
from ..pipeline_schedules import rank_orders, rank_stages, stage_rank, stages_per_rank
from ...workload import model_section, tensor_plan
from ...predict.blocks import boundary_values, stage_units, tensor_sizes, tied_names
from ..pipeline.predict import SEND_US

KIND = "mesh"
COMM_TID = 1  # the runner's comm thread (runner/trace.py TIDS["comm"])


def _microbatches(spec) -> int:
    """Microbatches per step: the spec's with a pipeline, else the whole batch at once."""
    return spec.strategy.microbatches if degrees(spec)["pipeline"] > 1 else 1


def active_ranks(spec) -> float:
    """Outside the pipeline's bubble every rank computes (kind pipeline's share per stage)."""
    p, m = degrees(spec)["pipeline"], _microbatches(spec)
    return spec.topology.workers.count / p * max(1.0, p * m / (m + p - 1))


def model_parts(spec) -> int:
    d = degrees(spec)
    return d["pipeline"] * d["tensor"] * (d["data"] if shards_parameters(spec) else 1)


def resize(strategy: dict, workers: int) -> None:
    """`--workers N`: the data degree follows, the pipeline and tensor degrees stay (where
    they do not divide N, validation says the product is off, with the numbers)."""
    given = strategy.get("parallelism")
    if isinstance(given, dict):
        other = int(given.get("pipeline", 1)) * int(given.get("tensor", 1))
        if other > 0 and workers % other == 0:
            given["data"] = workers // other


def shapes(spec, workers: int) -> list:
    """Every factorization of `workers` into pipeline x data x tensor degrees, labelled
    `pipeline x data x tensor` (the figure's rows, in the order every other text names the
    dimensions), data-major, at the spec's global batch
    (training.batch_size per data replica x its data degree: a layout is chosen for a
    batch, so each shape's replicas share that one; a data degree that does not divide it
    is refused here). Whether the model can take the rest is the spec rules' answer (the
    sweep validates every one). [(label, overrides, refusal or None)]."""
    total = spec.training.batch_size * degrees(spec)["data"]
    out = []
    for data in _divisors(workers):
        for tensor in _divisors(workers // data):
            pipeline = workers // data // tensor
            label = f"{pipeline} x {data} x {tensor}"
            sets = (f"strategy.parallelism={{pipeline: {pipeline}, data: {data}, tensor: {tensor}}}",
                    f"training.batch_size={max(1, total // data)}")
            refusal = (None if total % data == 0 else
                       f"the global batch of {total} samples does not split over data {data} (set training.batch_size)")
            out.append((label, sets, refusal))
    def data_major(item):
        pipeline, data, tensor = (int(v) for v in item[0].split(" x "))
        return -data, -tensor, -pipeline

    return sorted(out, key=data_major)


def _divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


# What simulate_steps costs per rank and step (CPU µs), fitted to 1,024-rank meshes of a
# 32-block transformer, 16 microbatches, 10 steps, every valid pipeline x data x tensor
# (64x1x16 8.7 µs, 128x8x1 8.1, 512x2x1 16.5, 8x8x16 18.4, 64x2x8 42.7, 64x8x2 65.4;
# each within 20% of the fit, rounded up): per microbatch and stage op OP_US, per tensor
# all-reduce COLLECTIVE_US plus GROUP_US shared by the tensor group's ranks.
OP_US, COLLECTIVE_US, GROUP_US = 0.3, 0.04, 0.2
RANK_STEP_US = 5.0  # a plain data-parallel rank-step, the unit of the size bounds (predict.py)


def simulation_weight(spec) -> float:
    """A rank-step's simulation cost over a plain one: per microbatch its forward and
    backward ops and the tensor all-reduces of its stage (the fit above)."""
    d = degrees(spec)
    pairs = tensor_plan(model_section(spec), nominal_flops=1.0, nominal_values=0).pairs if d["tensor"] > 1 else ()
    collectives = sum(1 for p in pairs for v in (p.forward, p.backward) if v) / d["pipeline"]
    us = _microbatches(spec) * (2 * OP_US + collectives * (COLLECTIVE_US + GROUP_US / d["tensor"]))
    return max(1.0, us / RANK_STEP_US)


def _unit_pieces(spec, units: int) -> list[list[dict]]:
    """Per unit of the model (predict/blocks.py's order), its pieces in forward order: share
    of the unit's compute, whether the tensor group splits it, the values per sample
    summed after its forward and after its backward (and their layer names), and the
    units its layer pair spans (a pair must lie in one stage to be split)."""
    model = model_section(spec)
    kind = model.get("kind", "mlp")
    whole = [[{"share": 1.0, "split": kind == "python", "fwd": 0, "bwd": 0, "span": (u, u)}] for u in range(units)]
    plan = tensor_plan(model, nominal_flops=1.0, nominal_values=0)
    if kind == "transformer":  # units: embedding, blocks, head; each block an attention and an MLP pair
        for b in range(int(model["layers"])):
            pairs = plan.pairs[2 * b:2 * b + 2]
            total = sum(p.flops for p in pairs)
            whole[b + 1] = [{"share": p.flops / total, "split": True, "fwd": p.forward, "bwd": p.backward,
                             "fwd_layer": p.forward_layer, "bwd_layer": p.backward_layer, "span": (b + 1, b + 1)}
                            for p in pairs]
    elif kind == "mlp":  # units: the Linear layers; pair k = layers 2k (column) and 2k + 1 (row)
        for k, p in enumerate(plan.pairs):
            span = (2 * k, 2 * k + 1)
            whole[2 * k] = [{"share": 1.0, "split": True, "fwd": 0, "bwd": p.backward, "bwd_layer": p.backward_layer,
                             "span": span}]
            whole[2 * k + 1] = [{"share": 1.0, "split": True, "fwd": p.forward, "fwd_layer": p.forward_layer,
                                 "bwd": 0, "span": span}]
    return whole


def _programs(spec, c, lo: int, hi: int, rows: float, active: float, tp: int) -> tuple[list, list]:
    """One stage's forward and backward of a microbatch: [(compute µs, values per sample
    all-reduced after it (0: none), layer)], the compute already 1/tp where split."""
    pieces = _unit_pieces(spec, len(c.blocks))
    out = []
    for name, cost, order in (("forward", c.forward, range(lo, hi)), ("backward", c.backward, range(hi - 1, lo - 1, -1))):
        program, acc = [], 0.0
        for u in order:
            unit_us = cost(rows, u, u + 1, active=active)
            for piece in (pieces[u] if name == "forward" else reversed(pieces[u])):
                inside = lo <= piece["span"][0] and piece["span"][1] < hi
                split = piece["split"] and inside and tp > 1
                acc += unit_us * piece["share"] / (tp if split else 1)
                values = piece["fwd" if name == "forward" else "bwd"] if split else 0
                if values:
                    program.append((acc, values, piece.get("fwd_layer" if name == "forward" else "bwd_layer", "")))
                    acc = 0.0
        program.append((acc, 0, ""))
        out.append(program)
    return out[0], out[1]


# ---------------------------------------------------------------- fits of a mesh run


def fit_compute(fit) -> tuple[list, list]:
    """Per unit, forward and backward µs per sample of the WHOLE unit on one worker, as
    _programs reads them: per stage, the mean forward (backward) chunk of its ranks less
    the tensor all-reduces it waited for, which ran `rows` samples through the stage's
    units, the split pieces 1/tensor of them; spread over the units by FLOPs."""
    spec, events = fit.spec, fit.run.trace.events
    d = degrees(spec)
    first = fit.run.trace.steps[0] if fit.run.trace.steps else 0
    rows = spec.training.batch_size / _microbatches(spec)
    total = d["pipeline"] * (stages_per_rank(spec.strategy) if d["pipeline"] > 1 else 1)  # virtual stages
    bounds = stage_units(spec, total)
    pieces = _unit_pieces(spec, len(fit.blocks))
    chunks: dict = {}  # (virtual stage, pass) -> [compute µs of each chunk]; a split backward's halves apart
    by_rank: dict = {}
    for e in events:
        if e["args"].get("step") != first and e.get("ph", "X") == "X":
            by_rank.setdefault(e["pid"], []).append(e)
    for rank, mine in by_rank.items():
        stage = rank // (d["data"] * d["tensor"])
        waits = [e for e in mine if e["name"] == "allreduce" and e["args"].get("dim") == "tensor"]
        for e in mine:
            if e["name"] in ("forward", "backward"):
                inside = sum(w["dur"] for w in waits if e["ts"] <= w["ts"] < e["ts"] + e["dur"])
                virtual = e["args"].get("stage", stage + 1) - 1 if total > 1 else 0
                half = e["args"].get("grad") if e["args"].get("grad") in ("input", "weight") else ""
                chunks.setdefault((virtual, e["name"] + half), []).append(max(e["dur"] / 4, e["dur"] - inside))
    for key in [k for k in chunks if k[1] == "backwardinput"]:  # I + W: the backward whole
        weight = chunks.get((key[0], "backwardweight"))
        if weight:
            chunks.setdefault((key[0], "backward"), []).append(statistics.fmean(chunks[key]) + statistics.fmean(weight))
    fwd_us, bwd_us = [0.0] * len(fit.blocks), [0.0] * len(fit.blocks)
    for stage in range(total):
        lo, hi = bounds[stage], bounds[stage + 1]
        # a unit's share of the stage's chunk: its FLOPs, 1/tensor of the pieces the group splits
        done = [fit.flops[u] * sum(p["share"] / (d["tensor"] if p["split"] and lo <= p["span"][0] and
                                                  p["span"][1] < hi and d["tensor"] > 1 else 1)
                                   for p in pieces[u]) for u in range(lo, hi)]
        for name, into in (("forward", fwd_us), ("backward", bwd_us)):
            found = chunks.get((stage, name))
            if not found or not sum(done):
                continue
            per_flop = statistics.fmean(found) / rows / sum(done)
            for u in range(lo, hi):
                into[u] = per_flop * fit.flops[u]
    return fwd_us, bwd_us


def fit_message_latency(fit, comm: dict) -> None:
    """The all-reduce's latency from the tensor groups' all-reduces (small and frequent: their
    latency is most of them), as kind tensor's fit: mean time less the bytes' transfer, per
    ring hop of the tensor group."""
    n, beta = degrees(fit.spec)["tensor"], fit.beta
    first = fit.run.trace.steps[0] if fit.run.trace.steps else 0
    spans = [e for e in fit.run.trace.events if e["name"] == "allreduce" and e["args"].get("dim") == "tensor"
             and e["args"]["step"] != first]
    if n < 2 or not spans:
        return None
    alphas = [e["dur"] / 1e6 - 2 * (n - 1) / n * e["args"].get("bytes", 0) * beta for e in spans]
    comm["allreduce"]["alpha_s"] = max(0.0, statistics.median(alphas)) / (2 * (n - 1))
    return None


def _data_allreduce(c, method: str, nbytes: float, n: int) -> float:
    """A data group's gradient all-reduce, µs: gloo's (the collective's fitted cost), or
    dtgen's ring or tree over point-to-point messages (Costs.ring_allreduce, tree_pass), drawn
    as one span from the group's last arrival."""
    if method == "ring":
        return c.ring_allreduce(nbytes, n)
    if method == "tree":
        return c.tree_pass(nbytes, n) + c.tree_pass(nbytes, n, down=True)
    return c.allreduce(nbytes, n)


def _stage_sizes(sim, spec, bounds: list) -> tuple[list, list]:
    """(values one tensor rank of each stage holds before data sharding, tensors per stage)."""
    p = len(bounds) - 1
    tensors = [sum(b.tensors for b in sim.blocks[bounds[s]:bounds[s + 1]]) for s in range(p)]
    sizes = model_sizes(spec)
    if sizes is not None:
        return stage_slices(spec, sizes.tensors, sizes.stage_tensors(p)), tensors
    tp = degrees(spec)["tensor"]  # a python model: its plan is known at run time only; split it all
    return [sum(b.params for b in sim.blocks[bounds[s]:bounds[s + 1]]) // tp for s in range(p)], tensors


def simulate_steps(sim, steps: int) -> None:
    rec, c, spec = sim.rec, sim.costs, sim.spec
    d = degrees(spec)
    pp, dp, tp = d["pipeline"], d["data"], d["tensor"]
    width = dp * tp  # ranks per stage; rank = stage * width + data * tp + tensor
    sharded = shards_parameters(spec)
    m = _microbatches(spec)
    rows = spec.training.batch_size / m
    # virtual stages: v per pipeline rank under a multi-stage schedule (kind pipeline's
    # placement), each rank's operations in torch's order (pipeline_schedules.rank_orders)
    schedule = spec.strategy.schedule
    v = stages_per_rank(spec.strategy) if pp > 1 else 1
    total = pp * v
    bounds = stage_units(spec, total)
    if any(bounds[s + 1] <= bounds[s] for s in range(total)):
        raise DtgenError(f"{total} pipeline stages for a model of {len(sim.blocks)} units: a stage would be empty")
    active = active_ranks(spec)
    programs = [_programs(spec, c, bounds[s], bounds[s + 1], rows, active, tp) for s in range(total)]
    orders = rank_orders(schedule, pp, m, v) if pp > 1 else ((("F", 0, 0), ("B", 0, 0)),)
    owner = [stage_rank(schedule, s, pp) for s in range(total)]
    chunk_of = {st: k for r in range(pp) for k, st in enumerate(rank_stages(schedule, r, pp, v))}
    chunked = {} if v == 1 else None  # spans name the chunk under a multi-stage schedule
    out_bytes = [4 * rows * x for x in boundary_values(spec, total)] + [0.0]
    virtual_slices, virtual_tensors = _stage_sizes(sim, spec, bounds)
    slices = [sum(x for st, x in enumerate(virtual_slices) if owner[st] == r) for r in range(pp)]
    stage_tensors = [sum(x for st, x in enumerate(virtual_tensors) if owner[st] == r) for r in range(pp)]
    updated = [-(-x // dp) for x in slices] if sharded else slices
    # the tied embedding's two copies on two ranks are summed (a V holds both ends on one: a local sum)
    tied = (4 * sum(size for name, size in tensor_sizes(spec).items() if name in tied_names(spec))
            if pp > 1 and owner[0] != owner[-1] else 0)
    method = data_method(spec)
    algorithm = "fsdp" if sharded else {"ring": "ring", "tree": "tree"}.get(method, "native")
    zero = _zero_shares(sim, spec, pp, dp) if data_shard(spec) == "optimizer" and dp > 1 else None
    slow = sim.slow
    uniform = all(v == 1.0 for v in slow)
    record = rec.record
    plain = c.rng is None and not c.ratios  # noisy() is the identity: skip the call
    # the groups of a stage as slices of its ranks (local indices): tensor groups are
    # consecutive, data groups strided by the tensor degree
    t_groups = [slice(g * tp, (g + 1) * tp) for g in range(dp)]
    d_groups = [slice(t, width, tp) for t in range(tp)]
    moved = [0.0] * pp  # bytes each rank of a stage sent (= received) in collectives, over the run
    sent, received = [0.0] * pp, [0.0] * pp  # and to / from its peers in the neighbouring stages

    def collectives(s, group_slices, now, step, nbytes, cost, phase, dim, direction, **extra):
        """One collective per group of stage s (the groups partition the stage): each
        starts when the last of its ranks is ready and ends at once on all of them."""
        size = len(range(width)[group_slices[0]])
        moved[s] += (2 * (size - 1) / size if phase == "all-reduce" else (size - 1) / size) * nbytes
        for group in group_slices:
            ready = max(now[group])
            end = ready + c.noisy_comm(cost, step)
            now[group] = [end] * size
            if record:
                for j in range(width)[group]:
                    rec.span(s * width + j, "allreduce", COMM_TID, ready, end, step,
                             algorithm=algorithm if dim == "data" else "native", phase=phase, dim=dim, bytes=nbytes,
                             **{"pass": direction}, **extra)

    free_at = [[0.0] * width for _ in range(pp)]
    for step in range(steps):
        previous = [list(row) for row in free_at]
        free = [[t + c.overhead(step) for t in row] for row in free_at]
        if sharded and dp > 1:  # each stage's parameters gathered over its data groups before the forward
            for s in range(pp):
                nbytes = 4 * slices[s]
                collectives(s, d_groups, free[s], step, nbytes, c.allreduce(nbytes, dp) / 2, "all-gather", "data",
                            "forward")
        pos, done = [0] * pp, {}
        left = sum(len(o) for o in orders)
        while left:
            progressed = False
            for r in range(pp):
                if pos[r] >= len(orders[r]):
                    continue
                op, mb, st = orders[r][pos[r]]
                forward = op == "F"
                # the stage whose output this one waits for (None: none, or its own earlier op)
                src = None if op == "W" else (st - 1 if st > 0 else None) if forward else (
                    st + 1 if st < total - 1 else None)
                dep = None
                if src is not None:
                    dep = done.get(("F", src, mb)) if forward else done.get(("B", src, mb), done.get(("I", src, mb)))
                    if dep is None:
                        continue
                direction = "fwd" if forward else "bwd"
                extra = chunked if chunked is not None else {"chunk": chunk_of[st]}
                now, row = free[r], slow[r * width:(r + 1) * width]
                if dep is not None and owner[src] != r:  # the peer's message: activations forward, gradient back
                    msg = out_bytes[src] if forward else out_bytes[st]
                    if plain:
                        p2p = c.p2p(msg)
                        arrive = [t + p2p for t in dep]
                    else:
                        arrive = [t + c.noisy(c.p2p(msg), step) for t in dep]
                    if record:
                        for j in range(width):
                            rec.span(r * width + j, "recv", COMM_TID, now[j], arrive[j], step, mb=mb, stage=st + 1,
                                     direction=direction, dim="pipeline", **extra)
                    now[:] = [max(t, a) for t, a in zip(now, arrive)]
                elif dep is not None:  # a stage of this rank (a V's turn): no message
                    now[:] = [max(t, a) for t, a in zip(now, dep)]
                start = list(now) if record else None
                name = "forward" if forward else "backward"
                # a split backward: I runs the backward's collectives on half its compute, W
                # the other half with none (the calibration measures the backward whole)
                program = programs[st][0 if forward else 1]
                if op == "I":
                    program = [(us / 2, values, layer) for us, values, layer in program]
                elif op == "W":
                    program = [(sum(us for us, _, _ in program) / 2, 0, "")]
                for us, values, layer in program:
                    if plain and uniform:
                        now[:] = [t + us for t in now]
                    elif plain:
                        now[:] = [t + us * q for t, q in zip(now, row)]
                    else:
                        now[:] = [t + c.noisy(us * q, step) for t, q in zip(now, row)]
                    if values:
                        nbytes = 4 * rows * values
                        collectives(r, t_groups, now, step, nbytes, c.allreduce(nbytes, tp), "all-reduce", "tensor",
                                    name, layer=layer, mb=mb, stage=st + 1)
                if record:
                    grad = {"I": {"grad": "input"}, "W": {"grad": "weight"}}.get(op, {})
                    for j in range(width):
                        rec.span(r * width + j, name, 0, start[j], now[j], step, mb=mb, stage=st + 1, **grad, **extra)
                done[(op, st, mb)] = list(now)
                peer = None if op == "W" else st + 1 if forward else st - 1
                if peer is not None and 0 <= peer < total and owner[peer] != r:
                    sent[r] += out_bytes[min(st, peer)]
                    received[owner[peer]] += out_bytes[min(st, peer)]
                    if record:
                        for j in range(width):
                            rec.span(r * width + j, "send", COMM_TID, now[j], now[j] + SEND_US, step, mb=mb,
                                     stage=st + 1, direction=direction, dim="pipeline", **extra)
                pos[r] += 1
                left -= 1
                progressed = True
            if not progressed:
                raise DtgenError(f"pipeline schedule '{schedule}' deadlocked in the simulation")
        if tied:  # the first and last stage of each pipeline group sum their copies of the tied embedding
            cost = c.allreduce(tied, 2)
            moved[0] += tied
            moved[-1] += tied
            for j in range(width):
                end = max(free[0][j], free[-1][j]) + c.noisy_comm(cost, step)
                for s in (0, pp - 1):
                    if record:
                        rec.span(s * width + j, "allreduce", COMM_TID, free[s][j], end, step, algorithm="native",
                                 phase="tied", dim="pipeline", bytes=tied, **{"pass": "backward"})
                    free[s][j] = end
        if dp > 1:  # each stage's gradient slices over its data groups
            for s in range(pp):
                nbytes = 4 * slices[s]
                phase, cost = (("reduce-scatter", c.allreduce(nbytes, dp) / 2) if sharded
                               else ("all-reduce", _data_allreduce(c, method, nbytes, dp)))
                collectives(s, d_groups, free[s], step, nbytes, cost, phase, "data", "backward")
        for s in range(pp):
            o = c.optimizer(updated[s], stage_tensors[s], active)
            if zero is not None:  # ZeRO-1: each rank updates its tensors, then the data groups broadcast them
                ends = [free[s][j] + c.noisy(c.optimizer(*zero[s][j // tp], active), step) for j in range(width)]
                moved[s] += _zero_broadcasts(rec, c, s, width, d_groups, ends, step, zero[s])
            for j in range(width):
                k = s * width + j
                end = ends[j] if zero is not None else free[s][j] + (o if plain else c.noisy(o, step))
                rec.span(k, "optimizer", 0, free[s][j], end, step)
                free_at[s][j] = end
                rec.step(sim.ids[k], step, previous[s][j], end)
    for s in range(pp):
        for j in range(width):
            rec.moved(s * width + j, moved[s] + sent[s], moved[s] + received[s])


def _zero_shares(sim, spec, pp: int, dp: int) -> list[list[tuple[int, int]]]:
    """Per pipeline rank, the (values, tensors) each data index updates under ZeRO-1
    (strategy.zero_slices); a python model's sizes are known once built: split evenly."""
    sizes = model_sizes(spec)
    if sizes is not None:
        return zero_slices(spec, sizes.tensors, sizes.stage_tensors(pp))
    slices, tensors = _stage_sizes(sim, spec, stage_units(spec, pp))
    return [[(x // dp + (i < x % dp), t // dp + (i < t % dp)) for i in range(dp)] for x, t in zip(slices, tensors)]


def _zero_broadcasts(rec, c, s: int, width: int, d_groups: list, ends: list, step: int, shares: list) -> float:
    """ZeroRedundancyOptimizer's sync in each data group of stage s: each data index in
    turn broadcasts the fp32 slices it updated (span args as the runner's: algorithm zero,
    phase broadcast, src its data index, bytes, dim data), once every rank of the group
    finished its update and the previous source's broadcast; moves `ends` on. Returns the
    bytes a rank moves (each sends its own and receives the others')."""
    dp = len(shares)
    for group in d_groups:
        members = range(width)[group]
        for src, (values, _) in enumerate(shares):
            size = 4 * values
            end = max(ends[j] for j in members) + c.noisy_comm(c.broadcast(size, dp), step)
            for j in members:
                rec.span(s * width + j, "allreduce", COMM_TID, ends[j], end, step, algorithm="zero",
                         phase="broadcast", src=src, bytes=size, dim="data")
                ends[j] = end
    return sum(4 * values for values, _ in shares) * (dp - 1) / dp


def cluster_layout(spec) -> tuple[int, int, int, str, str, bool]:
    """The mesh's degrees; its data dimension's method: fsdp shards, ring or tree name the
    all-reduce algorithm, allreduce is NCCL's own choice (no backward overlap modelled)."""
    given = spec.strategy.options.get("parallelism") or {}
    p, d, t = (int(given.get(k, 1)) for k in ("pipeline", "data", "tensor"))
    method = spec.strategy.options.get("data_parallel") or "allreduce"
    return p, d, t, method if method in ("ring", "tree") else "native", data_shard(spec), False
