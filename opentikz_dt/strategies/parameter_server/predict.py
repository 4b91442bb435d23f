"""Parameter servers (sync and async, S shards), as runner/strategies/parameter_server.py
schedules them.

Worker step: finish the fetch posted during the last push (`wait` until the shard sent,
then `fetch`), forward, backward, straggler sleep, `push` to every shard. A shard sends
its weights to N workers and receives N gradients over its one link, so transfers queue
there; a sync shard posts its N sends one after another, each taking its CPU a while
(`_send_us`: untraced on the server, in the later workers' fetch: `_fetch_us`). Sync
shards update once all N pushes landed; async shards apply each push alone in arrival
order, and the first hands the pushing worker the next update of the budget (steps x N
updates in all). Must not import torch.
"""

from __future__ import annotations

import heapq
import statistics

from ...shards import shard_assignment
from ...predict.blocks import tensor_sizes
from ...predict.fit import latency, mean_durations, solve_increasing
from ...predict.phases import server_gaps

KIND = "parameter-server"
SYNTHETIC_RUNS = ("ps-sync", "ps-async")


def roles(spec) -> list[tuple[str, str]]:
    return [("worker", w) for w in spec.topology.workers.ids] + [("server", s) for s in spec.topology.servers.ids]


def simulate_steps(sim, steps: int) -> None:
    (_sync if sim.spec.strategy.sync == "sync" else _async)(sim, steps)


def synthetic_strategy(name: str, topology: dict, microbatches: int) -> dict:
    topology["servers"] = {"count": 1}
    return {"kind": KIND, "sync": name[3:]}


def fit_message_latency(fit, comm: dict) -> float | None:
    """From the workers' fetch and push spans: one message of a mean shard's bytes. Where a
    sync shard's CPU posts its sends one after another (`_fitted_send_us`), a fetch also
    holds those posted before it: the fetches count as the message that, through
    `_fetch_us`, gives their mean (`_message_behind_sends`)."""
    spec = fit.spec
    sizes = tensor_sizes(spec)
    shard_bytes = statistics.fmean(4 * sum(sizes[t] for t in names)
                                   for names in shard_assignment(spec, sizes).values())
    fetches = mean_durations(fit.run, "worker", "fetch")
    send = _fitted_send_us(fit.run)
    if send > 0 and fetches:
        message = _message_behind_sends(statistics.fmean(fetches), shard_bytes * fit.beta * 1e6, send,
                                        spec.topology.workers.count)
        fetches = [] if message is None else [message] * len(fetches)
    return latency(fetches + mean_durations(fit.run, "worker", "push"), shard_bytes, fit.beta)


def _message_behind_sends(mean_fetch: float, queued: float, send: float, n: int) -> float | None:
    """The message (µs) whose n fetches, the k-th behind k others and k + 1 sends
    (`_fetch_us`), take `mean_fetch` on average; None where the sends alone take that long
    (then the fetches say nothing of the message). Measured at 2 workers on 2 cores: fetches
    420 us, sends 80 us, pushes 100 us: the message is the fetch's, not the push's (a fit
    from the pushes alone ran 35-44% low there)."""
    def mean_of(message: float) -> float:
        return statistics.fmean(_fetch_us(message, queued, send, k) for k in range(n))

    if mean_of(0.0) >= mean_fetch * (1 - 1e-9):  # (1 - 1e-9): the sends' fit, rounded
        return None
    # up to mean_fetch: mean_of(mean_fetch) >= mean_fetch, as _fetch_us(m, ., ., 0) >= m
    return solve_increasing(mean_of, mean_fetch, 0.0, mean_fetch, 60)


def message_samples(fit) -> list:
    """Each fetch and push, as one message of a mean shard's bytes."""
    sizes = tensor_sizes(fit.spec)
    shard_bytes = statistics.fmean(4 * sum(sizes[t] for t in names)
                                   for names in shard_assignment(fit.spec, sizes).values())
    return [(d, shard_bytes) for name in ("fetch", "push") for d in mean_durations(fit.run, "worker", name)]


def gradients_per_update(spec) -> int:
    """A sync shard's update sums every worker's gradient; an async one applies one push."""
    return spec.topology.workers.count if spec.strategy.sync == "sync" else 1


