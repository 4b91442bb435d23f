"""The pieces of the sync-free loop without processes: losses read a step later
(runner/step_losses.py) and CUDA-event spans resolved after the fact
(runner/device_spans.py), the latter with recorded stand-ins for torch.cuda's events."""

import math

import pytest

torch = pytest.importorskip("torch")

from opentikz_dt.runner.step_losses import SLOTS, DeferredLosses  # noqa: E402


class _NotFinite(Exception):
    pass


def _losses():
    read = []

    def not_finite(step, value):
        raise _NotFinite(step, value)

    return DeferredLosses(torch.device("cpu"), lambda s, v: read.append((s, v)), not_finite), read


def test_each_loss_is_read_at_the_next_push_and_the_rest_at_the_drain():
    losses, read = _losses()
    losses.push(0, torch.tensor(2.5))
    assert read == []  # not in its own step
    losses.push(1, torch.tensor(1.25, dtype=torch.bfloat16))
    assert read == [(0, 2.5)]
    losses.push(2, None)  # a rank without a loss this step
    losses.push(3, 0.5)
    assert read == [(0, 2.5), (1, 1.25)]
    losses.drain()
    assert read == [(0, 2.5), (1, 1.25), (3, 0.5)]
    for step in range(4, 4 + 3 * SLOTS):  # the ring of host slots wraps around
        losses.push(step, torch.tensor(float(step)))
    losses.drain()
    assert [v for _, v in read[3:]] == [float(s) for s in range(4, 4 + 3 * SLOTS)]


def test_a_nan_loss_is_named_with_its_own_step_one_step_later():
    losses, read = _losses()
    losses.push(0, torch.tensor(1.0))
    losses.push(1, torch.tensor(float("nan")))
    with pytest.raises(_NotFinite) as caught:
        losses.push(2, torch.tensor(1.0))
    step, value = caught.value.args
    assert step == 1 and math.isnan(value) and read == [(0, 1.0)]
    losses, _ = _losses()
    losses.push(0, torch.tensor(float("inf")))  # the last step's: found by the drain
    with pytest.raises(_NotFinite):
        losses.drain()


def test_a_copy_that_has_run_is_read_without_a_wait_and_one_still_queued_waited_for_alone():
    """With CUDA events (stand-ins): the push reads a loss whose copy has run without
    synchronizing on its event (a wait DTGEN_SYNC_AUDIT would count); the previous step's
    copy still queued is left for the next push, which waits for that copy only."""
    losses, read = _losses()
    events = [_Event() for _ in range(3)]
    waits = []
    for i, event in enumerate(events):
        event.synchronize = lambda i=i: (waits.append(i), setattr(events[i], "done", True))
    events[0].done = True
    losses._values[:3] = (3.0, 2.0, 1.0)
    losses._pending.extend([(0, 0, events[0]), (1, 1, events[1])])
    losses.push(2, None)
    assert read == [(0, 3.0)] and waits == []  # step 1's copy still queued, and the newest
    losses._pending.append((2, 2, events[2]))
    losses.push(3, None)
    assert read == [(0, 3.0), (1, 2.0)] and waits == [1]  # a step behind: waited for, alone
    losses.drain()
    assert read[-1] == (2, 1.0) and waits == [1, 2]


class _Event:
    """torch.cuda.Event's stand-in: its time (ms after the anchor) and whether it ran."""
    clock = [0.0]

    def __init__(self, enable_timing=False):
        self.t, self.done = None, False

    def record(self):
        _Event.clock[0] += 1.0
        self.t = _Event.clock[0]

    def query(self):
        return self.done

    def synchronize(self):
        self.done = True

    def elapsed_time(self, other):
        return other.t - self.t


def test_cuda_spans_are_resolved_when_their_events_completed(monkeypatch):
    from opentikz_dt.runner import device_spans
    from opentikz_dt.runner.trace import Tracer

    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(torch.cuda, "Event", _Event)
    tracer = Tracer("unused", 0, "w1")
    spans = device_spans.CudaEventSpans(tracer, torch.device("cuda", 0))
    assert spans.resolve in tracer.resolvers
    for step in range(2):
        with spans.span("forward", step=step):
            pass
    first_end = spans.pending[0][5]
    first_end.done = True  # the GPU finished step 0's span, not step 1's
    resolved = []
    monkeypatch.setattr(tracer, "add_resolved", lambda *a: resolved.append(a))
    spans.resolve(final=False)
    assert len(resolved) == 1 and len(spans.pending) == 1
    name, tid, t0, t1, step, args = resolved[0]
    # the anchor recorded at 1 ms, the span's events at 2 and 3 ms: 1 ms and 2 ms after it
    assert (name, step) == ("forward", 0) and (t0 - spans.anchor_ns, t1 - spans.anchor_ns) == (1_000_000, 2_000_000)
    spans.resolve(final=True)  # the close waits for the rest
    assert [r[4] for r in resolved] == [0, 1] and not spans.pending
    assert device_spans.device_spans(tracer, torch.device("cpu")) == tracer.span  # the CPU: host-clock spans
