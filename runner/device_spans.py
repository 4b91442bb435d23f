"""Spans of device work (`ctx.device_span`): on a GPU timed by CUDA events and resolved
after the fact; on the CPU the tracer's own host-clock spans.

A host timestamp taken when a GPU call returns is the kernel's launch time, not its end;
making it real by synchronising the device at every span end (as a loop could) stalls
the queue every step. Instead each span records a CUDA event at its start and end on
the current stream, and the pair is turned into trace times later, when the tracer
flushes (about every half second) and the events have completed: the event's time
relative to an anchor event recorded once, at a known host time (perf_counter_ns taken
when the anchor had completed on an idle device), puts it on the trace's clock.
Events not yet complete at a flush wait for the next; the tracer's close waits for all.
"""

from __future__ import annotations

from contextlib import nullcontext

import torch

from .trace import TIDS

_NULL = nullcontext()


def device_spans(tracer, device):
    """The `span(name, tid="compute", step=0, **args)` context manager for device work."""
    if torch.device(device).type != "cuda":
        return tracer.span
    return CudaEventSpans(tracer, torch.device(device)).span


class _EventSpan:
    __slots__ = ("owner", "name", "tid", "step", "args", "start")

    def __init__(self, owner, name, tid, step, args):
        self.owner, self.name, self.tid, self.step, self.args = owner, name, tid, step, args

    def __enter__(self):
        self.start = torch.cuda.Event(enable_timing=True)
        self.start.record()
        return self

    def __exit__(self, *exc):
        end = torch.cuda.Event(enable_timing=True)
        end.record()
        self.owner.pending.append((self.name, TIDS[self.tid], self.step, self.args, self.start, end))
        return False


class CudaEventSpans:
    def __init__(self, tracer, device):
        from time import perf_counter_ns

        self.tracer, self.device = tracer, device
        self.pending: list = []
        torch.cuda.synchronize(device)  # once, before training: the anchor runs on an idle device
        self.anchor = torch.cuda.Event(enable_timing=True)
        self.anchor.record()
        self.anchor.synchronize()
        self.anchor_ns = perf_counter_ns()
        tracer.resolvers.append(self.resolve)

    def span(self, name: str, tid: str = "compute", step: int = 0, **args):
        if not self.tracer.enabled_for(step):
            return _NULL
        return _EventSpan(self, name, tid, step, args)

    def _ns(self, event) -> int:
        return self.anchor_ns + int(self.anchor.elapsed_time(event) * 1e6)  # elapsed_time: ms

    def resolve(self, final: bool) -> None:
        """Hand the completed spans to the tracer, in order; `final` waits for the rest."""
        done = 0
        for name, tid, step, args, start, end in self.pending:
            if final:
                end.synchronize()
            elif not end.query():
                break
            self.tracer.add_resolved(name, tid, self._ns(start), self._ns(end), step, args)
            done += 1
        del self.pending[:done]
