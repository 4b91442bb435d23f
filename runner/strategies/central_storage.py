"""`central-storage`: the variables live on one storage rank (rank N, id `ps`); the N
workers replicate the compute (TensorFlow's CentralStorageStrategy).

Synchronous, with collectives over all ranks:
  storage --broadcast(weights + header)--> workers   (`fetch`; the header carries the
                                                      version and send time, so a worker
                                                      can split `wait` from `fetch`)
  workers --reduce(sum of gradients)--> storage      (`push`; the storage adds zeros and
                                                      traces the reduce as `wait`,
                                                      its end as each push's
                                                      `received_us` in `update`)
  storage: average, one optimizer step (`update`)    == `single` on the global batch.
The storage saves the whole model at the end; workers keep nothing between steps.
"""

from __future__ import annotations

from time import perf_counter, perf_counter_ns

from ..ps_wire import (assign_grads, flatten_grads, pack_weights, perf_ns_of, unpack_weights,
                       weights_buffer)

KIND = "central-storage"  # the strategy.kind this module runs (opentikz_dt/plugins.py)


def roles(spec):
    return [("worker", w) for w in spec.topology.workers.ids] + [("storage", "ps")]


def train(ctx) -> None:
    if ctx.role == "storage":
        run_storage(ctx)
    else:
        run_worker(ctx)


def run_worker(ctx) -> None:
    n, k, storage = ctx.world_size - 1, ctx.rank, ctx.world_size - 1
    model = ctx.build_model()
    tensors = list(model.parameters())
    buf = weights_buffer(tensors)
    # Its own loop, not runner/loop.py's: a worker fetches weights and pushes gradients; the storage updates.
    for step in range(ctx.start_step, ctx.steps):
        ctx.fault_check(step)
        t0 = perf_counter()
        posted = perf_counter_ns()
        ctx.comm.broadcast(buf, src=storage)
        arrived = perf_counter_ns()
        version, sent_us = unpack_weights(buf, tensors)
        sent = min(max(perf_ns_of(ctx.tracer, sent_us), posted), arrived)
        if sent > posted:
            ctx.tracer.add_span("wait", posted, sent, step, tid="comm")
        ctx.tracer.add_span("fetch", sent, arrived, step, tid="comm", version=version)
        loss, samples = ctx.forward_backward(model, step, k, n)
        ctx.unscale_for_push(tensors, step)
        grads = flatten_grads(tensors)
        with ctx.tracer.span("push", tid="comm", step=step, flow_out=ctx.tracer.flow_id(k, step, storage)):
            ctx.comm.reduce(grads, dst=storage)
        ctx.record_memory(tensors)  # a replica; the storage rank updates it
        ctx.step_done(step, loss, samples, perf_counter() - t0)
        ctx.maybe_checkpoint(step, dict)  # the weights live on the storage rank
        ctx.tracer.maybe_flush()


def run_storage(ctx) -> None:
    n = ctx.world_size - 1
    model = ctx.build_model()
    tensors = list(model.parameters())
    opt = ctx.build_optimizer(tensors)
    stepper = ctx.stepper(opt, tensors, scaler=None)  # the workers unscaled what they pushed
    version = 0
    state = ctx.load_checkpoint()
    if state:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        version = state["version"]
    # Its own loop, not runner/loop.py's: the storage trains on no batch; it sends weights, sums, updates.
    for step in range(ctx.start_step, ctx.steps):
        ctx.fault_check(step)
        with ctx.tracer.span("fetch", tid="comm", step=step, version=version):
            ctx.comm.broadcast(pack_weights(tensors, version, ctx.tracer.now_us()), src=ctx.rank)
        grads = tensors[0].new_zeros(sum(t.numel() for t in tensors))
        with ctx.tracer.span("wait", tid="comm", step=step):
            ctx.comm.reduce(grads, dst=ctx.rank)
        # one collective: every worker's push is in by its end, none seen sooner
        reduced = ctx.tracer.run_us(perf_counter_ns())
        flows = [ctx.tracer.flow_id(k, step, ctx.rank) for k in range(n)]
        with ctx.tracer.span("update", step=step, flow_in=flows[0], worker="all", version=version + 1,
                             staleness=0, received_us=dict.fromkeys(ctx.spec.topology.workers.ids, reduced)) as span:
            for fid in flows[1:]:
                ctx.tracer.flow_finish(fid, step)
            assign_grads(grads.div_(n), tensors)
            stepper.step(step, span)
            version += 1
        ctx.record_memory(tensors, opt)  # the store: the whole model and its optimizer state
        ctx.maybe_checkpoint(step, lambda: {"model": model.state_dict(), "opt": opt.state_dict(), "version": version})
        ctx.tracer.maybe_flush()
    ctx.save_model(model.state_dict())


# --- the runner's other questions (runner/strategies/interface.py) ------------------------

def check_nodes(spec, spec_path, nnodes: int) -> None:
    from ...errors import InputError

    raise InputError(f"{spec_path}: strategy.kind: central-storage keeps the variables in one machine's "
                     "memory next to its workers; it cannot span hosts (use parameter-server across hosts)")


def figure_shards(spec, sizes: dict) -> dict:
    from ...shards import shard_assignment

    return shard_assignment(spec, sizes)  # the one store holds every tensor


def sent(spec) -> str:
    return "gradients and weights"
