"""`dtgen calibrate --from-profile DIR SPEC`: a calibration from a user's own profiled run.

The traces (measured/profile_set.py) say what each rank spent per step; SPEC says which
model and per-worker batch that was (a calibration is tied to a spec's model, blocks.py),
since a Kineto trace records neither. What is read, and the model behind each number:

- compute: per rank and profiled step, the main thread's forward, backward and optimizer
  spans (kineto.phase_of) summed; their mean over ranks and steps is the step's compute.
  A trace has no span per model block that dtgen could match to the spec's blocks, so
  forward and backward are split over the blocks by the spec's FLOPs per block: a stated
  assumption, written into the calibration's `provenance` and the prediction's caption.
  Each rank had its own device (cores_effective = the traced world size).
- collectives: each collective's (bytes, time) on its group of n ranks, in the cost form
  the calibration already uses: all-reduce 2(n-1) alpha + 2(n-1)/n S beta; all-gather and
  reduce-scatter, the halves of a ring all-reduce, (n-1) alpha + (n-1)/n S beta (so they
  fit the all-reduce's link); broadcast and reduce ceil(log2 n)(alpha + S beta); a send
  alpha + S beta (receives are left out: they hold the wait for the sender). Where at least
  two distinct sizes were traced, alpha and beta are fitted by least squares; with one
  size, beta is the measured bandwidth (time / size: the latency folded in, so that size is
  reproduced) and alpha is unknown: taken from `base` where given, else left at 0 and
  marked unknown (the format has no default latency). A kind the profile does not show
  keeps base's values, else fit.py's defaults, marked not measured.
- untraced time per step: the steps' time no span covers (profile_stats.rank_split's idle).
Must not import torch.
"""

from __future__ import annotations

import math
import os
import platform
import statistics

from ..errors import DtgenError
from ..measured.profile_set import load_profile_set
from ..measured.profile_stats import rank_split
from .blocks import model_blocks, model_signature
from .calibration import FORMAT, Calibration, illustrative_calibration, training_of
from .fit import DEFAULT_BETA
from .plugin import REGISTRY

COMPUTE = ("forward", "backward", "optimizer")
FLOP_SPLIT = "forward and backward split over the spec's blocks by FLOPs (the traces have no span per block)"


def _gpu_name(pset) -> str | None:
    """The traced GPUs' model (Kineto's deviceProperties) where every rank names the same one."""
    names = {p.device_name for p in pset.ranks}
    name = names.pop() if len(names) == 1 else ""
    return name or None


def step_compute(pset) -> dict:
    """{part: [s per rank-step]} for forward, backward, optimizer, and `steps`: {step number:
    [s of compute per traced rank]} (the step-to-step spread)."""
    parts = {k: [] for k in COMPUTE}
    per_step: dict = {}
    for p in pset.ranks:
        for number, s, e in p.steps:
            sums = dict.fromkeys(COMPUTE, 0.0)
            for ph in p.phases:
                if ph.kind in sums and ph.end > s and ph.start < e:
                    sums[ph.kind] += (min(ph.end, e) - max(ph.start, s)) / 1e6
            for k in COMPUTE:
                parts[k].append(sums[k])
            per_step.setdefault(number, []).append(sum(sums.values()))
    parts["steps"] = per_step
    return parts


def compute_spread(pset) -> tuple[float, float, float]:
    """(lowest, mean, highest) compute per step (s): each profiled step's mean over the traced ranks."""
    means = [statistics.fmean(v) for v in step_compute(pset)["steps"].values()]
    return min(means), statistics.fmean(means), max(means)