def _shards(spec, blocks):
    sizes = tensor_sizes(spec)
    out = []
    for sid, names in shard_assignment(spec, sizes).items():
        params = sum(sizes[n] for n in names)
        out.append((sid, params, len(names), 4 * params))
    return out


def _sync(sim, steps: int) -> None:
    spec, c, rec = sim.spec, sim.costs, sim.rec
    n = spec.topology.workers.count
    shards = _shards(spec, sim.blocks)
    names = [sid for sid, *_ in shards]
    msg = [c.p2p(nbytes) for *_, nbytes in shards]          # one message to or from a shard
    queued = [c.p2p_bytes(nbytes) for *_, nbytes in shards]  # one more message ahead on the shard's link
    send = _send_us(c)  # the shard's CPU posting one send (its receives it posts at once)
    total = sum(nbytes for *_, nbytes in shards)
    batch = spec.training.batch_size
    sent = [0.0] * len(shards)          # when each shard sent the weights of this step
    server_free = [0.0] * len(shards)
    push_end = [0.0] * n                # end of each worker's last push (fetch posted there)
    for step in range(steps):
        ready = []
        last_sent = max(sent)
        for k in range(n):
            t0 = arrive = push_end[k]
            for j in range(len(shards)):
                arrive = max(arrive, sent[j] + c.noisy(_fetch_us(msg[j], queued[j], send, k), step))
            s = max(min(last_sent, arrive), t0)
            if s > t0:
                rec.span(k, "wait", 1, t0, s, step)
            rec.span(k, "fetch", 1, s, arrive, step, version=step)
            # the untraced part of a step (unpacking, batch gathering, preemption) follows the fetch
            ready.append((sim.compute(k, step, arrive + c.overhead(step), batch, n), k, t0))
        ready.sort()
        rx_free = [0.0] * len(shards)
        for t1, k, t0 in ready:
            end = t1
            for j in range(len(shards)):
                rx_free[j] = max(t1 + c.noisy(msg[j], step), rx_free[j] + queued[j])
                end = max(end, rx_free[j])
            rec.span(k, "push", 1, t1, end, step, shards=names)
            rec.moved(k, total, total)
            if rec.record:
                for j in range(len(shards)):
                    rec.flow(k, "s", rec.flow_id(k, step, n + j), 1, max(t1, end - 1))
            push_end[k] = end
            rec.step(sim.ids[k], step, t0, end)
        for j, (sid, params, tensors, nbytes) in enumerate(shards):
            ps = n + j
            rec.moved(ps, n * nbytes, n * nbytes)
            start = max(rx_free[j], server_free[j])
            rec.span(ps, "wait", 1, server_free[j], start, step)
            u = c.noisy(c.update(params, tensors, n), step)
            rec.span(ps, "update", 0, start, start + u, step, worker="all", version=step + 1, staleness=0)
            if rec.record:
                for k in range(n):
                    rec.flow(ps, "f", rec.flow_id(k, step, ps), 0, start + 1)
            sent[j] = start + u
            server_free[j] = sent[j] + n * send  # posting the sends, untraced


def _fetch_us(msg: float, queued: float, send: float, k: int) -> float:
    """From a sync shard's update to the k-th worker's weights landing: its message, behind
    the k before it on the shard's link; where the shard's CPU posts them (`send`), the k-th
    leaves once k + 1 were posted, and a message's wait for its receiver to get a core runs
    while the later ones are posted (measured at 8 workers on 2 cores: the first worker's
    fetch 1.0-2.7 ms, the eighth's 3.9-4.1 ms with 410-480 us a send, not 2 ms + 7 sends)."""
    return max(msg + k * queued, (k + 1) * send)


def _fitted_send_us(run) -> float:
    """A sync server's CPU per send (µs) in a run: its untraced time after each update (it
    posts one send to each worker there, one after another) over the workers."""
    spec = run.spec
    gaps = server_gaps(run)
    if spec.strategy.sync != "sync" or not gaps:
        return 0.0
    return statistics.fmean(gaps) / spec.topology.workers.count


