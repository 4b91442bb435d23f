"""Sharded data parallelism (FSDP), as runner/strategies/fsdp.py runs it with torch's FSDP2.

Per step and rank, in the runner's trace vocabulary: one `forward` and one `backward`
span (ctx.forward_backward traces the whole model's passes, not each unit's), and on the
comm thread (tid 1) an `allreduce` span per collective, args algorithm fsdp, phase
all-gather or reduce-scatter, unit, pass and bytes (the unit's padded buffer,
strategies/fsdp.sharded_units), then the `optimizer` on this rank's 1/N shard.

The schedule: the root (embedding, head) is gathered first and kept to the backward;
each unit's all-gather is issued as the unit before it starts computing (FSDP2's
prefetch), so it runs under that compute; a unit computes once its gather is done. The
backward runs the units in reverse: each unit gathered again first when
reshard_after_forward freed it (prefetched as the unit after it starts its backward),
its gradients reduce-scattered once its backward is done, the root's last; the
`backward` span ends when the last reduce-scatter has (FSDP waits for it). Collectives
run one at a time per rank, in the order issued, and start once every rank issued them.
An all-gather or reduce-scatter costs half a ring all-reduce of its buffer.
`shard: gradients` (ZeRO-2) is that schedule with no gather again for the backward, as
reshard_after_forward false. `shard: optimizer` (ZeRO-1) runs as the runner's DDP and
ZeroRedundancyOptimizer do: kind allreduce's native buckets under the backward, then in
the `optimizer` span each rank's update of the tensors assigned to it (zero_owners) and
one broadcast per source rank of the parameters it updated (`allreduce`, algorithm zero,
phase broadcast, src, bytes), one source after the other, each once every rank issued it.
Must not import torch.
"""

from __future__ import annotations

import statistics

from .strategy import ROOT, option, sharded_units, zero_owners
from ..allreduce.predict import _native
from ...memory import model_sizes
from ...predict.blocks import _workload

KIND = "fsdp"
COMM_TID = 1  # the runner's comm thread (runner/trace.py TIDS["comm"])


class _Rank:
    """One rank's compute clock, its comm stream's, and the start of its current compute."""

    def __init__(self, t: float):
        self.t = self.comm = self.began = t


