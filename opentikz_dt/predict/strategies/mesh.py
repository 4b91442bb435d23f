"""Hybrid data x tensor parallelism (kind: mesh), as runner/strategies/mesh.py runs it,
composed from the two dimensions in the runner's span vocabulary (every collective an
`allreduce` span on the comm thread with its `dim`):

- tensor: each row (tensor group: `tensor` consecutive ranks) computes its slices of the
  forward and backward on its batch slice, the layer pairs' all-reduces inside the row
  (kind tensor's collectives, predict/strategies/tensor.py's sizes), each waiting for the
  row's ranks only;
- data: then each column (the ranks holding the same slices in every row) all-reduces
  its gradient slices (data_parallel: allreduce), or with fsdp reduce-scatters them and
  all-gathers the parameters for the next step, waiting for the column's ranks only;
- the update of the rank's slice (1/data of it with fsdp).

A FIRST APPROXIMATION, like kind tensor's (not fitted to runs yet): compute divides
evenly over a row, the split between the all-reduce points is even, and FSDP's per-unit
gathers and scatters are drawn as one collective each (the runner issues one per unit,
overlapped with the passes). Must not import torch.
"""

from __future__ import annotations

from ...strategies.mesh import data_method, degrees, rank_groups
from ...workload import model_section, tensor_plan

KIND = "mesh"
COMM_TID = 1  # the runner's comm thread (runner/trace.py TIDS["comm"])


def _collective_values(spec) -> tuple[list[int], list[int]]:
    """Values per sample each tensor all-reduce sums, forward (in order) and backward (in
    the order backward issues them), from the layer pairs kind tensor splits
    (workload.tensor_plan); a pair whose input needs no gradient has no backward one."""
    pairs = tensor_plan(model_section(spec), nominal_flops=1.0, nominal_values=0).pairs
    return [p.forward for p in pairs if p.forward], [p.backward for p in reversed(pairs) if p.backward]


def model_parts(spec) -> int:
    d = degrees(spec)
    return d["tensor"] * (d["data"] if data_method(spec) == "fsdp" else 1)


def simulate_steps(sim, steps: int) -> None:
    rec, c, spec = sim.rec, sim.costs, sim.spec
    d = degrees(spec)
    tp, dp = d["tensor"], d["data"]
    sharded = data_method(spec) == "fsdp"
    n, batch = sim.n_workers, spec.training.batch_size
    rows, columns = rank_groups(spec)
    forward_values, backward_values = _collective_values(spec) if tp > 1 else ([], [])
    held = sim.params // tp  # a rank's parameter slice (values)
    t = 0.0

    def collective(members, now, step, nbytes, cost, phase, dim, direction):
        """One collective of `members`: starts when the last of them is ready, ends at once on all."""
        ready = max(now[k] for k in members)
        end = ready + c.noisy_comm(cost, step)
        group = len(members)
        share = 2 * (group - 1) / group if phase == "all-reduce" else (group - 1) / group
        for k in members:
            rec.span(k, "allreduce", COMM_TID, ready, end, step, algorithm="fsdp" if sharded and dim == "data"
                     else "native", phase=phase, dim=dim, bytes=nbytes, **{"pass": direction})
            rec.moved(k, share * nbytes, share * nbytes)
            now[k] = end

    for step in range(steps):
        start = t + c.overhead(step)
        now = [start] * n
        if sharded and dp > 1:  # the parameters gathered over the column before the forward
            for column in columns:
                collective(column, now, step, 4 * held, c.allreduce(4 * held, dp) / 2, "all-gather", "data", "forward")
        for name, work, values in (("forward", c.forward(batch, active=n) / tp, forward_values),
                                   ("backward", c.backward(batch, active=n) / tp, backward_values)):
            began = list(now)
            chunk = work / (len(values) + 1)
            for value in values:
                for k in range(n):
                    now[k] += c.noisy(chunk * sim.slow[k], step)
                nbytes = 4 * batch * value
                for row in rows:
                    collective(row, now, step, nbytes, c.allreduce(nbytes, tp), "all-reduce", "tensor", name)
            for k in range(n):
                now[k] += c.noisy(chunk * sim.slow[k], step)
                rec.span(k, name, 0, began[k], now[k], step)
        if dp > 1:  # the gradient slices over the column
            phase, cost = (("reduce-scatter", c.allreduce(4 * held, dp) / 2) if sharded
                           else ("all-reduce", c.allreduce(4 * held, dp)))
            for column in columns:
                collective(column, now, step, 4 * held, cost, phase, "data", "backward")
        updated = held // dp if sharded else held
        for k in range(n):
            end = rec.span(k, "optimizer", 0, now[k], now[k] + c.noisy(c.optimizer(updated, sim.tensors, n), step),
                           step)
            rec.step(sim.ids[k], step, start, end)
            t = max(t, end)
