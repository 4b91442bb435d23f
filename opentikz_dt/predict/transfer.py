"""What a calibration carries to a spec it was not made on, said in the prediction.

A calibration's costs are costs of mechanisms the simulator composes: compute per block
and sample, an optimizer step per tensor and parameter, a message (latency + bytes x
beta), a collective, the untraced time of a step, the spread of a rank's compute, and
compute slowing down as max(1, k / cores) when k processes share the cores. A prediction
of another strategy or worker count composes the same mechanisms in another schedule.

Some of what a short run measures is tied to the run it came from: its message latency
holds what a blocking receive waits for its process to be scheduled again at that
process count, and its per-step untraced time holds that strategy's own bookkeeping.
`caveats` names those, for the prediction's run.json and its figures' notes, instead of
guessing a correction. Must not import torch.
"""

from __future__ import annotations

from ..strategies import kinds, strategy
from .simulate import roles

STRATEGY_WORDS = ("kind", "algorithm", "sync", "schedule")


def describe_strategy(block: dict) -> str:
    """'allreduce ring', 'parameter-server sync', 'pipeline gpipe': the kind and the words of
    the block its strategy chooses between (its descriptor lists more than one value)."""
    kind = str(block.get("kind", "?"))
    words = [kind]
    if kind in kinds():
        desc = strategy(kind)
        chosen = {"algorithm": len(desc.algorithms) > 1, "sync": len(desc.sync_modes) > 1,
                  "schedule": "schedule" in desc.options}
        words += [str(block[k]) for k in ("algorithm", "sync", "schedule") if chosen[k] and block.get(k)]
    return " ".join(words)


def caveats(cal, spec, dedicated: bool) -> list[str]:
    """What this prediction carries from another strategy or size (empty: the calibration was
    made on this spec's strategy and size, or says nothing of what it was made on)."""
    made = cal.data.get("made_for")
    if not isinstance(made, dict):
        return []
    out = []
    theirs, ours = dict(made.get("strategy") or {}), dict(spec.data.get("strategy") or {})
    if any(theirs.get(k) != ours.get(k) for k in STRATEGY_WORDS):
        out.append(f"calibrated on {describe_strategy(theirs)}: its message latency and untraced time per step are "
                   f"carried to {describe_strategy(ours)} as costs per message and per step")
    ranks, here = made.get("ranks"), len(roles(spec))
    if ranks and here and ranks != here and not dedicated:
        c = f"{cal.cores:g}"
        waits = (f"a message's wait for a core is scaled by (1 - {c}/k)" if wait_scale(cal, spec, dedicated) is not None
                 and ranks > cal.cores else "a message's wait for a core is not (none was measured)")
        out.append(f"calibrated with {ranks} processes on {c} cores, predicted with {here}: compute "
                   f"sharing is scaled (max(1, k/{c})), {waits}")
    return out


def wait_scale(cal, spec, dedicated: bool) -> float | None:
    """How much of the calibrated wait for a core per message (fit.message_split) this
    prediction carries, or None to keep the fitted message latency as it is (the calibrated
    strategy and process count, or a calibration without the split).

    With k processes runnable on c cores, a message finds its receiver off a core with a
    chance of about 1 - c/k: the wait measured at the calibration's k scales by that ratio,
    and a cluster (a core per rank) has none."""
    made, p2p = cal.data.get("made_for"), cal.data["comm"]["p2p"]
    if not isinstance(made, dict) or "alpha_floor_s" not in p2p or "core_wait_s" not in p2p:
        return None
    if dedicated:
        return 0.0
    theirs, ours = dict(made.get("strategy") or {}), dict(spec.data.get("strategy") or {})
    k, measured, c = len(roles(spec)), made.get("ranks") or 0, cal.cores
    if k == measured and all(theirs.get(w) == ours.get(w) for w in STRATEGY_WORDS):
        return None
    if measured <= c:
        return 1.0  # measured without waiting for a core: nothing to scale
    return max(0.0, 1 - c / k) / (1 - c / measured)



def short(notes: list[str]) -> str:
    """The caveats for a figure's note: each one's first clause ('calibrated on allreduce ring')."""
    return "; ".join(n.split(":")[0] for n in notes) + " (run.json: predicted.transfer says what is carried)"
