"""`parameter-server`: N workers (ranks 0..N-1) push gradients to S server shards (ranks N..).

Each shard owns whole parameter tensors (`opentikz_dt.shards.shard_assignment`, the same
function the figures draw from). Per pair (worker, shard) the messages strictly
alternate weights -> gradients -> weights ..., so FIFO order alone matches them: no
tags, no any-source receive (NCCL has neither).

Worker, every step: finish the posted fetch of every shard's weights (`wait` until the
shard sent, then `fetch`), forward, backward, injected slowdown, `push` each shard its
gradients while already posting the next fetch (a gloo send completes only once the
peer posted its receive, so receives go first).

Server shard, sync: receive all N pushes (`wait`), average them and take one optimizer
step (runner/optim.py: schedule, clip by the norm summed over the shards, fp16 skip; the
same math as `single` on the global batch), send every worker the new weights. Workers
unscale fp16 gradients before pushing; an async worker clips its own push whole.
Server shard, async: whichever push lands first (`Inbox`) is applied alone at once and
only that worker gets fresh weights; staleness = versions applied since that worker's
weights were sent (recorded per update in metrics and in the `update` span). Workers
never wait for each other: the run is a budget of `training.steps` x N updates (the
samples of the same number of sync steps), handed out by the first shard as tickets to
whichever worker pushed, until it answers STOP; a fast worker does more of them.
Only the servers hold authoritative weights; each saves its shard at the end.

Checkpoints (both modes) are step-labelled like every strategy's: a worker's holds only
its metrics, a shard's its tensors, optimizer state and version. Async: the first shard
holds the tickets past a checkpoint boundary until every update before it was applied,
so the saved version counts exactly n updates per step and a restart re-sends every
worker the restored weights.
"""

from __future__ import annotations

from time import perf_counter, perf_counter_ns

import torch

from ...shards import shard_assignment
from ..ps_wire import (STOP, Inbox, assign_grads, flatten_grads, grads_buffer, pack_grads, pack_weights,
                       perf_ns_of, unpack_grads, unpack_weights, weights_buffer)

KIND = "parameter-server"  # the strategy.kind this module runs (opentikz_dt/plugins.py)


def roles(spec):
    workers = [("worker", w) for w in spec.topology.workers.ids]
    return workers + [("server", s) for s in spec.topology.servers.ids]


def shards(spec, model) -> list[tuple[int, str, list[str]]]:
    """(server rank, server id, tensor names) of every shard, in rank order. Sizes come
    from the built model (the same as workload.py's for the built-in kinds; a python
    model's are known only here)."""
    n = spec.topology.workers.count
    sizes = {name: p.numel() for name, p in model.named_parameters()}
    return [(n + j, sid, names) for j, (sid, names) in enumerate(shard_assignment(spec, sizes).items())]


def train(ctx) -> None:
    if ctx.role == "worker":
        (run_worker if ctx.spec.strategy.sync == "sync" else run_async_worker)(ctx)
    elif ctx.spec.strategy.sync == "async":
        run_async_server(ctx)
    else:
        run_sync_server(ctx)


# --- worker -----------------------------------------------------------------------------

def run_worker(ctx) -> None:
    n, k = ctx.spec.topology.workers.count, ctx.rank
    model = ctx.build_model()
    shard_list = shards(ctx.spec, model)
    params = dict(model.named_parameters())
    owned = [[params[name] for name in names] for _, _, names in shard_list]
    bufs = [weights_buffer(tensors) for tensors in owned]
    posted, fetches = perf_counter_ns(), []
    if ctx.start_step < ctx.steps:
        fetches = [ctx.comm.irecv(buf, src=rank) for buf, (rank, _, _) in zip(bufs, shard_list)]
    # Its own loop, not runner/loop.py's: a worker fetches weights and pushes gradients; the servers update.
    for step in range(ctx.start_step, ctx.steps):
        ctx.fault_check(step)
        t0 = perf_counter()
        _finish_fetch(ctx, step, posted, fetches, bufs, owned)
        loss, samples = ctx.forward_backward(model, step, k, n)
        ctx.unscale_for_push(model.parameters(), step)  # fp16: the optimizer is on the servers
        grads = [flatten_grads(tensors) for tensors in owned]
        with ctx.tracer.span("push", tid="comm", step=step, shards=[sid for _, sid, _ in shard_list]):
            sends = [ctx.comm.isend(g, dst=rank) for g, (rank, _, _) in zip(grads, shard_list)]
            if step + 1 < ctx.steps:
                fetches = [ctx.comm.irecv(buf, src=rank) for buf, (rank, _, _) in zip(bufs, shard_list)]
            for work in sends:
                work.wait()
            for rank, _, _ in shard_list:
                ctx.tracer.flow_start(ctx.tracer.flow_id(k, step, rank), step, tid="comm")
        posted = perf_counter_ns()  # the next fetch's wait starts where the push ends (one comm lane)
        ctx.record_memory(model.parameters())  # a replica; the servers update it
        ctx.step_done(step, loss, samples, perf_counter() - t0)
        ctx.maybe_checkpoint(step, dict)  # weights live on the servers: only metrics to keep here
        ctx.tracer.maybe_flush()


