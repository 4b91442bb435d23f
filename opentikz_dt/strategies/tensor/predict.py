"""Tensor parallelism, as runner/strategies/tensor.py runs it: every worker computes its
slice of every split layer on the whole batch, and each column/row-parallel pair ends in
one all-reduce of the pair's output (forward) and one of its input gradient (backward).

Per step, every worker runs the pairs of workload.tensor_plan in lockstep: forward, the
replicated parts before the pairs whole (a transformer's embeddings), then per pair its
1/N of the pair's compute and the pair's all-reduce, which starts once the slowest
worker arrived (batch x values-per-sample x 4 bytes: a transformer's batch x seq_len x
d_model), then the replicated parts after them (the head, an mlp's odd last layer);
backward the same in reverse. A pair's share of the measured (or fitted) forward and
backward time is its share of the model's FLOPs. The spans are the runner's: one
`allreduce` span per collective on the comm thread, with phase, layer, pass and bytes.
A python model's collectives, known only from its plan at run time, are left out (its
compute is split evenly). Must not import torch.
"""

from __future__ import annotations

from ...workload import model_section, tensor_plan

KIND = "tensor"


def model_parts(spec) -> int:
    return spec.topology.workers.count  # every worker holds 1/N of the split layers


def simulate_steps(sim, steps: int) -> None:
    rec, c = sim.rec, sim.costs
    n, batch = sim.n_workers, sim.spec.training.batch_size
    plan = tensor_plan(model_section(sim.spec), nominal_flops=1.0, nominal_values=0)
    total = plan.before + sum(p.flops for p in plan.pairs) + plan.after
    t = 0.0
    for step in range(steps):
        start = t + c.overhead(step)
        now = [start] * n

        def run(work: float, k: int) -> None:
            now[k] += c.noisy(work * sim.slow[k], step)

        for name, work, pairs, lead, tail in (
                ("forward", c.forward(batch, active=n), plan.pairs, plan.before, plan.after),
                ("backward", c.backward(batch, active=n), tuple(reversed(plan.pairs)), plan.after, plan.before)):
            began = list(now)
            share = work / total
            for k in range(n):
                run(share * lead, k)  # replicated: whole on every worker
            for pair in pairs:
                for k in range(n):
                    run(share * pair.flops / n, k)
                values = pair.forward if name == "forward" else pair.backward
                if not values or n == 1:
                    continue
                ready = max(now)  # the sum needs every worker's partial result
                nbytes = 4 * batch * values
                end = ready + c.noisy_comm(c.allreduce(nbytes, n), step)
                layer = pair.forward_layer if name == "forward" else pair.backward_layer
                for k in range(n):
                    rec.span(k, "allreduce", 1, ready, end, step, algorithm="native", phase="all-reduce",
                             layer=layer, bytes=nbytes, **{"pass": name})
                    rec.moved(k, 2 * (n - 1) / n * nbytes, 2 * (n - 1) / n * nbytes)
                now = [end] * n
            for k in range(n):
                run(share * tail, k)
                rec.span(k, name, 0, began[k], now[k], step)
        for k in range(n):
            end = rec.span(k, "optimizer", 0, now[k],
                           now[k] + c.noisy(c.optimizer(sim.params // n, sim.tensors, n), step), step)
            rec.step(sim.ids[k], step, start, end)
            t = max(t, end)


# ---------------------------------------------------------------- calibration fit from a run


def _plan_of(spec):
    return tensor_plan(model_section(spec), nominal_flops=1.0, nominal_values=0)


def fit_compute(fit) -> tuple[list, list]:
    """Per block, forward and backward µs per sample of the WHOLE model on one worker, as
    simulate_steps reads them: the measured forward (backward) span holds the pass's
    all-reduces (less them) and runs 1/N of the pairs but the replicated parts whole."""
    from ...predict.fit import per_row

    spec, n = fit.spec, fit.workers
    plan = _plan_of(spec)
    pairs = sum(p.flops for p in plan.pairs)
    total = plan.before + pairs + plan.after
    scale = total / (plan.before + plan.after + pairs / n) if total else 1.0
    reduced = fit.phases.get((fit.role, "allreduce"), 0.0)
    weights = [sum(p.forward for p in plan.pairs), sum(p.backward for p in plan.pairs)]
    forward_ar = reduced * weights[0] / sum(weights) if sum(weights) else 0.0
    fwd = max(0.0, fit.phases.get((fit.role, "forward"), 0.0) - forward_ar)
    bwd = max(0.0, fit.phases.get((fit.role, "backward"), 0.0) - (reduced - forward_ar))
    return per_row(fit, fwd * scale, bwd * scale)


def fit_message_latency(fit, comm: dict) -> None:
    """Sets the all-reduce's latency from the run's own all-reduces (each a span with its
    bytes): mean time less the bytes' transfer time, per ring hop. A tensor-parallel
    all-reduce is small and frequent, so its latency (DTensor's dispatch, the wait) is
    most of it."""
    n, beta = fit.workers, fit.beta
    first = fit.run.trace.steps[0] if fit.run.trace.steps else 0
    spans = [e for e in fit.run.trace.events if e["name"] == "allreduce" and e["args"]["step"] != first]
    if n < 2 or not spans:
        return None
    alphas = [e["dur"] / 1e6 - 2 * (n - 1) / n * e["args"].get("bytes", 0) * beta for e in spans]
    comm["allreduce"]["alpha_s"] = max(0.0, sum(alphas) / len(alphas)) / (2 * (n - 1))
    return None


# ---------------------------------------------------------------- sweeps


def sweep_note(points: list) -> str | None:
    """Why tensor parallelism stops scaling: the share of a step spent in its per-layer
    all-reduces (each 2(N-1) latencies of a ring, in lockstep, on the critical path) at
    the smallest and the largest worker count."""
    shares = []
    for n, spec, costs, step_ms in (points[0], points[-1]):
        if step_ms <= 0 or n < 2:
            return None
        plan = _plan_of(spec)
        batch = spec.training.batch_size
        us = sum(costs.allreduce(4 * batch * v, n) for p in plan.pairs for v in (p.forward, p.backward) if v)
        shares.append((n, min(1.0, us / 1000 / step_ms)))
    count = sum(1 for p in _plan_of(points[0][1]).pairs for v in (p.forward, p.backward) if v)
    if not count:
        return None
    (n0, s0), (n1, s1) = shares
    return (f"tensor parallel: {count} all-reduces per step, one per layer pair and pass, on the critical "
            f"path; their share of a step: {100 * s0:.0f} percent at {n0:,} workers, {100 * s1:.0f} at {n1:,}")


def cluster_layout(spec) -> tuple[int, int, int, str, str, bool]:
    """Every worker one tensor-parallel shard."""
    return 1, 1, spec.topology.workers.count, "native", "", False
