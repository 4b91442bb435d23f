"""GPipe and 1F1B pipelines, as torch.distributed.pipelining runs them in the runner.

Stage i owns blocks bounds[i]..bounds[i+1]-1; a microbatch's forward on stage i waits
for stage i-1's forward plus the activation message, its backward for stage i+1's
backward plus the gradient message. `recv` spans run from when the stage was free to
the compute start (the wait for the peer), `send` spans are the short posting of a send.
Must not import torch.
"""

from __future__ import annotations

from ..errors import DtgenError
from .blocks import boundary_values, stage_units, tensor_sizes, tied_names

SEND_US = 15.0  # posting a send (measured on the runner's traces: tens of µs)


def schedule(kind: str, stage: int, stages: int, micro: int) -> list[tuple[str, int]]:
    """The op order of one stage (0-based): GPipe all forwards then all backwards, or 1F1B."""
    if kind == "gpipe":
        return [("F", m) for m in range(micro)] + [("B", m) for m in range(micro)]
    warm = min(stages - stage - 1, micro)
    ops = [("F", m) for m in range(warm)]
    for i in range(micro - warm):
        ops += [("F", warm + i), ("B", i)]
    return ops + [("B", m) for m in range(micro - warm, micro)]


def pipeline(sim, steps: int) -> None:
    spec, c, rec = sim.spec, sim.costs, sim.rec
    p, m = sim.n_workers, spec.strategy.microbatches
    bounds = stage_units(spec, p)
    rows = spec.training.batch_size / m
    orders = [schedule(spec.strategy.schedule, s, p, m) for s in range(p)]
    out_bytes = [4 * rows * v for v in boundary_values(spec, p)] + [0.0]
    stage_params = [sum(b.params for b in sim.blocks[bounds[s]:bounds[s + 1]]) for s in range(p)]
    stage_tensors = [sum(b.tensors for b in sim.blocks[bounds[s]:bounds[s + 1]]) for s in range(p)]
    tied = 4 * sum(size for name, size in tensor_sizes(spec).items() if name in tied_names(spec)) if p > 1 else 0
    # stages compute at once only outside the bubble: that many share the cores
    active = max(1.0, p * m / (m + p - 1))
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
