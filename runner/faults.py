"""Fault injection from `runtime.fault` and the classification of a rank's failure.

A crash raises InjectedFault; a hang flushes what was recorded and sleeps until the
run is torn down (peers time out after `runtime.timeout_s`; a run where nobody is left
to time out is stopped by the parent's watchdog). With `once` (the default) the fault
fires only in the first attempt, so `runtime.restarts` can recover.
"""

from __future__ import annotations

import time


class InjectedFault(RuntimeError):
    """Raised by a rank that runtime.fault tells to crash."""


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
    """'crash' (injected), 'comm' (a peer failed or timed out) or 'error' (this rank's own bug)."""
    if isinstance(exc, InjectedFault):
        return "crash"
    name = type(exc).__name__
    text = str(exc).lower()
    if name in ("DistBackendError", "DistNetworkError", "DistStoreError") or any(m in text for m in _COMM_MARKERS):
        return "comm"
    return "error"
