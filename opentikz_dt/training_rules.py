"""Rules and pure arithmetic of `training.optimizer`, `lr_schedule`, `precision`, `compile`.

`optimizer_section` runs on the raw YAML (a key the chosen optimizer does not take is an
error: `betas` on sgd would otherwise be silently ignored); `check_training` on the built
Spec. `lr_at` is the learning-rate schedule every rank applies (the runner sets each
step's rate from it, so a restart or a server shard needs no scheduler state).
Must not import torch.
"""

from __future__ import annotations

import math

OPTIMIZER = ("training", "optimizer")
OPTIMIZER_KEYS = {
    "sgd": {"kind", "lr", "momentum", "weight_decay"},
    "adam": {"kind", "lr", "betas", "eps", "weight_decay"},
    "adamw": {"kind", "lr", "betas", "eps", "weight_decay"},
}
DEFAULT_WEIGHT_DECAY = {"sgd": 0.0, "adam": 0.0, "adamw": 0.01}  # torch.optim's defaults
def optimizer_section(data: dict):
    """(path, message, prefer_value) for keys the chosen optimizer kind does not take (on
    the raw YAML, which need not even be a mapping)."""
    training = data.get("training") if isinstance(data, dict) else None
    opt = training.get("optimizer") if isinstance(training, dict) else None
    if not isinstance(opt, dict):
        return
    kind = opt.get("kind", "sgd")
    if not isinstance(kind, str) or kind not in OPTIMIZER_KEYS:  # the schema reports it (a list or map too)
        return
    for key in opt:
        if key not in OPTIMIZER_KEYS[kind]:
            users = ", ".join(k for k, keys in OPTIMIZER_KEYS.items() if key in keys)
            if users:  # a key no kind takes: the schema reports it, with a suggestion
                yield OPTIMIZER + (key,), f"'{key}' applies to optimizer kind {users}, not {kind}", False


def check_training(spec):
    """(path, message) for schedules, precisions and compile requests that cannot run."""
    t = spec.training
    sched = t.lr_schedule
    if sched["kind"] == "constant" and "min_lr" in sched:
        yield ("training", "lr_schedule", "min_lr"), "'min_lr' applies to lr_schedule kind cosine, linear, not constant"
    if sched.get("min_lr", 0.0) > t.lr:
        yield ("training", "lr_schedule", "min_lr"), f"min_lr {sched['min_lr']:g} is above the peak lr {t.lr:g}"
    if sched["warmup_steps"] > t.steps:
        yield ("training", "lr_schedule", "warmup_steps"), (f"{sched['warmup_steps']} warm-up steps are more than "
                                                            f"the run's {t.steps} steps")
    # (A strategy that cannot run compiled says so in its own rules: pipeline's.)
    if t.precision == "fp16" and spec.runtime.device == "cpu":
        yield ("training", "precision"), "fp16 needs a GPU (runtime.device is cpu); use bf16 on the CPU"
    refusal = recompute_refusal(t.recompute, t.model.get("kind", "mlp"))
    if refusal:
        yield ("training", "recompute"), refusal


# Which built-in kinds each recompute policy can wrap: full, a block; selective, an attention core.
RECOMPUTE_KINDS = {"full": ("transformer", "cnn"), "selective": ("transformer",)}


def recompute_refusal(policy: str, kind: str) -> str | None:
    """Why `training.recompute: policy` cannot run on a model of `kind`, or None."""
    kinds = RECOMPUTE_KINDS.get(policy)
    if kinds is None or kind in kinds:
        return None
    what = {"full": "blocks to wrap", "selective": "attention to recompute"}[policy]
    has = ("a python model's blocks are unknown to dtgen" if kind == "python"
           else f"{'an' if kind == 'mlp' else 'a'} {kind} has none")
    return f"{policy} needs a model with {what}: {' or '.join(kinds)} ({has}); use none"


def optimizer_settings(training) -> dict:
    """The optimizer's kind and every hyper-parameter it runs with, defaults filled in."""
    opt = dict(training.optimizer)
    kind = opt.get("kind", "sgd")
    out = {"kind": kind, "lr": float(opt.get("lr", training.lr)),
           "weight_decay": float(opt.get("weight_decay", DEFAULT_WEIGHT_DECAY[kind]))}
    if kind == "sgd":
        out["momentum"] = float(opt.get("momentum", 0.9))
    else:
        out["betas"] = [float(b) for b in opt.get("betas", (0.9, 0.999))]
        out["eps"] = float(opt.get("eps", 1e-8))
    return out


def lr_at(training, step: int) -> float:
    """The learning rate of `step` (0-based): warm-up lr*(s+1)/W for s < W, then constant,
    or a cosine / linear decay from lr that reaches min_lr at the last step."""
    sched, peak, steps = training.lr_schedule, training.lr, training.steps
    warmup = int(sched.get("warmup_steps", 0))
    if step < warmup:
        return peak * (step + 1) / warmup
    kind = sched.get("kind", "constant")
    if kind == "constant":
        return peak
    floor = float(sched.get("min_lr", 0.0))
    span = steps - 1 - warmup
    progress = min(1.0, (step - warmup) / span) if span > 0 else 1.0
    if kind == "cosine":
        return floor + (peak - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))
    return peak - (peak - floor) * progress


def describe_training(training) -> str:
    """The optimizer and its extras in one phrase (the run's first line)."""
    opt = optimizer_settings(training)
    extras = []
    if training.lr_schedule.get("warmup_steps"):
        extras.append(f"{training.lr_schedule['warmup_steps']} warm-up steps")
    if training.lr_schedule.get("kind", "constant") != "constant":
        extras.append(f"{training.lr_schedule['kind']} lr")
    if training.grad_clip:
        extras.append(f"clip {training.grad_clip:g}")
    if training.compile:
        extras.append("compiled")
    if getattr(training, "recompute", "none") != "none":
        extras.append(f"{training.recompute} recomputation")
    return opt["kind"] + (f" ({', '.join(extras)})" if extras else "")