def simulate_steps(sim, steps: int) -> None:
    if option(sim.spec, "shard") == "optimizer":
        _native(sim, steps, update=_zero_update(sim))
        return
    c, rec, n = sim.costs, sim.rec, sim.n_workers
    batch = sim.spec.training.batch_size
    nbytes, order = sharded_units(sim.spec, _workload(sim.spec), n)
    # ZeRO-2 keeps each unit gathered from its forward to its backward (as the runner's shard_model)
    regather = bool(option(sim.spec, "reshard_after_forward")) and option(sim.spec, "shard") != "gradients"
    fwd = [c.forward(batch, i, i + 1, active=n) for i in range(len(sim.blocks))]
    bwd = [c.backward(batch, i, i + 1, active=n) for i in range(len(sim.blocks))]
    blocks = list(dict.fromkeys(u for u, _, _ in order if u != ROOT))  # in forward order
    forward_gathers = ([ROOT] if ROOT in nbytes else []) + blocks
    backward_gathers = blocks[::-1] if regather else []
    free = [0.0] * n

    def collective(ranks, issued, step, phase, unit, direction):
        """Every rank's collective from the last issue (each one's comm stream free); returns its end."""
        size = nbytes[unit]
        begin = max(max(r.comm, at) for r, at in zip(ranks, issued))
        end = begin + c.noisy_comm(c.allreduce(size, n) / 2, step)
        for k, (r, at) in enumerate(zip(ranks, issued)):
            rec.span(k, "allreduce", COMM_TID, max(r.comm, at), end, step, algorithm="fsdp", phase=phase, unit=unit,
                     bytes=size, **{"pass": direction})
            rec.moved(k, size * (n - 1) / n, size * (n - 1) / n)
            r.comm = end
        return end

    def play(ranks, step, segments, costs, gathers, direction, scatter):
        """Compute `segments` (unit, workload unit, share) in order: the first of `gathers` is
        gathered at once, each next one issued as the unit before it starts its first
        segment; a unit computes once gathered; with `scatter`, a unit's gradients are
        reduce-scattered after its last segment."""
        ready = {}
        if gathers:
            ready[gathers[0]] = collective(ranks, [r.t for r in ranks], step, "all-gather", gathers[0], direction)
        last = {unit: i for i, (unit, _, _) in enumerate(segments)}
        started = set()
        for i, (unit, part, share) in enumerate(segments):
            for r in ranks:
                r.began = max(r.t, ready.get(unit, 0.0))
            if unit not in started and unit in gathers:
                started.add(unit)
                after = gathers.index(unit) + 1
                if after < len(gathers):  # the next unit's gather, prefetched under this one
                    ready[gathers[after]] = collective(ranks, [r.began for r in ranks], step, "all-gather",
                                                       gathers[after], direction)
            for r in ranks:
                r.t = r.began + c.noisy(costs[part] * share, step)
            if scatter and last[unit] == i:
                collective(ranks, [r.t for r in ranks], step, "reduce-scatter", unit, "backward")

    for step in range(steps):
        ranks = [_Rank(sim.start(k, step, free)) for k in range(n)]
        starts = [r.t for r in ranks]
        play(ranks, step, order, fwd, forward_gathers, "forward", scatter=False)
        for k, r in enumerate(ranks):
            rec.span(k, "forward", 0, starts[k], r.t, step)
        ends = [r.t for r in ranks]
        # the root stays gathered from its forward to its backward; the blocks are gathered again
        play(ranks, step, order[::-1], bwd, backward_gathers, "backward", scatter=True)
        for k, r in enumerate(ranks):
            t = rec.span(k, "backward", 0, ends[k], max(r.t, r.comm), step)  # FSDP waits for the last reduce-scatter
            if sim.slow[k] > 1:
                t = rec.span(k, "slowdown", 0, t, t + (sim.slow[k] - 1) * (r.t - starts[k]), step, factor=sim.slow[k])
            end = rec.span(k, "optimizer", 0, t, t + c.noisy(c.optimizer(sim.params // n, sim.tensors, n), step), step)
            rec.step(sim.ids[k], step, free[k], end)
            free[k] = end


def _zero_shares(spec, params: int, tensors: int, n: int) -> list[tuple[int, int]]:
    """(values, tensors) each rank updates under ZeroRedundancyOptimizer: the model's tensors
    assigned as torch does (zero_owners); a python model's sizes are unknown until built,
    so it is split evenly."""
    sizes = model_sizes(spec)
    if sizes is None:
        return [(params // n + (r < params % n), tensors // n + (r < tensors % n)) for r in range(n)]
    elements = list(sizes.tensors.values())
    owners = zero_owners(elements, n)
    return [(sum(e for e, o in zip(elements, owners) if o == r), owners.count(r)) for r in range(n)]


def _zero_update(sim):
    """ZeroRedundancyOptimizer.step after DDP's backward: each rank's update of its tensors,
    then every source's broadcast of what it updated (4 bytes a value: the weights stay fp32)."""
    c, rec, n = sim.costs, sim.rec, sim.n_workers
    shares = _zero_shares(sim.spec, sim.params, sim.tensors, n)

    def update(step: int, ready: list) -> list:
        t = [ready[k] + c.noisy(c.optimizer(values, tensors, n), step) for k, (values, tensors) in enumerate(shares)]
        for src, (values, _) in enumerate(shares):
            size = 4 * values
            end = max(t) + c.noisy_comm(c.broadcast(size, n), step)
            for k in range(n):
                rec.span(k, "allreduce", COMM_TID, t[k], end, step, algorithm="zero", phase="broadcast", src=src,
                         bytes=size)
                rec.moved(k, size if k == src else 0, 0 if k == src else size)
                t[k] = end
        return [rec.span(k, "optimizer", 0, ready[k], t[k], step) for k in range(n)]

    return update


# ---------------------------------------------------------------- calibration fit from a run


def _collectives(fit) -> list:
    """The steady all-gathers and reduce-scatters of the compute ranks: (rank, step, pass, µs, bytes)."""
    first = fit.run.trace.steps[0] if fit.run.trace.steps else 0
    return [(e["pid"], e["args"]["step"], e["args"].get("pass"), e["dur"], e["args"].get("bytes", 0))
            for e in fit.run.trace.events
            if e["name"] == "allreduce" and e["args"].get("algorithm") == "fsdp" and e["args"]["step"] != first]


def fit_compute(fit) -> tuple[list, list]:
    """The `forward` and `backward` spans hold the unit's collectives the compute waited
    for (the simulator adds those itself): each pass's compute is its span less its
    collectives' time per rank and step, at least a quarter of the span (on a CPU the
    collectives partly run under the compute)."""
    from ...predict.fit import per_row

    role, phases = fit.role, fit.phases
    spans = {"forward": phases.get((role, "forward"), 0.0), "backward": phases.get((role, "backward"), 0.0)}
    found = _collectives(fit)
    rank_steps = len({(rank, step) for rank, step, *_ in found}) or 1
    for direction in spans:
        comm = sum(us for _, _, p, us, _ in found if p == direction) / rank_steps
        spans[direction] = max(spans[direction] / 4, spans[direction] - comm)
    return per_row(fit, spans["forward"], spans["backward"])


def fit_message_latency(fit, comm: dict) -> float | None:
    """The all-reduce's latency from the collectives the run shows: an all-gather or
    reduce-scatter of b bytes over n ranks is simulated as (n-1) alpha + (n-1)/n b beta."""
    n = fit.workers
    found = _collectives(fit)
    if n > 1 and found:
        beta = comm["allreduce"]["beta_s_per_byte"]
        alphas = [(us / 1e6 - (n - 1) / n * nbytes * beta) / (n - 1) for *_, us, nbytes in found]
        comm["allreduce"]["alpha_s"] = max(0.0, statistics.median(alphas))
    return None


def finish_fit(cal, run):
    """How much of a pass's span its collectives hid under compute (prefetched) the trace
    cannot say, so fit_compute's estimate is scaled to the one factor that makes the
    simulated step time equal the run's mean (bisection; the step time grows with it)."""
    import copy

    from ...predict.calibration import Calibration
    from ...predict.fit import run_step_s, simulated_step_s, solve_increasing

    target = run_step_s(run)
    if not target:
        return cal
    steps = min(run.spec.training.steps, 20)

    def scaled(factor: float):
        data = copy.deepcopy(cal.data)
        for block in data["compute"]["blocks"]:
            for pass_ in ("forward", "backward"):
                block[pass_] = [value * factor for value in block[pass_]]
        return Calibration(data, cal.path)

    def step_time(factor: float) -> float:
        return simulated_step_s(scaled(factor), run, steps)

    lo, hi = 0.0, 1.0
    while step_time(hi) < target and hi < 64:
        lo, hi = hi, 2 * hi
    return scaled(solve_increasing(step_time, target, lo, hi, 25))


def cluster_layout(spec) -> tuple[int, int, int, str, str, bool]:
    """Every worker data-parallel at its ZeRO stage. ZeRO-1 is DDP (buckets under the
    backward) and ZeroRedundancyOptimizer's broadcasts. reshard_after_forward false gathers
    each unit once a step, as ZeRO-2 does: the same collectives."""
    shard = str(option(spec, "shard"))
    if shard == "parameters" and not option(spec, "reshard_after_forward"):
        shard = "gradients"
    return 1, spec.topology.workers.count, 1, "native", shard, shard == "optimizer"
