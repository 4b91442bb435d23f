"""Pipelines, as runner/strategies/pipeline.py runs them with torch.distributed.pipelining:
every schedule torch has (GPipe, 1F1B, interleaved 1F1B, looped BFS, the zero-bubble ones,
DualPipeV), each rank holding one stage or v virtual stages (role `stage`), not data-parallel.

Stage i owns blocks bounds[i]..bounds[i+1]-1; a microbatch's forward on stage i waits
for stage i-1's forward plus the activation message, its backward for stage i+1's
backward plus the gradient message. `recv` spans run from when the stage was free to
the compute start (the wait for the peer), `send` spans are the short posting of a send.
Must not import torch.
"""

from __future__ import annotations

import statistics

from ...errors import DtgenError
from ..pipeline_schedules import ScheduleOrderError, play, rank_orders, rank_stages, schedule_of, stage_rank, stages_per_rank
from ...predict.blocks import boundary_values, stage_units, tensor_sizes, tied_names
from ...predict.calibration import Calibration
from ...predict.fit import solved_message_latency, with_message_latency

KIND = "pipeline"
COMPUTE_ROLE = "stage"
SYNTHETIC_RUNS = ("pipeline-1f1b", "pipeline-gpipe")
SEND_US = 15.0  # posting a send (measured on the runner's traces: tens of µs)


def roles(spec) -> list[tuple[str, str]]:
    return [("stage", w) for w in spec.topology.workers.ids]


def role_of(spec, ident: str) -> str:
    return "stage"


def active_ranks(spec) -> float:
    """Every stage computes; how much at once (outside the bubble) the duty says (Contention.share)."""
    return spec.topology.workers.count


def model_parts(spec) -> int:
    return spec.topology.workers.count  # one stage's blocks each


def resize(strategy: dict, workers: int) -> None:
    strategy["stages"] = workers  # one stage per worker


def synthetic_strategy(name: str, topology: dict, microbatches: int) -> dict:
    return {"kind": KIND, "microbatches": microbatches, "schedule": name[9:]}


def simulate_steps(sim, steps: int) -> None:
    """Each rank runs its operations in the order torch's schedule issues them
    (pipeline_schedules.rank_orders; `play` places each as early as its input allows).
    A split backward's two halves (zero bubble: I, the input gradient, and W, the weight
    gradient) are each taken as half the stage's backward: the calibration measures the
    backward whole."""
    spec, c, rec = sim.spec, sim.costs, sim.rec
    p, m, schedule = sim.n_workers, spec.strategy.microbatches, spec.strategy.schedule
    v = stages_per_rank(spec.strategy)
    n = p * v  # virtual stages
    try:
        orders = rank_orders(schedule, p, m, v)
    except ScheduleOrderError as e:
        raise DtgenError(f"strategy.schedule: {e}") from None
    bounds = stage_units(spec, n)
    rows = spec.training.batch_size / m
    out_bytes = [4 * rows * val for val in boundary_values(spec, n)] + [0.0]
    held = [rank_stages(schedule, r, p, v) for r in range(p)]
    chunk_of = {st: k for r in range(p) for k, st in enumerate(held[r])}
    stage_params = [sum(b.params for st in held[r] for b in sim.blocks[bounds[st]:bounds[st + 1]]) for r in range(p)]
    stage_tensors = [sum(b.tensors for st in held[r] for b in sim.blocks[bounds[st]:bounds[st + 1]]) for r in range(p)]
    tied_ranks = {stage_rank(schedule, 0, p), stage_rank(schedule, n - 1, p)}
    tied = 4 * sum(size for name, size in tensor_sizes(spec).items() if name in tied_names(spec)) \
        if len(tied_ranks) > 1 else 0
    active = active_ranks(spec)
    chunked = v > 1 or schedule_of(schedule).placement != "one"
    free_at = [0.0] * p
    for step in range(steps):
        start = [free_at[r] + c.overhead(step) for r in range(p)]
        fwd = [c.noisy(c.forward(rows, bounds[st], bounds[st + 1], active=active), step) * sim.slow[stage_rank(schedule, st, p)]
               for st in range(n)]
        bwd = [c.noisy(c.backward(rows, bounds[st], bounds[st + 1], active=active), step) * sim.slow[stage_rank(schedule, st, p)]
               for st in range(n)]
        cost = {"F": fwd, "B": bwd, "I": [b / 2 for b in bwd], "W": [b / 2 for b in bwd]}

        def message(op, src, dst, step=step):
            return c.noisy(c.p2p(out_bytes[min(src, dst)]), step)

        free = list(start)
        for a in play(orders, p, n, schedule, lambda r, op, st: cost[op][st], message, start):
            extra = {"chunk": chunk_of[a.stage]} if chunked else {}
            direction = "fwd" if a.op == "F" else "bwd"
            if a.op != "W" and a.start > a.free and a.ready > a.free:
                src = a.stage - 1 if a.op == "F" else a.stage + 1
                if 0 <= src < n and stage_rank(schedule, src, p) != a.rank:
                    rec.span(a.rank, "recv", 1, a.free, a.start, step, mb=a.mb, stage=a.stage + 1,
                             direction=direction, **extra)
            if a.op in ("B", "I", "W"):
                extra["grad"] = {"B": "both", "I": "input", "W": "weight"}[a.op]
            free[a.rank] = rec.span(a.rank, "forward" if a.op == "F" else "backward", 0, a.start, a.end, step,
                                    mb=a.mb, stage=a.stage + 1, **extra)
            if a.op == "W":
                continue
            peer = a.stage + 1 if a.op == "F" else a.stage - 1
            if 0 <= peer < n and stage_rank(schedule, peer, p) != a.rank:
                extra.pop("grad", None)
                rec.span(a.rank, "send", 1, a.end, a.end + SEND_US, step, mb=a.mb, stage=a.stage + 1,
                         direction=direction, **extra)
                rec.send(a.rank, stage_rank(schedule, peer, p), out_bytes[min(a.stage, peer)])
        if tied:  # the first and last stage sum their copies of the tied embedding's gradient
            first, last = stage_rank(schedule, 0, p), stage_rank(schedule, n - 1, p)
            done = max(free[first], free[last]) + c.noisy(c.allreduce(tied, 2), step)
            for r in (first, last):
                free[r] = rec.span(r, "allreduce", 1, free[r], done, step, algorithm="native", phase="tied", chunk=0)
                rec.moved(r, tied, tied)
        for r in range(p):
            o = c.noisy(c.optimizer(stage_params[r], stage_tensors[r], active), step)
            began = free_at[r]
            free_at[r] = rec.span(r, "optimizer", 0, free[r], free[r] + o, step)
            rec.step(sim.ids[r], step, began, free_at[r])


