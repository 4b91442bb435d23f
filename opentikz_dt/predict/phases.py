"""Per-phase times of a run directory (measured or predicted), from its trace.

A phase is (role, span name): `worker forward`, `server update`, `stage recv`, ...
Its time is the mean over steady steps (the first step left out, as the metrics do)
and over the ranks that have it, of the span time per rank and step.
Must not import torch.
"""

from __future__ import annotations

from collections import defaultdict

from .plugin import REGISTRY


def roles_of(run):
    """rank -> role (worker, server, stage, ...) of the run's traced ranks, as the strategy's
    predict plugin names them (`role_of`): one plugin lookup for a loop over the events."""
    spec = run.spec
    plugin = REGISTRY.get(spec.strategy.kind)
    known = {rank: plugin.role_of(spec, ident) for rank, ident in run.trace.ids.items()}
    nameless = plugin.role_of(spec, "")  # a rank the trace names no id for
    return lambda rank: known.get(rank, nameless)


def phase_times(run) -> dict:
    """{(role, name): mean µs per rank and steady step}."""
    trace = run.trace
    steps = trace.steps
    if not steps:
        return {}
    first = steps[0]
    role_of_rank = roles_of(run)
    total: dict = defaultdict(float)
    seen: dict = defaultdict(set)
    for e in trace.events:
        step = e["args"]["step"]
        if step == first:
            continue
        key = (role_of_rank(e["pid"]), e["name"])
        total[key] += e["dur"]
        seen[key].add((e["pid"], step))
    ranks: dict = defaultdict(set)
    step_set: dict = defaultdict(set)
    for key, pairs in seen.items():
        for rank, step in pairs:
            ranks[key].add(rank)
            step_set[key].add(step)
    return {key: total[key] / (len(ranks[key]) * len(step_set[key])) for key in total}


def untraced(run, role: str = "worker") -> list:
    """Per rank of `role` and steady step: the time of the step no span covers (µs), from the
    step's first span to the next step's first span. The per-step overhead."""
    ext = run.trace.extents
    spans: dict = defaultdict(list)
    for e in run.trace.events:
        spans[(e["pid"], e["args"]["step"])].append((e["ts"], e["ts"] + e["dur"]))
    out = []
    role_of_rank = roles_of(run)
    for rank in run.trace.ranks:
        if role_of_rank(rank) != role:
            continue
        steps = sorted(s for r, s in ext if r == rank)
        for a, b in zip(steps, steps[1:]):
            if b != a + 1 or a == steps[0]:
                continue
            covered, end = 0.0, float("-inf")
            for t0, t1 in sorted(spans[(rank, a)]):
                t1 = min(t1, ext[(rank, b)][0])
                if t1 > max(t0, end):
                    covered += t1 - max(t0, end)
                end = max(end, t1)
            out.append(max(0.0, ext[(rank, b)][0] - ext[(rank, a)][0] - covered))
    return out


def compute_ratios(run, role: str = "worker") -> list:
    """Each steady (rank, step)'s forward + backward time over that step's mean over ranks:
    the skew between ranks. A slowdown every rank shares in a step (the machine got busier)
    moves the mean, which the fitted costs already hold; only the skew makes ranks wait."""
    first = run.trace.steps[0] if run.trace.steps else 0
    per: dict = defaultdict(float)
    role_of_rank = roles_of(run)
    for e in run.trace.events:
        if e["name"] in ("forward", "backward") and e["args"]["step"] != first and role_of_rank(e["pid"]) == role:
            per[(e["pid"], e["args"]["step"])] += e["dur"]
    by_step: dict = defaultdict(list)
    for (rank, step), value in per.items():
        by_step[step].append(value)
    out = []
    for (rank, step), value in per.items():
        values = by_step[step]
        mean = sum(values) / len(values)
        if len(values) > 1 and mean > 0:
            out.append(value / mean)
    return out


def server_gaps(run) -> list:
    """Untraced time on servers (and central storage) after each update, before their next
    span: packing and sending the new weights, posting receives (µs). Workers wait for it."""
    per_rank: dict = defaultdict(list)
    role_of_rank = roles_of(run)
    for e in run.trace.events:
        if role_of_rank(e["pid"]) in ("server", "storage"):
            per_rank[e["pid"]].append((e["ts"], e["ts"] + e["dur"], e["name"]))
    out = []
    for spans in per_rank.values():
        spans.sort()
        for (t0, t1, name), (n0, _, _) in zip(spans, spans[1:]):
            if name == "update":
                out.append(max(0.0, n0 - t1))
    return out


def duty(run) -> float:
    """The share of the run's time a computing rank computes: its compute spans (tid 0, a
    straggler's slowdown left out: it sleeps), less what its communication spans overlap
    of them (DDP's backward holds its wait for the last bucket's all-reduce), over the
    steady steps' traced time (the first step's warm-up left out), averaged over the ranks
    that compute (engine.Recorder.duty, which the simulator settles on: simulate.py)."""
    spans: dict = defaultdict(lambda: ([], []))
    start, end = float("inf"), 0.0
    first = run.trace.steps[0] if run.trace.steps else None
    for e in run.trace.events:
        if e["args"]["step"] == first:
            continue
        start, end = min(start, e["ts"]), max(end, e["ts"] + e["dur"])
        if e.get("tid") in (0, 1) and e["name"] != "slowdown":
            spans[e["pid"]][e["tid"]].append((e["ts"], e["ts"] + e["dur"]))
    busy = {rank: _covered(compute) - _overlap(compute, comm) for rank, (compute, comm) in spans.items() if compute}
    return min(1.0, sum(busy.values()) / (len(busy) * (end - start))) if busy and end > start else 1.0


def _covered(intervals: list) -> float:
    total, reach = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b > reach:
            total += b - max(a, reach)
            reach = b
    return total


def _overlap(xs: list, ys: list) -> float:
    """Time under both a span of xs and a span of ys."""
    return _covered(xs) + _covered(ys) - _covered(xs + ys)
