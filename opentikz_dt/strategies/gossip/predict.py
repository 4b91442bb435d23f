"""Gossip (decentralised averaging), as runner/strategies/gossip.py runs it: after its
optimizer step a worker exchanges its weights with `peers` neighbours; the exchange ends
when it and every neighbour it talks to have reached their exchange.
Must not import torch.
"""

from __future__ import annotations

import statistics

from .strategy import neighbours
from ...predict.fit import thin

KIND = "gossip"
SYNTHETIC_RUNS = ("gossip",)


def synthetic_strategy(name: str, topology: dict, microbatches: int) -> dict:
    return {"kind": KIND}


def fit_message_latency(fit, comm: dict) -> float | None:
    return _exchange_latency(_exchanges(fit.run, fit.spec), fit.spec, 4 * fit.params, fit.beta)


def fit_noise(fit) -> dict:
    """The exchanges' spread, as ratios to their mean (Costs.noisy_exchange draws from it)."""
    exchanges = _exchanges(fit.run, fit.spec)
    if not exchanges:
        return {}
    mean = statistics.fmean(exchanges)
    return {"exchange_ratios": thin([round(x / mean, 4) for x in exchanges]) if mean > 0 else []}


def simulate_steps(sim, steps: int) -> None:
    c, rec, n = sim.costs, sim.rec, sim.n_workers
    batch, peers = sim.spec.training.batch_size, sim.spec.strategy.peers
    links = [neighbours(k, n, peers) for k in range(n)]
    free = [0.0] * n
    for step in range(steps):
        starts = [sim.start(k, step, free) for k in range(n)]
        ready = [sim.optimizer(k, step, sim.compute(k, step, starts[k], batch, n)) for k in range(n)]
        for k in range(n):
            to, frm = links[k]
            begin = max([ready[k]] + [ready[p] for p in to + frm])
            # the messages travel at once (one latency), but the runner waits on its receives one
            # after another and each wakes the process again: each waits for a core where
            # processes outnumber cores (Contention.p2p_wait); the sends share the rank's link
            exchange = (c.p2p(sim.nbytes) + (len(frm) - 1) * c.contention.p2p_wait
                        + (len(to) - 1) * c.p2p_bytes(sim.nbytes))
            end = begin + c.noisy_exchange(exchange + 1e6 * c.add_s * sim.params * len(frm), step, len(frm))
            rec.span(k, "gossip", 1, ready[k], end, step, peers=[sim.ids[p] for p in frm])
            rec.moved(k, len(to) * sim.nbytes, len(frm) * sim.nbytes)
            rec.step(sim.ids[k], step, free[k], end)
            free[k] = end


def _exchanges(run, spec) -> list:
    """Per rank and steady step, a gossip exchange's time (µs) from the moment this rank and
    every neighbour it talks to had started their exchange, to its end."""
    first = run.trace.steps[0]
    spans = {(e["pid"], e["args"]["step"]): (e["ts"], e["ts"] + e["dur"]) for e in run.trace.events
             if e["name"] == "gossip" and e["args"]["step"] != first}
    n, peers = spec.topology.workers.count, spec.strategy.peers
    out = []
    for (rank, step), (start, end) in spans.items():
        to, frm = neighbours(rank, n, peers)
        starts = [spans[(p, step)][0] for p in set(to + frm) if (p, step) in spans]
        out.append(end - max([start] + starts))
    return out


def _exchange_latency(exchanges: list, spec, nbytes: float, beta: float) -> float | None:
    """Latency of a gossip exchange from its mean time (the spread is drawn apart); its
    waits for a core are in it (a gossip fit has no wait of its own: Contention.p2p_wait is 0)."""
    if not exchanges:
        return None
    to, _ = neighbours(0, spec.topology.workers.count, spec.strategy.peers)
    return max(0.0, statistics.fmean(exchanges) / 1e6 - len(to) * nbytes * beta)