def _terms(kind: str, n: int, size: float) -> tuple[str, float, float] | None:
    """(calibration kind, alpha's factor, beta's factor) of one traced collective, or None."""
    if n < 2:
        return None
    if kind == "all-reduce":
        return "allreduce", 2.0 * (n - 1), 2.0 * (n - 1) / n * size
    if kind in ("all-gather", "reduce-scatter"):
        return "allreduce", float(n - 1), (n - 1) / n * size
    if kind in ("broadcast", "reduce"):
        hops = math.ceil(math.log2(n))
        return kind, float(hops), hops * size
    if kind == "send":
        return "p2p", 1.0, float(size)
    return None


def comm_samples(pset) -> dict:
    """{calibration kind: [(alpha factor, beta factor, seconds, bytes, group)]} of the traced
    collectives inside profiled steps that record their size."""
    out: dict = {}
    for p in pset.ranks:
        for c in p.collectives:
            if c.size is None or not any(s <= c.start < e for _, s, e in p.steps):
                continue
            n = len(c.group) or (2 if c.kind == "send" else pset.world_size)
            terms = _terms(c.kind, n, c.size)
            if terms is not None:
                out.setdefault(terms[0], []).append((terms[1], terms[2], (c.end - c.start) / 1e6, c.size, c.group))
    return out


def fit_alpha_beta(samples: list) -> tuple[float, float] | None:
    """Least squares of t = a alpha + b beta over the samples (no intercept), or None where
    the solution is not a latency and a bandwidth (alpha < 0 or beta <= 0)."""
    saa = sum(a * a for a, _, _, _, _ in samples)
    sab = sum(a * b for a, b, _, _, _ in samples)
    sbb = sum(b * b for _, b, _, _, _ in samples)
    sat = sum(a * t for a, _, t, _, _ in samples)
    sbt = sum(b * t for _, b, t, _, _ in samples)
    det = saa * sbb - sab * sab
    if det <= 0:
        return None
    alpha, beta = (sat * sbb - sbt * sab) / det, (saa * sbt - sab * sat) / det
    return (alpha, beta) if alpha >= 0 and beta > 0 else None


def fit_comm(pset, base: Calibration | None, spec) -> tuple[dict, dict, list]:
    """(the calibration's comm section, its provenance per kind, one-line warnings)."""
    start = base or illustrative_calibration(spec)
    comm = {k: {"alpha_s": float(v["alpha_s"]), "beta_s_per_byte": float(v["beta_s_per_byte"])}
            for k, v in start.data["comm"].items()}
    if base is None:
        for v in comm.values():
            v["beta_s_per_byte"] = DEFAULT_BETA
    said = {k: ("the base calibration's (not in the profile)" if base else
                "not in the profile: fit.py's defaults, not measured") for k in comm}
    warnings = []
    for kind, samples in sorted(comm_samples(pset).items()):
        sizes = sorted({s[3] for s in samples})
        groups = sorted({s[4] for s in samples})
        where = f"{len(samples)} collectives on {len(groups)} group{'s' if len(groups) > 1 else ''}"
        fitted = fit_alpha_beta(samples) if len(sizes) >= 2 else None
        if fitted is not None:
            comm[kind] = {"alpha_s": fitted[0], "beta_s_per_byte": fitted[1]}
            said[kind] = f"alpha and beta by least squares over {where}, {len(sizes)} sizes"
            continue
        alpha = float(base.data["comm"][kind]["alpha_s"]) if base else 0.0
        rest = sum(t - a * alpha for a, _, t, _, _ in samples)
        beta = max(rest, 1e-12) / sum(b for _, b, _, _, _ in samples)
        comm[kind] = {"alpha_s": alpha, "beta_s_per_byte": beta}
        why = ("one message size" if len(sizes) < 2 else "no latency and bandwidth fit the sizes")
        if base:
            said[kind] = f"beta from {where} ({why}), alpha the base calibration's"
        else:
            comm[kind]["alpha_unknown"] = True
            said[kind] = (f"beta the measured bandwidth of {where} ({why}: the latency folded in); "
                          "alpha unknown, 0")
            warnings.append(f"comm.{kind}: alpha unknown ({why} traced: {', '.join(map(str, sizes[:3]))} bytes); "
                            "beta is the measured bandwidth, latency folded in (--base gives a measured alpha)")
    return comm, said, warnings


