"""`dtgen calibrate --from RUN_DIR`: a calibration fitted from a finished run's trace.

What a run shows directly: forward/backward per worker step (or per microbatch and
stage), optimizer steps, server updates, message spans whose byte counts are known
(PS fetch and push, ring hops, DDP buckets, central-storage broadcast and reduce), and
the untraced time between steps. The run ran with its own process count on its own
cores, so the fit keeps that sharing: compute is stored as solo time assuming this
machine's cores, which gives the run's own times back at the run's own size. What a
run cannot show (a second message size, other collectives) falls back on
`base` (a probe calibration) or on the message latency it did show.
Must not import torch.
"""

from __future__ import annotations

import os
import statistics

from ..errors import DtgenError
from ..measured.run import load_run
from ..shards import shard_assignment
from ..workload import model_section
from .blocks import learn_model, model_blocks, model_signature, stage_units, tensor_sizes
from .calibration import FORMAT, Calibration, cpu_device, machine_info, training_of
from .costs import illustrative_calibration
from .phases import compute_ratios, phase_times, role_of, server_gaps, untraced

DEFAULT_BETA = 1 / 2.4e9  # s/byte: gloo over loopback on this kind of machine (RUNNER_NOTES: 10 MB at 2.4 GB/s)


def _mean_durations(run, role: str, name: str, **match) -> list:
    """Durations (µs) of steady spans `name` on ranks of `role` whose args match."""
    first = run.trace.steps[0] if run.trace.steps else 0
    out = []
    for e in run.trace.events:
        a = e["args"]
        if e["name"] == name and a["step"] != first and role_of(run, e["pid"]) == role and \
                all(a.get(k) == v for k, v in match.items()):
            out.append(e["dur"])
    return out


def _alpha(durations_us: list, nbytes: float, beta: float) -> float | None:
    if not durations_us:
        return None
    return max(0.0, statistics.fmean(durations_us) / 1e6 - nbytes * beta)


