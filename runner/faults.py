"""Fault injection from `runtime.fault` and the classification of a rank's failure.

A crash raises InjectedFault; a hang flushes what was recorded and sleeps until the
run is torn down (peers time out after `runtime.timeout_s`; a run where nobody is left
to time out is stopped by the parent's watchdog). With `once` (the default) the fault
fires only in the first attempt, so `runtime.restarts` can recover.
"""

from __future__ import annotations

import re
import time


class InjectedFault(RuntimeError):
    """Raised by a rank that runtime.fault tells to crash."""


class NonFiniteLoss(RuntimeError):
    """The loss became nan or inf. Read as it is computed (`read_late` False), the run
    stops before the step's update; read a step later, as the training loops do
    (runner/step_losses.py), that step's update has run and the run stops at once."""

    def __init__(self, step: int, rank: int, ident: str, precision: str, value: float, read_late: bool = False):
        self.step, self.rank, self.precision = step, rank, precision
        when = (f"after step {step}'s update (each loss is read a step later, so that no step waits for the device)"
                if read_late else f"before step {step}'s update")
        super().__init__(f"the loss is {value} in training.precision {precision}; the run stopped {when} "
                         "(lower training.optimizer.lr, set training.grad_clip, or use a wider precision)")


def fault_for(spec, rank: int, attempt: int):
    """The (kind, at_step) this rank must inject in this attempt, or None."""
    fault = spec.runtime.fault
    if not fault or fault["rank"] != rank:
        return None
    if fault.get("once", True) and attempt > 0:
        return None
    return fault["kind"], int(fault["at_step"])


def inject(kind: str, step: int, rank: int, before_hang=None) -> None:
    if kind == "crash":
        raise InjectedFault(f"injected crash at step {step} (runtime.fault, rank {rank})")
    if before_hang is not None:
        before_hang()
    while True:  # hang: stop answering, stay alive
        time.sleep(3600)


_COMM_MARKERS = ("timed out", "timeout", "connection closed", "connection reset", "connection refused",
                 "broken pipe", "peer", "nccl", "gloo", "socket")


def classify(exc: BaseException) -> str:
    """'crash' (injected), 'diverged' (nan/inf loss), 'oom' (GPU out of memory), 'comm' (a
    peer failed or timed out) or 'error' (this rank's own failure: a bug, or a port it could
    not listen on)."""
    if isinstance(exc, InjectedFault):
        return "crash"
    if isinstance(exc, NonFiniteLoss):
        return "diverged"
    if is_out_of_memory(exc):
        return "oom"
    name = type(exc).__name__
    text = str(exc).lower()
    if "address already in use" in text:  # this rank could not listen: its own failure, not a peer's
        return "error"
    if name in ("DistBackendError", "DistNetworkError", "DistStoreError") or any(m in text for m in _COMM_MARKERS):
        return "comm"
    return "error"


def is_out_of_memory(exc: BaseException) -> bool:
    """torch.OutOfMemoryError (torch.cuda.OutOfMemoryError), matched by name so this
    module needs no torch import and a fake exception can test the message."""
    return any(cls.__name__ == "OutOfMemoryError" for cls in type(exc).__mro__)


_ASKED = re.compile(r"Tried to allocate ([0-9.]+ [KMGT]?i?B)")
_FREE = re.compile(r"of which ([0-9.]+ [KMGT]?i?B) is free|([0-9.]+ [KMGT]?i?B) free")
_GPU = re.compile(r"GPU (\d+)")


def describe_out_of_memory(exc: BaseException, device: str, gpu_name: str | None) -> str:
    """One line for a GPU out of memory, from torch's message: the GPU, the memory asked
    for and free, and what to lower (the failure report puts the rank first). Never the
    CUDA traceback."""
    text = str(exc)
    asked = _ASKED.search(text)
    free = _FREE.search(text)
    gpu = f"{device}" + (f" ({gpu_name})" if gpu_name else "")
    amounts = []
    if asked:
        amounts.append(f"asked for {asked.group(1)}")
    if free:
        amounts.append(f"{free.group(1) or free.group(2)} free")
    what = ", ".join(amounts) if amounts else "no allocation size in torch's message"
    return (f"{gpu}: {what}; lower training.batch_size, "
            "training.model.seq_len (or the model's size), or use training.precision bf16")
