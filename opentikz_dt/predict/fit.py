"""`dtgen calibrate --from RUN_DIR`: a calibration fitted from a finished run's trace.

What a run shows directly: forward/backward per worker step (or per microbatch and
stage), optimizer steps, server updates, message spans whose byte counts are known
(PS fetch and push, ring hops, DDP buckets, central-storage broadcast and reduce), and
the untraced time between steps. The run ran with its own process count on its own
cores, so the fit keeps that sharing: compute is stored as solo time assuming this
machine's cores, which gives the run's own times back at the run's own size. What a
run cannot show (a second message size, other collectives) falls back on
`base` (a probe calibration) or on the message latency it did show. What is particular
to a strategy (which spans hold its messages, how its compute splits) its predict
plugin's fit hooks read (strategies/<kind>/predict.py: fit_compute, fit_message_latency, ...).
Must not import torch.
"""

from __future__ import annotations

import copy
import os
import statistics
from dataclasses import dataclass

from ..errors import DtgenError
from ..measured.run import load_run
from ..workload import model_section
from .blocks import learn_model, model_blocks, model_signature
from .calibration import FORMAT, Calibration, cpu_device, illustrative_calibration, machine_info, training_of
from .phases import compute_ratios, duty, phase_times, roles_of, server_gaps, untraced
from .plugin import REGISTRY

DEFAULT_BETA = 1 / 2.4e9  # s/byte: gloo over loopback on this kind of machine (RUNNER_NOTES: 10 MB at 2.4 GB/s)


@dataclass
class RunFit:
    """A run being fitted, as the fit hooks of a predict plugin see it
    (predict/interface.py)."""

    run: object  # the loaded run directory (measured/run.py)
    role: str  # the role whose ranks compute forward/backward (the plugin's COMPUTE_ROLE)
    blocks: list  # the model's blocks (blocks.py)
    flops: list  # per block, the weights its compute time is split by
    phases: dict  # {(role, span name): mean µs per rank and steady step} (phases.phase_times)
    beta: float  # s/byte of every message: the base calibration's, else DEFAULT_BETA

    @property
    def spec(self):
        return self.run.spec

    @property
    def workers(self) -> int:
        return self.run.spec.topology.workers.count

    @property
    def params(self) -> int:
        return sum(b.params for b in self.blocks)


def mean_durations(run, role: str, name: str, **match) -> list:
    """Durations (µs) of steady spans `name` on ranks of `role` whose args match."""
    first = run.trace.steps[0] if run.trace.steps else 0
    role_of_rank = roles_of(run)
    out = []
    for e in run.trace.events:
        a = e["args"]
        if e["name"] == name and a["step"] != first and role_of_rank(e["pid"]) == role and \
                all(a.get(k) == v for k, v in match.items()):
            out.append(e["dur"])
    return out


def run_step_s(run) -> float | None:
    """A run's mean step time (s) over its workers (metrics.json), what a fit solves a cost
    against where the trace cannot split it (finish_fit), or None where it recorded none."""
    times = list(run.metrics["step_time_s"].values())
    return statistics.fmean(times) if times else None


def simulated_step_s(cal: Calibration, run, steps: int) -> float:
    """The mean step time (s) of `run`'s spec simulated with `cal` for `steps` steps."""
    from .costs import Costs
    from .rundir import metrics_of
    from .simulate import simulate

    result = simulate(run.spec, Costs(cal, run.spec), steps, record=False)
    return statistics.fmean(metrics_of(result, run.spec, steps)["step_time_s"].values())


def with_message_latency(cal: Calibration, alpha: float) -> Calibration:
    """The calibration with its point-to-point message latency (comm.p2p.alpha_s) set to `alpha`."""
    data = copy.deepcopy(cal.data)
    data["comm"]["p2p"]["alpha_s"] = alpha
    return Calibration(data, cal.path)


def solved_message_latency(cal: Calibration, run, lo: float, hi_at_least: float) -> float | None:
    """The message latency (s), at least `lo`, that makes `run`'s spec simulated with `cal`
    take the run's mean step time (bisection up to the larger of that step time and
    `hi_at_least`; the step time grows with the latency), or None where the run recorded
    none: what a fit takes where a message's span mixes it with waits the simulator adds
    itself (the pipeline's and the ring's finish_fit)."""
    target = run_step_s(run)
    if not target:
        return None
    steps = min(run.spec.training.steps, 40)
    return solve_increasing(lambda alpha: simulated_step_s(with_message_latency(cal, alpha), run, steps),
                            target, lo, max(target, hi_at_least), 30)


