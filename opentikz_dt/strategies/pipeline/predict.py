"""Pipelines (GPipe and 1F1B), as runner/strategies/pipeline.py runs them with
torch.distributed.pipelining: one stage per worker (role `stage`), not data-parallel.

Stage i owns blocks bounds[i]..bounds[i+1]-1; a microbatch's forward on stage i waits
for stage i-1's forward plus the activation message, its backward for stage i+1's
backward plus the gradient message. `recv` spans run from when the stage was free to
the compute start (the wait for the peer), `send` spans are the short posting of a send.
Must not import torch.
"""

from __future__ import annotations

import statistics

from ...errors import DtgenError
from .strategy import stage_ops
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
    """Every stage computes; how much at once (outside the bubble) the duty says (Costs.share)."""
    return spec.topology.workers.count


def model_parts(spec) -> int:
    return spec.topology.workers.count  # one stage's blocks each


def resize(strategy: dict, workers: int) -> None:
    strategy["stages"] = workers  # one stage per worker


def synthetic_strategy(name: str, topology: dict, microbatches: int) -> dict:
    return {"kind": KIND, "microbatches": microbatches, "schedule": name[9:]}


def simulate_steps(sim, steps: int) -> None:
    spec, c, rec = sim.spec, sim.costs, sim.rec
    p, m = sim.n_workers, spec.strategy.microbatches
    bounds = stage_units(spec, p)
    rows = spec.training.batch_size / m
    orders = [stage_ops(spec.strategy.schedule, s, p, m) for s in range(p)]
    out_bytes = [4 * rows * v for v in boundary_values(spec, p)] + [0.0]
    stage_params = [sum(b.params for b in sim.blocks[bounds[s]:bounds[s + 1]]) for s in range(p)]
    stage_tensors = [sum(b.tensors for b in sim.blocks[bounds[s]:bounds[s + 1]]) for s in range(p)]
    tied = 4 * sum(size for name, size in tensor_sizes(spec).items() if name in tied_names(spec)) if p > 1 else 0
    active = active_ranks(spec)
    free_at = [0.0] * p
    for step in range(steps):
        start = [free_at[s] + c.overhead(step) for s in range(p)]
        free, pos, end = list(start), [0] * p, {}
        fwd = [c.noisy(c.forward(rows, bounds[s], bounds[s + 1], active=active), step) * sim.slow[s] for s in range(p)]
        bwd = [c.noisy(c.backward(rows, bounds[s], bounds[s + 1], active=active), step) * sim.slow[s] for s in range(p)]
        left = sum(len(o) for o in orders)
        while left:
            progressed = False
            for s in range(p):
                if pos[s] >= len(orders[s]):
                    continue
                op, mb = orders[s][pos[s]]
                if op == "F":
                    dep = start[s] if s == 0 else end.get(("F", s - 1, mb))
                    msg = 0.0 if s == 0 else out_bytes[s - 1]
                else:
                    dep = end.get(("F", s, mb)) if s == p - 1 else end.get(("B", s + 1, mb))
                    msg = 0.0 if s == p - 1 else out_bytes[s]
                if dep is None:
                    continue
                ready = dep + (c.noisy(c.p2p(msg), step) if msg else 0.0)
                begin = max(free[s], ready)
                if msg:
                    rec.span(s, "recv", 1, free[s], begin, step, mb=mb, stage=s + 1,
                             direction="fwd" if op == "F" else "bwd")
                length = fwd[s] if op == "F" else bwd[s]
                done = rec.span(s, "forward" if op == "F" else "backward", 0, begin, begin + length, step, mb=mb,
                                stage=s + 1)
                end[(op, s, mb)] = free[s] = done
                peer = s + 1 if op == "F" else s - 1
                if 0 <= peer < p:
                    rec.span(s, "send", 1, done, done + SEND_US, step, mb=mb, stage=s + 1,
                             direction="fwd" if op == "F" else "bwd")
                    nbytes = out_bytes[min(s, peer)]
                    rec.send(s, peer, nbytes)
                pos[s] += 1
                left -= 1
                progressed = True
            if not progressed:
                raise DtgenError(f"pipeline schedule '{spec.strategy.schedule}' deadlocked in the simulation")
        if tied:  # the first and last stage sum their copies of the tied embedding's gradient
            done = max(free[0], free[-1]) + c.noisy(c.allreduce(tied, 2), step)
            for s in (0, p - 1):
                free[s] = rec.span(s, "allreduce", 1, free[s], done, step, algorithm="native", phase="tied", chunk=0)
                rec.moved(s, tied, tied)
        for s in range(p):
            o = c.noisy(c.optimizer(stage_params[s], stage_tensors[s], active), step)
            began = free_at[s]
            free_at[s] = rec.span(s, "optimizer", 0, free[s], free[s] + o, step)
            rec.step(sim.ids[s], step, began, free_at[s])


def fit_compute(fit) -> tuple[list, list]:
    """Per microbatch and stage: each stage's mean time split over its blocks by FLOPs."""
    run, spec, flops, n = fit.run, fit.spec, fit.flops, fit.workers
    fwd_us = [0.0] * len(fit.blocks)
    bwd_us = [0.0] * len(fit.blocks)
    rows = spec.training.batch_size / spec.strategy.microbatches
    bounds = stage_units(spec, n)
    for s in range(n):
        lo, hi = bounds[s], bounds[s + 1]
        part = sum(flops[lo:hi]) or 1.0
        for name, into in (("forward", fwd_us), ("backward", bwd_us)):
            d = [e["dur"] for e in run.trace.events if e["name"] == name and e["pid"] == s
                 and e["args"]["step"] != run.trace.steps[0]]
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
