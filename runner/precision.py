"""`training.precision`: the device check before spawning, the matmul switches, autocast
for the forward and the loss, and dynamic loss scaling for fp16.

Weights, gradients, optimizer state and every message stay fp32 in all precisions:
bf16/fp16 run the forward and the loss under `torch.autocast` (the backward follows
the forward's dtypes), so a rank's gradients are fp32 and the bytes on the wire are 4
per value. tf32 keeps fp32 storage and lets matmuls and convolutions use TF32 tensor
cores (GPUs of compute capability 8.0 and later); on the CPU it is plain fp32.

fp16 scales the loss before backward (`LossScaler`) so small gradients survive fp16's
range; the rank that owns the optimizer unscales, and a step whose gradients are not
finite is skipped and the scale halved. dtgen keeps its own scaler rather than
torch.amp.GradScaler because the skip decision must be shared: GradScaler decides per
optimizer from the gradients it sees, which on a pipeline stage or a server shard are
only part of the model, with no public way to say "another rank overflowed". Here the
decision is taken on the global squared gradient norm (runner/optim.py), which every
rank that holds a part of the model agrees on.
"""

from __future__ import annotations

import contextlib

import torch

from ..errors import InputError, RunError
from .entry import spec_location

AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}
BYTES_PER_GRADIENT = 4  # gradients and weights travel as fp32 in every precision


def check_compile(spec, placement) -> None:
    """Refuse training.compile on the CPU without a C++ compiler (inductor generates C++
    there), before any rank is spawned, instead of every rank failing at its first step."""
    if not spec.training.compile or placement.device != "cpu":
        return
    import os
    import shutil

    if not any(shutil.which(c) for c in (os.environ.get("CXX", ""), "g++", "c++", "clang++") if c):
        raise InputError(f"{spec_location(spec, ('training', 'compile'))}: torch.compile on the CPU needs a C++ "
                       "compiler (g++, c++ or clang++ on PATH, or CXX) and none was found; install one or set "
                       "compile: false")


def check_precision(spec, placement) -> None:
    """Refuse, before any rank is spawned, a precision the run's device cannot do."""
    precision = spec.training.precision
    where = spec_location(spec, ("training", "precision"))
    if placement.device == "cpu":
        if precision == "fp16":
            raise InputError(f"{where}: fp16 needs a GPU and this run is on the CPU ({placement.reason}); "
                           "use bf16, which the CPU runs under autocast")
        return
    if precision in ("bf16", "tf32"):  # GPU-only path
        name, capability = _gpu_capability()
        if capability < (8, 0):  # bf16 and TF32 units arrived with Ampere (compute capability 8.0)
            other = "fp16 or fp32" if precision == "bf16" else "fp32"
            raise InputError(f"{where}: {precision} needs a GPU of compute capability 8.0 or later; {name} has "
                           f"{capability[0]}.{capability[1]}: use {other}")


def _gpu_capability() -> tuple[str, tuple[int, int]]:
    """GPU 0's name and compute capability, asked in a short-lived child process: CUDA
    initialised here would hold a context (hundreds of MB of GPU memory) in the launcher
    for the whole run. GPU-only path."""
    import subprocess
    import sys

    code = ("import torch; c = torch.cuda.get_device_capability(0); "
            "print(c[0], c[1], torch.cuda.get_device_name(0))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise RunError(f"cannot query the GPU's compute capability: {out.stderr.strip().splitlines()[-1:]}")
    major, minor, name = out.stdout.split(maxsplit=2)
    return name.strip(), (int(major), int(minor))


def describe(precision: str, device_kind: str) -> str:
    """What `precision` means on this device, for the run's first line and run.json."""
    if precision == "fp32":
        return "fp32"
    if precision == "tf32":
        return ("tf32: TF32 matmuls and convolutions, fp32 weights" if device_kind == "cuda" else
                "tf32: plain fp32 on the CPU, which has no TF32 units")
    scaled = ", dynamic loss scaling" if precision == "fp16" else ""
    return f"{precision}: autocast, fp32 weights{scaled}"


def training_line(spec, placement) -> str:
    """The run's first line's second half: precision, optimizer, what a gradient costs."""
    from ..training_rules import describe_training

    precision = spec.training.precision
    means = describe(precision, placement.device)
    return (f"training {describe_training(spec.training)} in {precision}"
            + ("" if means == precision else f" ({means.split(': ', 1)[1]})")
            + _sent(spec))


def _sent(spec) -> str:
    """What the ranks send each other (the strategy's `sent`), and in what precision."""
    from .strategies import load_strategy

    what = load_strategy(spec.strategy.kind).sent(spec)
    return f"; {what} sent as fp32, {BYTES_PER_GRADIENT} bytes per value" if what else ""


def training_record(spec, device: str) -> dict:
    """run.json's `training`: what the run trained with, as it ran."""
    from ..training_rules import optimizer_settings

    t = spec.training
    kind = "cuda" if str(device).startswith("cuda") else "cpu"
    return {"precision": t.precision, "precision_means": describe(t.precision, kind),
            "optimizer": optimizer_settings(t), "lr_schedule": dict(t.lr_schedule), "grad_clip": t.grad_clip,
            "compile": t.compile, "recompute": t.recompute, "gradient_bytes_per_value": BYTES_PER_GRADIENT}


def configure_matmul(precision: str, device) -> None:
    """TF32 on for tf32, off otherwise (so fp32 is fp32 also where cuDNN defaults to TF32)."""
    if device.type != "cuda":
        return
    tf32 = precision == "tf32"  # GPU-only path
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32


def autocast(precision: str, device):
    """The context for the forward and the loss: torch.autocast for bf16/fp16."""
    dtype = AUTOCAST.get(precision)
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def autocast_forward(module, precision: str, device) -> None:
    """Run `module`'s forward under autocast, its floating outputs cast back to fp32 (a
    pipeline stage: activations cross stage boundaries in fp32, the dtype the schedule's
    shape inference expects). State-dict names are unchanged."""
    if precision not in AUTOCAST:
        return
    inner = module.forward

    def forward(*args, **kwargs):
        with autocast(precision, device):
            out = inner(*args, **kwargs)
        return out.float() if torch.is_tensor(out) and out.is_floating_point() else out

    module.forward = forward


class LossScaler:
    """Dynamic loss scaling with torch.amp.GradScaler's policy and defaults: start at
    2**16, halve on a step with non-finite gradients (which is skipped), double after
    2000 finite steps in a row."""

    def __init__(self, scale: float = 2.0 ** 16, growth_interval: int = 2000):
        self.scale = float(scale)
        self.growth_interval = growth_interval
        self.good_steps = 0

    def scale_loss(self, loss):
        return loss * self.scale

    def unscale_(self, grads) -> None:
        inv = 1.0 / self.scale
        for g in grads:
            g.mul_(inv)

    def update(self, found_inf: bool) -> None:
        if found_inf:
            self.scale *= 0.5
            self.good_steps = 0
            return
        self.good_steps += 1
        if self.good_steps >= self.growth_interval:
            self.scale *= 2.0
            self.good_steps = 0

    def state_dict(self) -> dict:
        return {"scale": self.scale, "good_steps": self.good_steps}

    def load_state_dict(self, state: dict) -> None:
        self.scale, self.good_steps = float(state["scale"]), int(state["good_steps"])
