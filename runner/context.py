"""RankContext: everything a strategy's `train(ctx)` may use (docs/dev/runner-interface.md)."""

from __future__ import annotations

import datetime
import os
import sys
import time
from pathlib import Path

import torch

from ..strategies import strategy
from . import checkpoint
from .dist import settle
from .faults import fault_for, inject
from .model import build_model, build_optimizer, make_loss


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
        workers = [i for i, (role, _) in enumerate(roles) if role == "worker"]
        self.dp_size = len(workers) if strategy(spec.strategy.kind).data_parallel else 1
        self._fault = fault_for(spec, rank, attempt)
        self._slowdown = spec.topology.workers.slowdown_of(self.id) if self.id.startswith("w") else 1.0
        self._ckpt_every = checkpoint.checkpoint_every(spec)
        self.spec_dir = spec_dir  # where a python model's or dataset's module is looked up first
        self._loss = make_loss(spec, spec_dir)

    # --- model and data ----------------------------------------------------------------
    def build_model(self):
        return build_model(self.spec, self.device, self.spec_dir)

    def build_optimizer(self, params):
        return build_optimizer(self.spec, params)

    def loss_fn(self, logits, y):
        return self._loss(logits, y)

    def batch(self, step: int, part: int = 0, parts: int | None = None):
        return self.data.batch(step, part, self.dp_size if parts is None else parts)

    def forward_backward(self, module, step: int, part: int = 0, parts: int | None = None, zero_grad=None):
        """The local half of every data-parallel step, traced the same way everywhere:
        this worker's slice of the step's global batch, forward, backward, then the
        straggler delay. Returns (loss, samples). `zero_grad` defaults to dropping the
        gradients; the all-reduce strategies pass one that keeps their flat buffer."""
        started = time.perf_counter()
        x, y = self.batch(step, part, parts)
        with self.tracer.span("forward", step=step):
            loss = self.loss_fn(module(x), y)
            settle(self.device)
        with self.tracer.span("backward", step=step):
            (zero_grad or (lambda: module.zero_grad(set_to_none=True)))()
            loss.backward()
            settle(self.device)
        self.straggle(step, time.perf_counter() - started)
        return loss, len(x)

    def global_batch(self, step: int):
        """All batch_size * dp_size rows of step's global batch."""
        return self.data.take(self.data.indices(step, self.data.batch_size * self.dp_size))

    def new_group(self, ranks, backend: str | None = None):
        from .dist import new_group

        return new_group(ranks, self.spec, backend)

    # --- faults, stragglers ------------------------------------------------------------------
    def fault_check(self, step: int) -> None:
        self.metrics.started_step = step
        if self._fault is not None and self._fault[1] == step:
            kind = self._fault[0]
            self.log(f"dtgen: injecting {kind} at step {step} (runtime.fault)")
            inject(kind, step, self.rank, before_hang=self._before_hang)

    def _before_hang(self):
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
        state = checkpoint.load(self.run_dir, self._resume_step, self.rank)
        return state["user"]

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
        with self.tracer.span("checkpoint", step=step):
            checkpoint.save(self.run_dir, step, self.rank, {"user": state_fn(), "metrics": self.metrics.snapshot()})

    def save_model(self, state_dict) -> None:
        cpu = {k: v.detach().to("cpu").clone() for k, v in state_dict.items()}
        path = self.run_dir / "model_parts" / f"rank{self.rank}.pt"
        torch.save(cpu, path.with_suffix(".tmp"))
        os.replace(path.with_suffix(".tmp"), path)

    def log(self, msg: str) -> None:
        print(msg, flush=True)
        sys.stderr.flush()