def fit_from_run(run_dir, base: Calibration | None = None) -> Calibration:
    run = load_run(run_dir)
    spec = run.spec
    workload = (run.info.get("model") or {}).get("workload")  # a python model, as the launcher described it
    if workload:
        learn_model(model_section(spec), workload)
    if not run.trace.steps or len(run.trace.steps) < 3:
        raise DtgenError(f"{run.path}: too few traced steps to fit a calibration (need 3 or more)")
    blocks = model_blocks(spec)
    kind, n = spec.strategy.kind, spec.topology.workers.count
    cores = float(os.cpu_count() or 1)
    phases = phase_times(run)
    pipeline = kind == "pipeline"
    role = "stage" if pipeline else "worker"
    # as the simulator: pipeline stages compute at once only outside the bubble
    active = max(1.0, n * spec.strategy.microbatches / (spec.strategy.microbatches + n - 1)) if pipeline else n
    share = max(1.0, active / cores)
    batch = spec.training.batch_size
    # compute is split over the units by FLOPs (a python model's counted ones may all be 0)
    flops = [b.flops for b in blocks] if any(b.flops for b in blocks) else [1.0] * len(blocks)
    fwd_us = [0.0] * len(blocks)
    bwd_us = [0.0] * len(blocks)
    if pipeline:  # per microbatch and stage: split each stage's time over its blocks by FLOPs
        rows = batch / spec.strategy.microbatches
        bounds = stage_units(spec, n)
        for s in range(n):
            lo, hi = bounds[s], bounds[s + 1]
            part = sum(flops[lo:hi]) or 1.0
            for name, into in (("forward", fwd_us), ("backward", bwd_us)):
                d = [e["dur"] for e in run.trace.events if e["name"] == name and e["pid"] == s
                     and e["args"]["step"] != run.trace.steps[0]]
                mean = statistics.fmean(d) if d else 0.0
                for i in range(lo, hi):
                    into[i] = mean * flops[i] / part / rows
    else:
        fwd = phases.get((role, "forward"), 0.0)
        bwd = phases.get((role, "backward"), 0.0)
        if kind == "allreduce" and spec.strategy.algorithm == "native":
            bwd = max(0.0, bwd - phases.get((role, "allreduce"), 0.0) / max(1, len(_buckets(blocks))))
        for i in range(len(blocks)):
            fwd_us[i] = fwd * flops[i] / sum(flops) / batch
            bwd_us[i] = bwd * flops[i] / sum(flops) / batch
    cal = base or illustrative_calibration(spec)
    comm = {k: dict(v) for k, v in cal.data["comm"].items()}
    beta = comm["p2p"]["beta_s_per_byte"] if base else DEFAULT_BETA
    if not base:
        for v in comm.values():
            v["beta_s_per_byte"] = beta
    params = sum(b.params for b in blocks)
    tensors = sum(b.tensors for b in blocks)
    seen_alpha, exchanges = None, []
    if kind == "parameter-server":
        sizes = tensor_sizes(spec)
        shard_bytes = statistics.fmean(4 * sum(sizes[t] for t in names)
                                       for names in shard_assignment(spec, sizes).values())
        seen_alpha = _alpha(_mean_durations(run, "worker", "fetch") + _mean_durations(run, "worker", "push"),
                            shard_bytes, beta)
    elif kind == "allreduce" and spec.strategy.algorithm == "ring":
        # the typical hop: a hop that waited for a preempted neighbour holds that neighbour's
        # untraced stall, which the simulator draws itself (Costs.overhead)
        hops = _ring_hops(run)
        seen_alpha = _alpha([statistics.median(hops)] if hops else [], 4 * params / n, beta)
    elif kind == "allreduce" and spec.strategy.algorithm in ("tree", "hierarchical"):
        seen_alpha = _collective_alpha(run, spec, 4 * params, beta)
    elif kind == "gossip":
        exchanges = _gossip_exchanges(run, spec)
        seen_alpha = _gossip_alpha(exchanges, spec, 4 * params, beta)
    elif kind == "allreduce" and spec.strategy.algorithm == "native":
        d = _mean_durations(run, "worker", "allreduce")
        if d:
            a = _alpha(d, 2 * (n - 1) / n * 4 * params, beta)
            comm["allreduce"]["alpha_s"] = a / (2 * (n - 1))
    elif kind == "central-storage":
        # the simulator starts each collective once the last rank joined it (sim_ps.central_storage)
        levels = max(1, (n).bit_length())
        for name, spans in (("broadcast", {"storage": ("fetch",), "worker": ("wait", "fetch")}),
                            ("reduce", {"storage": ("wait",), "worker": ("push",)})):
            d = _after_last_join(run, spans)
            if d:
                # the typical time, not the mean: the simulator adds the preemptions itself,
                # drawn from the untraced gaps of every rank (Costs.overhead)
                comm[name]["alpha_s"] = _alpha([statistics.median(d)], 4 * params * levels, beta) / levels
    if seen_alpha is not None:
        comm["p2p"]["alpha_s"] = seen_alpha
        if not base:
            for k in ("allreduce", "broadcast", "reduce"):
                comm[k]["alpha_s"] = seen_alpha
    opt = phases.get((role, "optimizer"))
    optimizer = [0.0, (opt / 1e6 / share / (params / (n if pipeline else 1))) if opt else
                 cal.data["compute"]["optimizer"][1]]
    add = cal.data["compute"]["add_per_param_s"]
    updates = _mean_durations(run, "server", "update") or _mean_durations(run, "storage", "update")
    update = statistics.fmean(updates) if updates else None  # one update (async: several per step)
    if update:
        grads = n if (kind == "central-storage" or spec.strategy.sync == "sync") else 1
        shard_params = params / max(1, spec.topology.servers.count)
        rest = update / 1e6 - optimizer[1] * shard_params
        add = max(0.0, rest / (shard_params * (grads if kind != "central-storage" else 1)))
    after_update = server_gaps(run)
    server_overhead = statistics.fmean(after_update) / 1e6 if after_update else 0.0
    gaps = untraced(run, role)
    overhead = statistics.fmean(gaps) / 1e6 if gaps else 0.0
    ratios = compute_ratios(run, role)
    data = {"dtgen_calibration": FORMAT, "source": f"run {run.path}", "machine": machine_info(),
            "device": run_device(run.info), "training": training_of(spec.data),
            "model": dict(model_signature(spec), **({"workload": workload} if workload else {})),
            "ranks": len(run.trace.ids), "cores_effective": cores,
            "compute": {"blocks": [{"name": b.name, "forward": [0.0, fwd_us[i] / 1e6 / share],
                                    "backward": [0.0, bwd_us[i] / 1e6 / share]} for i, b in enumerate(blocks)],
                        "optimizer": optimizer, "add_per_param_s": add, "step_overhead_s": overhead,
                        "server_overhead_s": server_overhead},
            "comm": comm,
            "noise": {"compute_ratios": _thin([round(r, 4) for r in ratios]),
                      "overhead_s": _thin([round(g / 1e6, 7) for g in gaps])}}
    if exchanges:
        mean = statistics.fmean(exchanges)
        data["noise"]["exchange_ratios"] = _thin([round(x / mean, 4) for x in exchanges]) if mean > 0 else []
    cal = Calibration(data, f"{run.path}")
    if pipeline:
        cal = _solve_message_latency(cal, run)
    return cal