def _finish_fetch(ctx, step, posted_ns, fetches, bufs, owned) -> None:
    """Wait for every shard's weights; trace `wait` (shard not sent yet) then `fetch`."""
    versions, sent_ns = [], posted_ns
    for work, buf, tensors in zip(fetches, bufs, owned):
        work.wait()
        version, sent_us = unpack_weights(buf, tensors)
        versions.append(version)
        sent_ns = max(sent_ns, perf_ns_of(ctx.tracer, sent_us))
    arrived = perf_counter_ns()
    sent_ns = min(sent_ns, arrived)
    if sent_ns > posted_ns:
        ctx.tracer.add_span("wait", posted_ns, sent_ns, step, tid="comm")
    ctx.tracer.add_span("fetch", sent_ns, arrived, step, tid="comm", version=min(versions))


def run_async_worker(ctx) -> None:
    """Take the next ticket the first shard hands out until it says STOP: no worker waits
    for another, so a fast one does more of the budget (metrics: steps per worker)."""
    n, k = ctx.spec.topology.workers.count, ctx.rank
    model = ctx.build_model()
    shard_list = shards(ctx.spec, model)
    params = dict(model.named_parameters())
    owned = [[params[name] for name in names] for _, _, names in shard_list]
    bufs = [weights_buffer(tensors, ticket=j == 0) for j, tensors in enumerate(owned)]
    local = max(ctx.metrics.step_end, default=-1) + 1  # updates this worker did (restored after a restart)
    last_step = ctx.start_step - 1
    posted, fetches = perf_counter_ns(), []
    if ctx.start_step < ctx.steps:
        fetches = [ctx.comm.irecv(buf, src=rank) for buf, (rank, _, _) in zip(bufs, shard_list)]
    while fetches:
        t0 = perf_counter()
        ticket = _finish_async_fetch(ctx, posted, fetches, bufs, owned, n)
        if ticket == STOP:
            break
        step = ticket // n
        for passed in range(last_step + 1, step + 1):  # a fault or checkpoint at a step this worker skipped
            ctx.fault_check(passed)
        if step > last_step and step - 1 >= ctx.start_step:
            ctx.maybe_checkpoint(step - 1, dict)  # every worker crosses each boundary here, held by the first shard
        last_step = step
        loss, samples = ctx.forward_backward(model, step, ticket % n, n)
        ctx.unscale_for_push(model.parameters(), step)  # fp16: the optimizer is on the servers
        if ctx.spec.training.grad_clip:  # async applies each push alone: clip it whole here
            torch.nn.utils.clip_grad_norm_(list(model.parameters()), ctx.spec.training.grad_clip)
        with ctx.tracer.span("push", tid="comm", step=step, shards=[sid for _, sid, _ in shard_list], ticket=ticket):
            sends = [ctx.comm.isend(pack_grads(tensors, ticket), dst=rank)
                     for tensors, (rank, _, _) in zip(owned, shard_list)]
            fetches = [ctx.comm.irecv(buf, src=rank) for buf, (rank, _, _) in zip(bufs, shard_list)]
            for work in sends:
                work.wait()
            for rank, _, _ in shard_list:
                ctx.tracer.flow_start(ctx.tracer.flow_id(k, ticket, rank), step, tid="comm")
        posted = perf_counter_ns()
        ctx.record_memory(model.parameters())  # a replica; the servers update it
        ctx.step_done(local, loss, samples, perf_counter() - t0, global_step=step)
        local += 1
        ctx.tracer.maybe_flush()
    # The other shards replied to the last push too and wait for the next: tell them this worker is done.
    byes = [ctx.comm.isend(pack_grads(tensors, STOP), dst=rank) for tensors, (rank, _, _) in
            zip(owned[1:], shard_list[1:])]
    for work in byes:
        work.wait()


