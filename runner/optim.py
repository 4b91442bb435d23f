"""The optimizer and the one update every strategy takes with it (`Stepper.step`):

  unscale (fp16) -> global gradient norm (grad_clip, or fp16's overflow check)
  -> skip the step if that norm is not finite (fp16) -> clip -> set the step's
  learning rate (opentikz_dt.training_rules.lr_at) -> optimizer.step()

The norm is the global one, over the whole model: where a rank holds only part of it (a
parameter-server shard, a pipeline stage) the strategy passes `reduce_sq`, which sums
the squared norms over the ranks holding the parts, so every part is clipped by the same
factor and every part skips the same steps; numerics then equal `single`'s. The clip
factor is torch.nn.utils.clip_grad_norm_'s: min(1, max_norm / (norm + 1e-6)).
The learning rate is set from the step number, so a restart or a shard needs no
scheduler state.
"""

from __future__ import annotations

import math

import torch

from ..training_rules import lr_at, optimizer_settings


def build_optimizer(spec, params):
    """torch.optim.SGD / Adam / AdamW with the spec's settings (defaults filled in)."""
    cls, settings = optimizer_class(spec)
    return cls(list(params), **settings)


def optimizer_class(spec) -> tuple[type, dict]:
    """(the torch.optim class, its keyword arguments) of the spec's optimizer: what
    build_optimizer builds, and what a wrapper (ZeroRedundancyOptimizer) builds per shard."""
    s = optimizer_settings(spec.training)
    if s["kind"] == "sgd":
        return torch.optim.SGD, {"lr": s["lr"], "momentum": s["momentum"], "weight_decay": s["weight_decay"]}
    cls = torch.optim.Adam if s["kind"] == "adam" else torch.optim.AdamW
    return cls, {"lr": s["lr"], "betas": tuple(s["betas"]), "eps": s["eps"], "weight_decay": s["weight_decay"]}


class Stepper:
    """One optimizer's update, as described in the module docstring.

    `params`: the parameters the optimizer updates (their .grad is the step's gradient);
    `norm_params`: those counted in the global norm (default all; a pipeline's last
    stage leaves out its copy of a tied weight, which the first stage counts);
    `reduce_sq`: 0-d float64 tensor -> its sum over the ranks sharing the model (None:
    this rank holds the whole model); `scaler`: the rank's LossScaler when it unscales
    (fp16); `check_finite`: skip steps with non-finite gradients (fp16); `clip`: the
    max norm when not the spec's grad_clip (None where the senders clipped already)."""

    def __init__(self, ctx, opt, params, *, norm_params=None, reduce_sq=None, scaler=None, check_finite=None,
                 clip="spec"):
        self.ctx, self.opt = ctx, opt
        self.params = list(params)
        self.norm_params = self.params if norm_params is None else list(norm_params)
        self.reduce_sq = reduce_sq
        self.scaler = scaler
        self.clip = ctx.spec.training.grad_clip if clip == "spec" else clip
        fp16 = ctx.spec.training.precision == "fp16"
        self.check_finite = fp16 if check_finite is None else check_finite
        self.skipped: list[int] = []

    def step(self, step: int, span=None) -> bool:
        """Update from the current gradients; False when the step was skipped (fp16 overflow).
        `span`: the open `optimizer`/`update` span, marked `skipped: true` on a skip (the
        measured timeline's note names those steps)."""
        grads = [p.grad for p in self.params if p.grad is not None]
        if self.scaler is not None:
            self.scaler.unscale_(grads)
        if self.clip and not self.check_finite:
            # Clipping alone needs no host read: the factor is computed and applied on
            # the device (bit-identical to the host path's: the same float64 norm and
            # factor, multiplying by exactly 1.0 where the norm is within max_norm).
            # (a nan norm gives factor 1, as min(1.0, nan) does on the host)
            coef = (self.clip / (self._global_sq().sqrt() + 1e-6)).nan_to_num(nan=1.0).clamp(max=1.0)
            for g in grads:
                g.mul_(coef.to(g.dtype))
            self._update(step)
            return True
        norm = self._global_norm() if (self.clip or self.check_finite) else None
        if self.check_finite and not math.isfinite(norm):
            if self.scaler is not None:
                self.scaler.update(found_inf=True)
            self.skipped.append(step)
            self.ctx.metrics.skipped_step(step)
            if getattr(span, "args", None) is not None:  # an unsampled step's span is a nullcontext
                span.args["skipped"] = True
            self.ctx.log(f"dtgen: step {step}: gradients not finite in fp16 (norm {norm}); step skipped"
                         + (f", loss scale now {self.scaler.scale:g}" if self.scaler is not None else ""))
            return False
        if self.clip:
            coef = min(1.0, self.clip / (norm + 1e-6))
            if coef < 1.0:
                for g in grads:
                    g.mul_(coef)
        self._update(step)
        return True

    def _update(self, step: int) -> None:
        lr = lr_at(self.ctx.spec.training, step)
        for group in self.opt.param_groups:
            group["lr"] = lr
        self.opt.step()
        if self.scaler is not None:
            self.scaler.update(found_inf=False)

    def _global_sq(self):
        """The squared global gradient norm as a 0-d float64 tensor on the device."""
        grads = [p.grad for p in self.norm_params if p.grad is not None]
        device = grads[0].device if grads else self.ctx.device
        sq = torch.zeros((), dtype=torch.float64, device=device)
        for g in grads:
            sq += torch.linalg.vector_norm(g.detach(), dtype=torch.float64) ** 2
        if self.reduce_sq is not None:
            sq = self.reduce_sq(sq)
        return sq

    def _global_norm(self) -> float:
        """The global norm as a float: one host read (fp16's skip decision needs it there)."""
        sq = self._global_sq().item()
        return math.sqrt(sq) if math.isfinite(sq) else float("nan")