def run_device(info: dict) -> dict:
    """The device a run computed on: run.json's `device_info` (the launcher's record), else,
    for runs written before it, `cuda` with an unknown model when its ranks were on GPUs and
    this machine's CPU otherwise."""
    recorded = info.get("device_info")
    if isinstance(recorded, dict) and recorded.get("kind") in ("cpu", "cuda"):
        return dict(recorded)
    gpus = {(r.get("node_rank"), r.get("device")) for r in info.get("ranks") or []
            if str(r.get("device") or "").startswith("cuda")}
    if gpus or str(info.get("device") or "").startswith("cuda"):
        return {"kind": "cuda", "name": None, "count": len(gpus) or None}
    return cpu_device()


def _solve_message_latency(cal: Calibration, run) -> Calibration:
    """Pipelines: a stage's `recv` span mixes the message with the wait for the peer's
    compute, so the message latency is the one value that makes the simulated step time
    equal the run's mean (bisection; the step time grows with the latency)."""
    import copy

    from .costs import Costs
    from .rundir import metrics_of
    from .simulate import simulate

    target = statistics.fmean(run.metrics["step_time_s"].values()) if run.metrics["step_time_s"] else None
    if not target:
        return cal
    steps = min(run.spec.training.steps, 40)

    def step_time(alpha: float) -> float:
        data = copy.deepcopy(cal.data)
        data["comm"]["p2p"]["alpha_s"] = alpha
        result = simulate(run.spec, Costs(Calibration(data), run.spec), steps, record=False)
        return statistics.fmean(metrics_of(result, run.spec, steps)["step_time_s"].values())

    lo, hi = 0.0, max(target, 1e-3)
    if step_time(lo) >= target:
        alpha = lo
    else:
        for _ in range(30):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if step_time(mid) < target else (lo, mid)
        alpha = (lo + hi) / 2
    data = copy.deepcopy(cal.data)
    data["comm"]["p2p"]["alpha_s"] = alpha
    return Calibration(data, cal.path)