def solve_increasing(f, target: float, lo: float, hi: float, rounds: int) -> float:
    """The x in [lo, hi] where the increasing `f` reaches `target` (bisection, `rounds`
    halvings): `lo` where f(lo) already does. A fit solves a cost from what a run shows
    this way where the simulator, or its schedule, gives only the forward direction."""
    if f(lo) >= target:
        return lo
    for _ in range(rounds):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if f(mid) < target else (lo, mid)
    return (lo + hi) / 2


def latency(durations_us: list, nbytes: float, beta: float) -> float | None:
    """A message's latency (s) from its mean time (µs) less its bytes' transfer time."""
    if not durations_us:
        return None
    return max(0.0, statistics.fmean(durations_us) / 1e6 - nbytes * beta)


FLOOR_QUANTILE = 0.2  # of a run's message latencies: a message no process waited for a core at


def message_split(samples: list, beta: float, alpha: float) -> dict:
    """The fitted message latency as two mechanisms: a message alone (`alpha_floor_s`, the
    low quantile of the traced messages' latencies) and the rest (`core_wait_s`), what a
    blocking receive waited for its process to get a core back at the run's process count
    on its cores. A prediction at another process count scales the wait, a cluster (a core
    per rank) drops it (transfer.py). {} without samples."""
    lat = sorted(max(0.0, d / 1e6 - nbytes * beta) for d, nbytes in samples)
    if len(lat) < 5:
        return {}
    floor = lat[int(FLOOR_QUANTILE * (len(lat) - 1))]
    return {"alpha_floor_s": floor, "core_wait_s": max(0.0, alpha - floor)}


def per_row(fit: RunFit, fwd: float, bwd: float) -> tuple[list, list]:
    """A rank's forward and backward time per step (µs), each as µs per sample and block:
    split over the blocks by FLOPs."""
    batch, flops = fit.spec.training.batch_size, fit.flops
    fwd_us = [fwd * flops[i] / sum(flops) / batch for i in range(len(flops))]
    bwd_us = [bwd * flops[i] / sum(flops) / batch for i in range(len(flops))]
    return fwd_us, bwd_us


def fit_from_run(run_dir, base: Calibration | None = None) -> Calibration:
    run = load_run(run_dir)
    spec = run.spec
    workload = (run.info.get("model") or {}).get("workload")  # a python model, as the launcher described it
    if workload:
        learn_model(model_section(spec), workload)
    if not run.trace.steps or len(run.trace.steps) < 3:
        raise DtgenError(f"{run.path}: too few traced steps to fit a calibration (need 3 or more)")
    plugin = REGISTRY.get(spec.strategy.kind)
    blocks = model_blocks(spec)
    cores = float(os.cpu_count() or 1)
    role = plugin.COMPUTE_ROLE
    # as the simulator (Contention.share): the ranks computing at once share the cores
    active, busy = plugin.active_ranks(spec), duty(run)
    share = max(1.0, (1 + (active - 1) * busy if active > 1 else active) / cores)
    cal = base or illustrative_calibration(spec)
    comm = {k: dict(v) for k, v in cal.data["comm"].items()}
    beta = comm["p2p"]["beta_s_per_byte"] if base else DEFAULT_BETA
    if not base:
        for v in comm.values():
            v["beta_s_per_byte"] = beta
    # compute is split over the units by FLOPs (a python model's counted ones may all be 0)
    flops = [b.flops for b in blocks] if any(b.flops for b in blocks) else [1.0] * len(blocks)
    fit = RunFit(run, role, blocks, flops, phase_times(run), beta)
    fwd_us, bwd_us = plugin.fit_compute(fit)
    params = fit.params
    probed = {k: v["alpha_s"] for k, v in comm.items()}
    seen_alpha = plugin.fit_message_latency(fit, comm)
    if seen_alpha is not None:
        comm["p2p"]["alpha_s"] = seen_alpha
        if not base:
            for k in ("allreduce", "broadcast", "reduce"):
                comm[k]["alpha_s"] = seen_alpha
    for k, v in comm.items():  # a collective this run showed is no longer the probe's
        if k != "p2p" and v["alpha_s"] != probed[k]:
            v["measured"] = "run"
            v.pop("rounds", None)  # the probe's rounds (the interval's ends) no longer apply
    split = message_split(plugin.message_samples(fit), beta, comm["p2p"]["alpha_s"])
    if split:
        comm["p2p"].update(split)
    opt = fit.phases.get((role, "optimizer"))
    optimizer = [0.0, (opt / 1e6 / share / (params / plugin.model_parts(spec))) if opt else
                 cal.data["compute"]["optimizer"][1]]
    add = cal.data["compute"]["add_per_param_s"]
    updates = mean_durations(run, "server", "update") or mean_durations(run, "storage", "update")
    update = statistics.fmean(updates) if updates else None  # one update (async: several per step)
    if update:
        shard_params = params / max(1, spec.topology.servers.count)
        rest = update / 1e6 - optimizer[1] * shard_params
        add = max(0.0, rest / (shard_params * plugin.gradients_per_update(spec)))
    after_update = server_gaps(run)
    server_overhead = statistics.fmean(after_update) / 1e6 if after_update else 0.0
    gaps = untraced(run, role)
    overhead = statistics.fmean(gaps) / 1e6 if gaps else 0.0
    ratios = compute_ratios(run, role)
    data = {"dtgen_calibration": FORMAT, "source": f"run {run.path}", "machine": machine_info(),
            "device": run_device(run.info), "training": training_of(spec.data),
            "model": dict(model_signature(spec), **({"workload": workload} if workload else {})),
            "ranks": len(run.trace.ids), "cores_effective": cores,
            # what the costs were measured on: a prediction of another strategy or size says
            # which costs it carries there (transfer.py)
            "made_for": {"strategy": dict(spec.data.get("strategy") or {}), "workers": spec.topology.workers.count,
                         "ranks": len(run.trace.ids), "hosts": spec.topology.hosts},
            "compute": {"blocks": [{"name": b.name, "forward": [0.0, fwd_us[i] / 1e6 / share],
                                    "backward": [0.0, bwd_us[i] / 1e6 / share]} for i, b in enumerate(blocks)],
                        "optimizer": optimizer, "add_per_param_s": add, "step_overhead_s": overhead,
                        "server_overhead_s": server_overhead},
            "comm": comm,
            "noise": {"compute_ratios": thin([round(r, 4) for r in ratios]),
                      "overhead_s": thin([round(g / 1e6, 7) for g in gaps])}}
    blocks_spread = block_ratios(run.metrics.get("wall_s") or [])
    if blocks_spread:
        data["noise"]["block_ratios"] = blocks_spread
    data["noise"].update(plugin.fit_noise(fit))
    return plugin.finish_fit(Calibration(data, f"{run.path}"), run)


