"""Tensor parallelism, as runner/strategies/tensor.py runs it: every worker computes its
slice of every split layer on the whole batch, and each column/row-parallel pair ends in
one all-reduce of the pair's output (forward) and one of its input gradient (backward).

A FIRST APPROXIMATION until the tensor predictions are fitted (issue 21): the split
layers' compute is divided evenly over the workers (the replicated embeddings, norms
and head are counted as split too), the forward (backward) compute is spread evenly
between the all-reduce points, and a python model's collectives, known only from its
plan at run time, are left out. Must not import torch.
"""

from __future__ import annotations

KIND = "tensor"


def model_parts(spec) -> int:
    return spec.topology.workers.count  # every worker holds 1/N of the split layers


def _collective_values(spec) -> tuple[list[int], list[int]]:
    """Values per sample each all-reduce sums, forward (in order) and backward (in order),
    as the runner's built-in plans issue them (the first pair's backward all-reduce is
    absent where its input needs no gradient: the mlp's data)."""
    m = spec.training.model or {"kind": "mlp", "layers": list(spec.training.layers)}
    if m.get("kind", "mlp") == "transformer":
        values = [m["seq_len"] * m["d_model"]] * (2 * m["layers"])  # attention and MLP per block
        return values, values
    if m.get("kind", "mlp") == "mlp":
        widths = list(m["layers"])
        pairs = (len(widths) - 1) // 2
        forward = [widths[2 * i + 2] for i in range(pairs)]  # the row-parallel layer's output
        backward = [widths[2 * i] for i in reversed(range(1, pairs))]  # column-parallel inputs, not the data
        return forward, backward
    return [], []


def simulate_steps(sim, steps: int) -> None:
    rec, c = sim.rec, sim.costs
    n, batch = sim.n_workers, sim.spec.training.batch_size
    forward_values, backward_values = _collective_values(sim.spec)
    t = 0.0
    for step in range(steps):
        start = t + c.overhead(step)
        now = [start] * n
        for name, work, values in (("forward", c.forward(batch, active=n) / n, forward_values),
                                   ("backward", c.backward(batch, active=n) / n, backward_values)):
            began = list(now)
            chunk = work / (len(values) + 1)
            for value in values:
                ready = max(now[k] + c.noisy(chunk * sim.slow[k], step) for k in range(n))  # all must arrive
                nbytes = 4 * batch * value
                end = ready + c.noisy_comm(c.allreduce(nbytes, n), step)
                for k in range(n):
                    rec.span(k, "allreduce", 1, ready, end, step, algorithm="native", phase="all-reduce",
                             bytes=nbytes, **{"pass": name})
                    rec.moved(k, 2 * (n - 1) / n * nbytes, 2 * (n - 1) / n * nbytes)
                now = [end] * n
            for k in range(n):
                now[k] += c.noisy(chunk * sim.slow[k], step)
                rec.span(k, name, 0, began[k], now[k], step)
        for k in range(n):
            end = rec.span(k, "optimizer", 0, now[k],
                           now[k] + c.noisy(c.optimizer(sim.params // n, sim.tensors, n), step), step)
            rec.step(sim.ids[k], step, start, end)
            t = max(t, end)