def _after_last_join(run, spans_of_role: dict, counts=None) -> list:
    """Per steady step, a collective's time (µs) from the last rank joining it to the last
    rank leaving it; `spans_of_role` names the spans that make up the collective on each
    role (a worker's `wait` + `fetch` is its side of the storage's broadcast), `counts`
    (event -> bool), where given, which of those spans count."""
    first = run.trace.steps[0]
    per_step: dict = {}
    for e in run.trace.events:
        step = e["args"]["step"]
        if step != first and e["name"] in spans_of_role.get(role_of(run, e["pid"]), ()) and (
                counts is None or counts(e)):
            ranks = per_step.setdefault(step, {})
            start, end = ranks.get(e["pid"], (float("inf"), 0.0))
            ranks[e["pid"]] = (min(start, e["ts"]), max(end, e["ts"] + e["dur"]))
    return [max(end for _, end in r.values()) - max(start for start, _ in r.values()) for r in per_step.values()]


def _collective_alpha(run, spec, nbytes: float, beta: float) -> float | None:
    """Latency of the tree / hierarchical all-reduce: per step, the time from the last rank
    joining to the last rank done (T), solved from T = alpha * A + beta * B of the
    simulator's cost form (sim_peer: _tree, _hierarchical)."""
    import math

    from .sim_peer import TREE_CHUNK, TREE_MAX

    # a tree rank's wait for its children's (its parent's) first chunk is part of the collective
    totals = _after_last_join(run, {"worker": ("allreduce", "wait")},
                              lambda e: e["name"] != "wait" or e["args"].get("algorithm") == "tree")
    if not totals:
        return None
    n = spec.topology.workers.count
    if spec.strategy.algorithm == "tree":
        chunks = max(1, min(TREE_MAX, math.ceil(nbytes / TREE_CHUNK)))
        hops = 2 * (math.ceil(math.log2(n)) + chunks - 1)
        a, b = hops, hops * 2 * nbytes / chunks
    else:
        hosts = spec.topology.hosts
        levels = math.ceil(math.log2(n // hosts)) if n // hosts > 1 else 0
        a = 2 * levels + 2 * (hosts - 1)
        b = 2 * levels * nbytes + (2 * (hosts - 1) / hosts * nbytes if hosts > 1 else 0)
    t = statistics.median(totals) / 1e6  # typical: the simulator adds preemptions itself (Costs.overhead)
    return max(0.0, (t - beta * b) / a) if a else None


def _gossip_exchanges(run, spec) -> list:
    """Per rank and steady step, a gossip exchange's time (µs) from the moment this rank and
    every neighbour it talks to had started their exchange, to its end."""
    from .sim_peer import neighbours

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


def _gossip_alpha(exchanges: list, spec, nbytes: float, beta: float) -> float | None:
    """Latency of a gossip exchange from its mean time (the spread is drawn apart)."""
    from .sim_peer import neighbours

    if not exchanges:
        return None
    to, _ = neighbours(0, spec.topology.workers.count, spec.strategy.peers)
    return max(0.0, statistics.fmean(exchanges) / 1e6 - len(to) * nbytes * beta)


def _ring_hops(run) -> list:
    """One ring hop's time (µs) per rank and step: the hops after the first, which alone
    absorbs the wait for the predecessor to be ready (the simulator adds that wait itself)."""
    first = run.trace.steps[0]
    hops: dict = {}
    for e in run.trace.events:
        a = e["args"]
        if e["name"] == "allreduce" and a["step"] != first:
            hops.setdefault((e["pid"], a["step"]), []).append((e["ts"], e["dur"]))
    out = []
    for spans in hops.values():
        spans.sort()
        if len(spans) > 1:
            out.append(sum(d for _, d in spans[1:]) / (len(spans) - 1))
    return out


def _thin(values: list, keep: int = 400) -> list:
    """At most `keep` values, evenly picked from the sorted list (the distribution stays)."""
    values = sorted(values)
    if len(values) <= keep:
        return values
    return [values[int(i * len(values) / keep)] for i in range(keep)]


def _buckets(blocks):
    from .sim_peer import _buckets as buckets

    return buckets(blocks)