def fit_from_profile(paths: list, spec, base: Calibration | None = None, mesh=None) -> tuple[Calibration, list]:
    """A calibration for `spec` from its profiled run's traces, and warnings to print."""
    pset = load_profile_set(paths, mesh)
    warnings = list(pset.warnings)
    if pset.whole_window:
        raise DtgenError(f"{pset.source}: no ProfilerStep spans: a calibration needs the time per step "
                         "(profile with a schedule and prof.step())")
    parts = step_compute(pset)
    if not parts["forward"] or sum(parts["forward"]) + sum(parts["backward"]) <= 0:
        raise DtgenError(f"{pset.source}: no forward or backward span inside the profiled steps")
    blocks = model_blocks(spec)
    flops = [b.flops for b in blocks] if any(b.flops for b in blocks) else [1.0] * len(blocks)
    batch = spec.training.batch_size
    fwd, bwd, opt = (statistics.fmean(parts[k]) for k in COMPUTE)
    plugin = REGISTRY.get(spec.strategy.kind)
    params = sum(b.params for b in blocks) / plugin.model_parts(spec)
    comm, said, comm_warnings = fit_comm(pset, base, spec)
    warnings += comm_warnings
    idle = [rank_split(pset, p, s, e).idle / 1e6 for p in pset.ranks for _, s, e in p.steps]
    low, mean, high = compute_spread(pset)
    cuda = any(p.kernels for p in pset.ranks)
    host = pset.hosts.get(pset.ranks[0].rank, "") if pset.ranks else ""
    caption = (f"calibrated from the profile {pset.source} ({len(pset.ranks)} of {pset.world_size} ranks); "
               f"{FLOP_SPLIT}")
    unknown = [k for k, v in comm.items() if v.get("alpha_unknown")]
    if unknown:
        caption += f"; latency unknown for {', '.join(unknown)} (too few message sizes to fit it)"
    share = lambda part: [[0.0, part * flops[i] / sum(flops) / batch] for i in range(len(blocks))]  # noqa: E731
    fwd_fit, bwd_fit = share(fwd), share(bwd)
    data = {"dtgen_calibration": FORMAT, "source": f"profile {pset.source}",
            "machine": {"host": host, "cpus": os.cpu_count() if host == platform.node() else None},
            "device": {"kind": "cuda" if cuda else "cpu", "name": _gpu_name(pset) if cuda else None,
                       "count": pset.world_size if cuda else None},
            "training": training_of(spec.data), "model": model_signature(spec),
            "ranks": pset.world_size, "cores_effective": float(pset.world_size),
            "made_for": {"strategy": dict(spec.data.get("strategy") or {}), "workers": spec.topology.workers.count,
                         "ranks": pset.world_size, "hosts": spec.topology.hosts},
            "compute": {"blocks": [{"name": b.name, "forward": fwd_fit[i], "backward": bwd_fit[i]}
                                   for i, b in enumerate(blocks)],
                        "optimizer": [0.0, opt / params if params else 0.0], "add_per_param_s":
                            float((base or illustrative_calibration(spec)).data["compute"]["add_per_param_s"]),
                        "step_overhead_s": statistics.fmean(idle) if idle else 0.0},
            "comm": comm,
            "provenance": {"caption": caption, "compute_split": FLOP_SPLIT,
                           "compute_per_step_s": {"low": low, "mean": mean, "high": high,
                                                  "steps": len(parts["steps"]), "ranks": len(pset.ranks)},
                           "cores": "each traced rank had its own device (cores_effective = the world size)",
                           "training": "precision and optimizer as the spec says (a trace records neither)",
                           "comm": said}}
    return Calibration(data, f"profile {pset.source}"), warnings