def _send_us(costs) -> float:
    """A sync shard's CPU per send (µs), from a calibration made on a sync parameter server
    (its `server_overhead_s` over its workers; none from another strategy: nothing shows it),
    carried to any worker count as measured. A core per rank: none.

    Not scaled as a message's wait for a core is (contention.wait_ratio, 2.3x from 2 workers to
    8 on 2 cores): in two runs of the transfer benchmark (88 kB shards) a send took 476-620 us at 2
    workers, 444-630 at 3, 464-738 at 4 and 560-752 at 8, and the scaled sends predicted
    8 workers +17% and +92%, 4 workers +37% and +30% (carried as measured: -29% and +12%,
    +2% and -5%). Other runs on the same machine measured 120-210 us at 2 workers and
    410-690 at 8: what a send costs moves with the machine's state more than
    with the worker count."""
    made = costs.cal.data.get("made_for")
    strategy = (made.get("strategy") or {}) if isinstance(made, dict) else {}
    if strategy.get("kind") != KIND or strategy.get("sync") != "sync" or not made.get("workers"):
        return 0.0
    if costs.contention.core_per_rank:  # a core per rank (predict/contention.py)
        return 0.0
    return costs.server_us / int(made["workers"])


def _async(sim, steps: int) -> None:
    """As the runner: a budget of steps x N updates; the first shard hands the next one
    (ticket t: slice t % N of global step t // N) to whichever worker pushed, so nobody
    waits for a straggler. Spans carry the global step, flows the ticket."""
    spec, c, rec = sim.spec, sim.costs, sim.rec
    n = spec.topology.workers.count
    shards = _shards(spec, sim.blocks)
    batch = spec.training.batch_size
    budget, handed = steps * n, 0
    version = [0] * len(shards)
    sent_version = [[0] * n for _ in shards]
    server_free = [0.0] * len(shards)
    heap = []

    def start_update(k: int, ticket: int, push_end: float, sent: list, first: bool) -> None:
        step = ticket // n
        t0 = push_end
        arrive = t0
        for j, (sid, params, tensors, nbytes) in enumerate(shards):
            arrive = max(arrive, sent[j] + c.noisy(c.p2p(nbytes) + (k * c.p2p_bytes(nbytes) if first else 0),
                                                   step))
        s = max(min(max(sent), arrive), push_end)
        if s > push_end:
            rec.span(k, "wait", 1, push_end, s, step)
        rec.span(k, "fetch", 1, s, arrive, step, version=min(sent_version[j][k] for j in range(len(shards))))
        t1 = sim.compute(k, step, arrive + c.overhead(step), batch, n)
        heapq.heappush(heap, (t1, k, ticket, t0))

    for k in range(min(n, budget)):
        start_update(k, k, 0.0, [0.0] * len(shards), True)
    handed = min(n, budget)
    while heap:
        t1, k, ticket, t0 = heapq.heappop(heap)
        step = ticket // n
        end, sent = t1, []
        for j, (sid, params, tensors, nbytes) in enumerate(shards):
            ps = n + j
            landed = t1 + c.noisy(c.p2p(nbytes), step)
            begin = max(landed, server_free[j])
            rec.span(ps, "wait", 1, server_free[j], begin, step)
            stale = version[j] - sent_version[j][k]
            version[j] += 1
            u = c.noisy(c.update(params, tensors, 1), step)
            rec.span(ps, "update", 0, begin, begin + u, step, worker=sim.ids[k], version=version[j], staleness=stale)
            if rec.record:
                rec.flow(ps, "f", rec.flow_id(k, ticket, ps), 0, begin + 1)
            rec.result.staleness.append(stale)
            # an async server packs and sends this worker's reply before it takes the next push
            server_free[j] = begin + u + c.noisy(c.server_us, step)
            sent_version[j][k] = version[j]
            sent.append(server_free[j])
            end = max(end, landed)
            rec.send(k, ps, nbytes)
            rec.send(ps, k, nbytes)
        rec.span(k, "push", 1, t1, end, step, shards=[s[0] for s in shards], ticket=ticket)
        for j in range(len(shards)):
            if rec.record:
                rec.flow(k, "s", rec.flow_id(k, ticket, n + j), 1, max(t1, end - 1))
        rec.step(sim.ids[k], step, t0, end)
        if handed < budget:
            start_update(k, handed, end, sent, False)
            handed += 1
