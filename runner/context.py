"""RankContext: everything a strategy's `train(ctx)` may use (docs/dev/runner-interface.md)."""

from __future__ import annotations

import datetime
import math
import os
import sys
import time
from pathlib import Path

import torch

from ..strategies import plugin
from . import checkpoint
from .device_spans import device_spans
from .faults import NonFiniteLoss, fault_for, inject
from .memory import MemoryMeter
from .model import build_model, make_loss
from .optim import Stepper, build_optimizer
from .precision import LossScaler, autocast, configure_matmul
from .step_losses import DeferredLosses


class RankContext:
    def __init__(self, *, spec, run_dir, rank, world_size, local_rank, roles, backend, device, control_group,
                 tracer, metrics, comm, data, attempt, start_step, resume_step, dataset_path=None, spec_dir=None):
        self.spec, self.run_dir = spec, Path(run_dir)
        self.rank, self.world_size, self.local_rank = rank, world_size, local_rank
        self.roles = roles
        self.role, self.id = roles[rank]
        self.backend, self.device = backend, device
        import torch.distributed as dist

        self.group = dist.group.WORLD
        self.control_group = control_group
        self.timeout = datetime.timedelta(seconds=spec.runtime.timeout_s)
        self.tracer, self.metrics, self.comm, self.data = tracer, metrics, comm, data
        self.attempt = attempt
        self.steps = spec.training.steps
        self.start_step = start_step
        self._resume_step = resume_step
        # ranks taking their own slice of the global batch (the strategy plugin's answer)
        self.dp_size = plugin(spec.strategy.kind).data_parallel_width(spec)
        self._fault = fault_for(spec, rank, attempt)
        self._slowdown = spec.topology.workers.slowdown_of(self.id) if self.id.startswith("w") else 1.0
        self._ckpt_every = checkpoint.checkpoint_every(spec)
        self.spec_dir = spec_dir  # where a python model's or dataset's module is looked up first
        self._loss = make_loss(spec, spec_dir)
        self.precision = spec.training.precision
        configure_matmul(self.precision, device)
        # fp16: the loss scale of the gradients this rank computes (runner/precision.py)
        self.scaler = LossScaler() if self.precision == "fp16" else None
        # memory per rank, measured on the first step this rank trains (runner/memory.py)
        self._memory = MemoryMeter(device, compiled=bool(spec.training.compile))
        # each step's loss, read back a step later (runner/step_losses.py): no step waits for the GPU
        self._losses = DeferredLosses(device, self._loss_read, self._loss_not_finite)
        # spans of device work: CUDA events resolved after the fact on a GPU (runner/device_spans.py)
        self.device_span = device_spans(tracer, device)

    # --- model and data ----------------------------------------------------------------
    def build_model(self):
        """The spec's model on this rank's device; compiled in place (parameter names
        unchanged) with training.compile (the spec rules refuse it where it cannot run)."""
        model = build_model(self.spec, self.device, self.spec_dir)
        if self.spec.training.compile:
            model.compile()
        self._memory.built(model)
        return model

    def build_optimizer(self, params):
        return build_optimizer(self.spec, params)

    def stepper(self, opt, params, **kwargs) -> Stepper:
        """The update of `opt` (runner/optim.py): lr schedule, clipping, fp16 skipping.
        The rank's loss scaler unscales unless `scaler=None` is passed."""
        kwargs.setdefault("scaler", self.scaler)
        return Stepper(self, opt, params, **kwargs)

    def loss_fn(self, logits, y):
        return self._loss(logits, y)

    def autocast(self):
        """The forward and loss's precision context (torch.autocast for bf16/fp16)."""
        return autocast(self.precision, self.device)

    def check_loss(self, loss, step: int) -> float:
        """The loss as a float now (a host read: it waits for the device); NonFiniteLoss
        (the run stops) when it is nan or inf. The training loops use `step_done`, which
        reads it a step later instead."""
        value = loss.item()
        if not math.isfinite(value):
            raise NonFiniteLoss(step, self.rank, self.id, self.precision, value)
        return value

    def step_done(self, step: int, loss, samples: int, seconds: float, global_step: int | None = None) -> None:
        """A training step ended: `loss` (a 0-d tensor, a float, or None on a rank without
        one) is queued and read one step later (runner/step_losses.py), when the earlier
        steps' losses reach metrics; a nan or inf one stops the run then (NonFiniteLoss,
        naming the step that produced it). Then Metrics.step_done (progress, times)."""
        self._losses.push(step, loss)
        self.metrics.step_done(step, None, samples, seconds, global_step)

    def read_losses(self) -> None:
        """Read every loss still queued (the end of training, a checkpoint, a fault)."""
        self._losses.drain()

    def _loss_read(self, step: int, value: float) -> None:
        self.metrics.loss[step] = value

    def _loss_not_finite(self, step: int, value: float) -> None:
        self.metrics.started_step = step  # failure.json names the step whose loss it was
        raise NonFiniteLoss(step, self.rank, self.id, self.precision, value, read_late=True)

    def batch(self, step: int, part: int = 0, parts: int | None = None):
        return self.data.batch(step, part, self.dp_size if parts is None else parts)

    def forward_backward(self, module, step: int, part: int = 0, parts: int | None = None, zero_grad=None):
        """The local half of every data-parallel step, traced the same way everywhere:
        this worker's slice of the step's global batch, forward and loss (under autocast
        in bf16/fp16), backward (of the scaled loss in fp16), then the straggler delay.
        Returns (loss, samples): the loss stays on the device; the strategy hands it to
        `step_done`, which reads it a step later (a nan or inf loss stops the run then).
        `zero_grad` defaults to dropping the gradients; the all-reduce strategies pass
        one that keeps their flat buffer. On a GPU the spans are CUDA events resolved
        after the fact (runner/device_spans.py), so they are the GPU's time and nothing
        here waits for the GPU; on the CPU they are the host clock's."""
        started = time.perf_counter()
        x, y = self.batch(step, part, parts)
        with self.device_span("forward", step=step):
            with self.autocast():
                loss = self.loss_fn(module(x), y)
        with self.device_span("backward", step=step):
            (zero_grad or (lambda: module.zero_grad(set_to_none=True)))()
            (loss if self.scaler is None else self.scaler.scale_loss(loss)).backward()
        self.straggle(step, time.perf_counter() - started)
        return loss, len(x)

    def unscale_for_push(self, tensors, step: int) -> None:
        """fp16 on a rank that sends its gradients to an optimizer elsewhere (parameter
        server, central storage): unscale them with this rank's scaler; if any is not
        finite, make them all nan, so every shard receiving a part skips the step."""
        if self.scaler is None:
            return
        grads = [t.grad for t in tensors]
        self.scaler.unscale_(grads)
        finite = bool(torch.stack([torch.isfinite(g).all() for g in grads]).all())  # one device sync
        if not finite:
            for g in grads:
                g.fill_(float("nan"))
        self.scaler.update(found_inf=not finite)

    def global_batch(self, step: int):
        """All batch_size * dp_size rows of step's global batch."""
        return self.data.take(self.data.indices(step, self.data.batch_size * self.dp_size))

    def new_group(self, ranks, backend: str | None = None):
        from .dist import new_group

        return new_group(ranks, self.spec, backend)

    def record_memory(self, params, optimizer=None) -> None:
        """Every strategy calls this after each update, naming the parameter tensors this
        rank holds and the optimizer updating them here (None: another rank updates them).
        The first call measures the step just done (runner/memory.py) into metrics.json's
        `memory`; the others return at once."""
        if self.metrics.memory is None:
            self._memory.record(params, optimizer)
            self.metrics.memory = self._memory.result

    # --- faults, stragglers ------------------------------------------------------------------
    def fault_check(self, step: int) -> None:
        self.metrics.started_step = step
        if self._fault is not None and self._fault[1] == step:
            kind = self._fault[0]
            self.log(f"dtgen: injecting {kind} at step {step} (runtime.fault)")
            inject(kind, step, self.rank, before_hang=self._before_hang)

    def _before_hang(self):
        self.read_losses()
        self.tracer.flush()
        self.metrics.write()

    def straggle(self, step: int, compute_s: float) -> None:
        if self._slowdown <= 1.0:
            return
        with self.tracer.span("slowdown", step=step, factor=self._slowdown):
            time.sleep((self._slowdown - 1.0) * compute_s)

    # --- checkpoints and results ---------------------------------------------------------
    def load_checkpoint(self):
        if self._resume_step is None:
            return None
        state = checkpoint.load(self.run_dir, self._resume_step, self.rank)["user"]
        if self.scaler is not None and isinstance(state, dict) and "loss_scaler" in state:
            self.scaler.load_state_dict(state["loss_scaler"])
        return state

    def resume(self, model, opt) -> None:
        """After a restart, load the model and optimizer a strategy checkpointed as
        {"model": ..., "opt": ...}; a no-op on a first attempt."""
        state = self.load_checkpoint()
        if state:
            model.load_state_dict(state["model"])
            opt.load_state_dict(state["opt"])

    def is_checkpoint_step(self, step: int) -> bool:
        every = self._ckpt_every
        return bool(every) and (step + 1) % every == 0 and step + 1 < self.steps

    def maybe_checkpoint(self, step: int, state_fn) -> None:
        if not self.is_checkpoint_step(step):
            return
        self.read_losses()  # the snapshot holds every loss up to this step
        with self.tracer.span("checkpoint", step=step):
            user = state_fn()
            if self.scaler is not None and isinstance(user, dict):
                user = {**user, "loss_scaler": self.scaler.state_dict()}
            checkpoint.save(self.run_dir, step, self.rank, {"user": user, "metrics": self.metrics.snapshot()})

    def save_model(self, state_dict) -> None:
        cpu = {k: v.detach().to("cpu").clone() for k, v in state_dict.items()}
        path = self.run_dir / "model_parts" / f"rank{self.rank}.pt"
        torch.save(cpu, path.with_suffix(".tmp"))
        os.replace(path.with_suffix(".tmp"), path)

    def log(self, msg: str) -> None:
        print(msg, flush=True)
        sys.stderr.flush()