def _finish_async_fetch(ctx, posted_ns, fetches, bufs, owned, n) -> int:
    """Wait for every shard's weights; trace `wait` then `fetch` under the step of the
    first shard's ticket; return the ticket (STOP: nothing left, nothing traced)."""
    versions, sent_ns, ticket = [], posted_ns, STOP
    for j, (work, buf, tensors) in enumerate(zip(fetches, bufs, owned)):
        work.wait()
        version, sent_us, *rest = unpack_weights(buf, tensors, ticket=j == 0)
        ticket = rest[0] if j == 0 else ticket
        versions.append(version)
        sent_ns = max(sent_ns, perf_ns_of(ctx.tracer, sent_us))
    if ticket == STOP:
        return STOP
    arrived = perf_counter_ns()
    sent_ns = min(sent_ns, arrived)
    if sent_ns > posted_ns:
        ctx.tracer.add_span("wait", posted_ns, sent_ns, ticket // n, tid="comm")
    ctx.tracer.add_span("fetch", sent_ns, arrived, ticket // n, tid="comm", version=min(versions))
    return ticket


# --- servers ------------------------------------------------------------------------------

class _Shard:
    """One server's tensors, optimizer, version and receive buffers."""

    def __init__(self, ctx):
        n = ctx.spec.topology.workers.count
        model = ctx.build_model()
        names = {sid: owned for _, sid, owned in shards(ctx.spec, model)}[ctx.id]
        params = dict(model.named_parameters())
        self.names = names
        self.tensors = [params[name] for name in names]
        self.opt = ctx.build_optimizer(self.tensors)
        # The update (runner/optim.py). Sync: the global norm of the averaged gradient,
        # summed over the shards. Async: each push is applied alone and its worker
        # clipped it whole before sending. The workers unscaled (fp16) what they pushed.
        sync = ctx.spec.strategy.sync == "sync"
        servers = [rank for rank, _, _ in shards(ctx.spec, model)]
        self.stepper = ctx.stepper(self.opt, self.tensors, scaler=None,
                                   reduce_sq=_sum_over_shards(ctx, servers) if sync and len(servers) > 1 else None,
                                   clip=ctx.spec.training.grad_clip if sync else None)
        self.version = 0
        size = sum(t.numel() for t in self.tensors)
        self.grads = [self.tensors[0].new_empty(size) for _ in range(n)]
        state = ctx.load_checkpoint()
        if state:
            self.restore(state)

    def weights(self, ctx):
        return pack_weights(self.tensors, self.version, ctx.tracer.now_us())

    def state(self) -> dict:
        return {"params": {n: t.detach().clone() for n, t in zip(self.names, self.tensors)},
                "opt": self.opt.state_dict(), "version": self.version}

    def restore(self, state) -> None:
        for name, t in zip(self.names, self.tensors):
            t.data.copy_(state["params"][name])
        self.opt.load_state_dict(state["opt"])
        self.version = state["version"]

    def save(self, ctx) -> None:
        ctx.save_model(dict(zip(self.names, self.tensors)))


def _received_us(ctx, received) -> dict:
    """{worker id: the server's own run-clock time (µs) it had that worker's push}, for the
    `update` span's `received_us` arg. A figure ends the push there: the sender's `push`
    ends when its send call returned, which on a busy machine can be after the update that
    needed the push began. The sync server waits for its receives in worker order, so a
    push's time is when the server saw it complete: never before it arrived, never after
    the update. `received`: perf_counter_ns() stamps, a list in worker order or {worker: ns}."""
    ids = ctx.spec.topology.workers.ids
    pairs = received.items() if isinstance(received, dict) else enumerate(received)
    return {ids[k]: ctx.tracer.run_us(t) for k, t in pairs}


def _sum_over_shards(ctx, servers: list[int]):
    """A shard's squared gradient norm -> the sum over every shard (the same on each:
    added in rank order). One small message per pair of shards, receives posted first."""
    others = [r for r in servers if r != ctx.rank]

    def reduce_sq(sq):
        got = {r: torch.empty_like(sq) for r in others}
        works = [ctx.comm.irecv(got[r], src=r) for r in others] + [ctx.comm.isend(sq, dst=r) for r in others]
        for work in works:
            work.wait()
        got[ctx.rank] = sq
        total = torch.zeros_like(sq)
        for r in servers:
            total += got[r]
        return total

    return reduce_sq


def run_sync_server(ctx) -> None:
    n = ctx.spec.topology.workers.count
    shard = _Shard(ctx)
    sends = []
    if ctx.start_step < ctx.steps:
        weights = shard.weights(ctx)
        sends = [ctx.comm.isend(weights, dst=k) for k in range(n)]
    # Its own loop, not runner/loop.py's: a server trains on no batch; it waits for pushes, updates, sends.
    for step in range(ctx.start_step, ctx.steps):
        ctx.fault_check(step)
        recvs = [ctx.comm.irecv(shard.grads[k], src=k) for k in range(n)]
        received = []
        with ctx.tracer.span("wait", tid="comm", step=step):
            for work in recvs:
                work.wait()
                received.append(perf_counter_ns())
            for work in sends:
                work.wait()
        flows = [ctx.tracer.flow_id(k, step, ctx.rank) for k in range(n)]
        with ctx.tracer.span("update", step=step, flow_in=flows[0], worker="all", version=shard.version + 1,
                             staleness=0, received_us=_received_us(ctx, received)) as span:
            for fid in flows[1:]:
                ctx.tracer.flow_finish(fid, step)
            total = shard.grads[0].clone()
            for g in shard.grads[1:]:
                total += g
            assign_grads(total.div_(n), shard.tensors)
            shard.stepper.step(step, span)
            shard.version += 1
        ctx.record_memory(shard.tensors, shard.opt)  # this server's shard and its optimizer state
        sends = []
        if step + 1 < ctx.steps:
            weights = shard.weights(ctx)
            sends = [ctx.comm.isend(weights, dst=k) for k in range(n)]
        ctx.maybe_checkpoint(step, shard.state)
        ctx.tracer.maybe_flush()
    shard.save(ctx)


def run_async_server(ctx) -> None:
    """Apply each push alone as it lands; reply to that worker only.

    The budget is `training.steps` x workers updates (the samples of `steps` sync steps);
    the first shard hands them out as tickets with its replies, in push arrival order, so
    a worker that is free takes the next update at once and nobody waits for a straggler.
    Ticket t computes slice t % N of global step t // N (the same samples as sync). Other
    shards reply with weights only and learn the ticket from the push. At a checkpoint
    boundary (all tickets of the steps up to it applied) the first shard holds its next
    tickets until every push before it landed; every shard saves there; a push that
    reaches a shard early (ticket past the boundary) waits until the shard saved.
    """
    n, budget = ctx.spec.topology.workers.count, ctx.steps * ctx.spec.topology.workers.count
    worker_ids = ctx.spec.topology.workers.ids
    dispenser = ctx.rank == n  # the first shard owns the tickets
    shard = _Shard(ctx)
    inbound = [grads_buffer(shard.tensors) for _ in range(n)]
    dtype = shard.tensors[0].dtype
    inbox = Inbox(ctx.backend, ctx.spec.runtime.timeout_s)
    sent_version = [shard.version] * n  # version of the weights each worker computes on
    outgoing: dict[int, object] = {}
    next_ticket = ctx.start_step * n
    boundary = _next_boundary(ctx, shard.version, n)
    waiting: list[int] = []  # workers owed a ticket (first shard)
    early: list[tuple[int, int]] = []  # (worker, ticket) past the boundary, applied after the save
    ready: list[tuple[int, int]] = []
    arrived: dict = {}  # (worker, ticket) -> when its push landed (perf_counter_ns): the update's received_us

    def reply(k, ticket):
        weights = pack_weights(shard.tensors, shard.version, ctx.tracer.now_us(), ticket if dispenser else None)
        sent_version[k] = shard.version
        outgoing[k] = (ctx.comm.isend(weights, dst=k), weights)
        if ticket != STOP:
            inbox.post(k, ctx.comm.irecv(inbound[k], src=k))

    def hand_out():
        nonlocal next_ticket
        while waiting and (next_ticket < boundary or next_ticket >= budget):
            k = waiting.pop(0)
            reply(k, next_ticket if next_ticket < budget else STOP)
            next_ticket += 1

    if ctx.start_step < ctx.steps:
        if dispenser:
            waiting.extend(range(n))
            hand_out()
        else:
            for k in range(n):
                reply(k, 0)
    while len(inbox) or ready:
        if ready:
            k, ticket = ready.pop(0)
        else:
            t_wait = perf_counter_ns()
            k = inbox.next()
            shard.grads[k], ticket = unpack_grads(inbound[k], dtype)
            if ticket != STOP:
                ctx.tracer.add_span("wait", t_wait, perf_counter_ns(), ticket // n, tid="comm")
            outgoing.pop(k)[0].wait()  # long done: the worker received it before it pushed
            if ticket == STOP:  # a worker the first shard stopped says goodbye
                continue
            arrived[(k, ticket)] = inbox.arrived_ns  # an early push is applied later: keep when it landed
            if ticket >= boundary > shard.version:
                early.append((k, ticket))
                continue
        step = ticket // n
        ctx.fault_check(step)
        staleness = shard.version - sent_version[k]
        with ctx.tracer.span("update", step=step, flow_in=ctx.tracer.flow_id(k, ticket, ctx.rank),
                             worker=worker_ids[k], version=shard.version + 1, staleness=staleness, ticket=ticket,
                             received_us=_received_us(ctx, {k: arrived.pop((k, ticket))})):
            assign_grads(shard.grads[k], shard.tensors)
            shard.stepper.step(step)
            shard.version += 1
        ctx.record_memory(shard.tensors, shard.opt)  # this server's shard and its optimizer state
        ctx.metrics.staleness(staleness)
        if shard.version == boundary:  # every update before the boundary is in: a consistent state
            ctx.maybe_checkpoint(boundary // n - 1, shard.state)
            boundary = _next_boundary(ctx, shard.version, n)
            ready.extend(early)
            early.clear()
        if dispenser:
            waiting.append(k)
            hand_out()
        else:
            reply(k, 0)
        ctx.tracer.maybe_flush()
    for work, _ in outgoing.values():
        work.wait()
    shard.save(ctx)


def _next_boundary(ctx, version: int, n: int) -> float:
    """The update count at the next checkpoint after `version` updates (inf when none is due)."""
    for step in range(version // n, ctx.steps):
        if ctx.is_checkpoint_step(step) and (step + 1) * n > version:
            return (step + 1) * n
    return float("inf")


# --- the runner's other questions (runner/strategies/interface.py) ------------------------

def check_model(spec, model, names: list[str], where: str) -> None:
    from ...errors import InputError
    from ..entry import spec_location

    servers = spec.topology.servers.count
    if servers > len(names):  # the spec rules check this for a built-in model; a python one is known here
        raise InputError(f"{spec_location(spec, ('topology', 'servers', 'count'))}: {servers} shards for "
                         f"{len(names)} parameter tensors: each shard owns whole tensors, so at most {len(names)}")


def figure_shards(spec, sizes: dict) -> dict:
    return shard_assignment(spec, sizes)


def summary_variant(spec) -> str:
    return f" ({spec.strategy.sync})"


def summary_facts(spec, metrics: dict) -> list[str]:
    done = metrics.get("steps_per_worker", {})
    if spec.strategy.sync == "async" and done:  # a fast worker does more of the updates
        return ["updates per worker " + ", ".join(f"{w} {c}" for w, c in done.items())]
    return []


def divergence_hint(spec, metrics: dict) -> str:
    if spec.strategy.sync != "async":
        return ""
    s = metrics["staleness"]
    stale = f" (staleness mean {sum(s) / len(s):.2f}, max {max(s):g})" if s else ""
    return (f"asynchronous updates on stale weights{stale} at lr {spec.training.lr:g}, momentum "
            f"{spec.training.momentum:g} can blow up in one run and not the next: lower "
            "training.optimizer.lr or momentum, and repeat the run (dtgen run --repeat N)")


def sent(spec) -> str:
    return "gradients and weights"