def steady_steps(wall_s: list) -> list:
    """A run's step times (s) from its wall clock, the first step (start-up) left out."""
    return [b - a for a, b in zip(wall_s, wall_s[1:]) if b > a]


def mean_steady_step(wall_s: list) -> float | None:
    """A run's mean steady step (s), or None where it has fewer than 3 steady steps."""
    steps = steady_steps(wall_s)
    return statistics.fmean(steps) if len(steps) >= 3 else None


def repeat_ratio(run_wall_s: list, repeat_wall_s: list) -> float | None:
    """A repeat run's mean steady step over the run's (the crowded run's repeat,
    runner/crowding.py), or None where either has fewer than 3 steady steps."""
    run, repeat = mean_steady_step(run_wall_s), mean_steady_step(repeat_wall_s)
    if run is None or repeat is None:
        return None
    return round(repeat / run, 4)


def block_ratios(wall_s: list, blocks: int = 3) -> list:
    """The run's own drift: its steady steps (first left out) cut into `blocks` consecutive
    blocks, each block's mean step time over the whole mean. A machine whose load changes
    during the run shows here how far a run of the same spec may land from another; the
    prediction's interval carries it (interval.py). [] for runs too short to cut."""
    steps = steady_steps(wall_s)
    size = len(steps) // blocks
    if size < 3:
        return []
    mean = statistics.fmean(steps[:size * blocks])
    return [round(statistics.fmean(steps[i * size:(i + 1) * size]) / mean, 4) for i in range(blocks)]


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


def after_last_join(run, spans_of_role: dict, counts=None) -> list:
    """Per steady step, a collective's time (µs) from the last rank joining it to the last
    rank leaving it; `spans_of_role` names the spans that make up the collective on each
    role (a worker's `wait` + `fetch` is its side of the storage's broadcast), `counts`
    (event -> bool), where given, which of those spans count."""
    first = run.trace.steps[0]
    role_of_rank = roles_of(run)
    per_step: dict = {}
    for e in run.trace.events:
        step = e["args"]["step"]
        if step != first and e["name"] in spans_of_role.get(role_of_rank(e["pid"]), ()) and (
                counts is None or counts(e)):
            ranks = per_step.setdefault(step, {})
            start, end = ranks.get(e["pid"], (float("inf"), 0.0))
            ranks[e["pid"]] = (min(start, e["ts"]), max(end, e["ts"] + e["dur"]))
    return [max(end for _, end in r.values()) - max(start for start, _ in r.values()) for r in per_step.values()]


def thin(values: list, keep: int = 400) -> list:
    """At most `keep` values, evenly picked from the sorted list (the distribution stays)."""
    values = sorted(values)
    if len(values) <= keep:
        return values
    return [values[int(i * len(values) / keep)] for i in range(keep)]