def fit_compute(fit) -> tuple[list, list]:
    """Per microbatch and stage: each virtual stage's mean time split over its blocks by
    FLOPs (spans matched by their `stage`; a split backward's I and W summed per microbatch)."""
    run, spec, flops, n = fit.run, fit.spec, fit.flops, fit.workers * stages_per_rank(fit.spec.strategy)
    fwd_us = [0.0] * len(fit.blocks)
    bwd_us = [0.0] * len(fit.blocks)
    rows = spec.training.batch_size / spec.strategy.microbatches
    bounds = stage_units(spec, n)
    totals: dict = {}
    for e in run.trace.events:
        a = e["args"]
        if e["name"] in ("forward", "backward") and a["step"] != run.trace.steps[0]:
            key = (e["name"], a.get("stage", e["pid"] + 1) - 1, a["step"], a.get("mb"))
            totals[key] = totals.get(key, 0.0) + e["dur"]
    for s in range(n):
        lo, hi = bounds[s], bounds[s + 1]
        part = sum(flops[lo:hi]) or 1.0
        for name, into in (("forward", fwd_us), ("backward", bwd_us)):
            d = [dur for (kind, stage, _, _), dur in totals.items() if kind == name and stage == s]
            mean = statistics.fmean(d) if d else 0.0
            for i in range(lo, hi):
                into[i] = mean * flops[i] / part / rows
    return fwd_us, bwd_us


def finish_fit(cal: Calibration, run) -> Calibration:
    """A stage's `recv` span mixes the message with the wait for the peer's compute, so the
    message latency is the one value that makes the simulated step time equal the run's
    mean (bisection; the step time grows with the latency). That value also holds what the
    schedule did on its critical path between spans (torch.distributed.pipelining's own work,
    which differs between schedules: 2.6 ms a step in a 3-stage GPipe run here, 0.8 ms in
    1F1B), so the latency the trace shows directly is kept beside it (`alpha_traced_s`,
    _traced_latency): what another schedule is predicted with (transfer.py)."""
    alpha = solved_message_latency(cal, run, 0.0, 1e-3)
    if alpha is None:
        return cal
    solved = with_message_latency(cal, alpha)
    traced = _traced_latency(run, cal.data["comm"]["p2p"]["beta_s_per_byte"])
    if traced is not None:
        solved.data["comm"]["p2p"]["alpha_traced_s"] = traced
    return solved


def _traced_latency(run, beta: float) -> float | None:
    """A message's mean latency (s) where the trace shows it whole: a receive posted before
    its sender's send began, from that send's start to the receive's end, less its bytes at
    `beta`. None with fewer than 5 such messages."""
    first, p = run.trace.steps[0], run.spec.topology.workers.count
    rows = run.spec.training.batch_size / run.spec.strategy.microbatches
    out_bytes = [4 * rows * v for v in boundary_values(run.spec, p)]
    sends = {(e["pid"], e["args"]["step"], e["args"].get("mb"), e["args"].get("direction")): e["ts"]
             for e in run.trace.events if e["name"] == "send"}
    seen = []
    for e in run.trace.events:
        a = e["args"]
        if e["name"] != "recv" or a["step"] == first:
            continue
        peer = e["pid"] - 1 if a.get("direction") == "fwd" else e["pid"] + 1
        sent = sends.get((peer, a["step"], a.get("mb"), a.get("direction")))
        if sent is not None and e["ts"] < sent and 0 <= min(peer, e["pid"]) < len(out_bytes):
            seen.append((e["ts"] + e["dur"] - sent) / 1e6 - out_bytes[min(peer, e["pid"])] * beta)
    return max(0.0, statistics.fmean(seen)) if len(seen) >= 5 else None


def cluster_layout(spec) -> tuple[int, int, int, str, str, bool]:
    """Every worker one pipeline stage."""
    return spec.topology.workers.count, 1, 1, "native", "", False
