"""Central storage, as runner/strategies/central_storage.py schedules it: the variables on
one rank (`storage`, id ps); every step it broadcasts them to the workers and sums their
gradients with a reduce, then updates once. Must not import torch.
"""

from __future__ import annotations

import statistics

from ...predict.fit import after_last_join, latency

KIND = "central-storage"
SYNTHETIC_RUNS = ("central-storage",)


def roles(spec) -> list[tuple[str, str]]:
    return [("worker", w) for w in spec.topology.workers.ids] + [("storage", "ps")]


def role_of(spec, ident: str) -> str:
    return "storage" if ident.startswith("ps") else "worker"


def simulate_steps(sim, steps: int) -> None:
    spec, c, rec = sim.spec, sim.costs, sim.rec
    n = spec.topology.workers.count
    storage = n
    params = sum(b.params for b in sim.blocks)
    tensors = sum(b.tensors for b in sim.blocks)
    nbytes = 4 * params
    batch = spec.training.batch_size
    free = [0.0] * n
    storage_free = 0.0
    for step in range(steps):
        starts = list(free)
        sent = storage_free
        done = max(starts + [sent]) + c.noisy(c.broadcast(nbytes, n + 1), step)
        rec.span(storage, "fetch", 1, sent, done, step, version=step)
        ready = []
        for k in range(n):
            rec.span(k, "wait", 1, starts[k], sent, step)
            rec.span(k, "fetch", 1, max(sent, starts[k]), done, step, version=step)
            ready.append(sim.compute(k, step, done + c.overhead(step), batch, n))
            rec.moved(k, nbytes, nbytes)
        reduced = max(ready) + c.noisy(c.reduce(nbytes, n + 1), step)
        rec.moved(storage, n * nbytes, n * nbytes)
        rec.span(storage, "wait", 1, done, reduced, step)
        for k in range(n):
            rec.span(k, "push", 1, ready[k], reduced, step)
            if rec.record:
                rec.flow(k, "s", rec.flow_id(k, step, storage), 1, reduced - 1)
            if rec.record:
                rec.flow(storage, "f", rec.flow_id(k, step, storage), 0, reduced + 1)
            rec.step(sim.ids[k], step, starts[k], reduced)
            free[k] = reduced
        u = c.noisy(c.update(params, tensors, 1), step)
        storage_free = rec.span(storage, "update", 0, reduced, reduced + u, step, worker="all", version=step + 1,
                                staleness=0)


def synthetic_strategy(name: str, topology: dict, microbatches: int) -> dict:
    return {"kind": KIND}


def fit_message_latency(fit, comm: dict) -> None:
    """Sets the broadcast's and reduce's latency from the run; no point-to-point message shows."""
    # the simulator starts each collective once the last rank joined it (simulate_steps)
    n, params, beta = fit.workers, fit.params, fit.beta
    levels = max(1, (n).bit_length())
    for name, spans in (("broadcast", {"storage": ("fetch",), "worker": ("wait", "fetch")}),
                        ("reduce", {"storage": ("wait",), "worker": ("push",)})):
        d = after_last_join(fit.run, spans)
        if d:
            # the typical time, not the mean: the simulator adds the preemptions itself,
            # drawn from the untraced gaps of every rank (Costs.overhead)
            comm[name]["alpha_s"] = latency([statistics.median(d)], 4 * params * levels, beta) / levels
    return None
