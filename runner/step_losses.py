"""Each step's loss read back to the host without making the step wait for the device.

Reading a GPU tensor's value (`.item()`, `.cpu()`, `.tolist()`) blocks the host until
every kernel queued before it has run: the next step's kernels are then launched onto an
idle GPU, and a loop that does it every step runs as slow as launch latency plus compute
(about 2 ms a step on a bf16 transformer step of 22 ms). So a step's loss is not read in
that step:

- `push(step, loss)` queues a copy of the 0-d loss into one slot of a host buffer
  (page-locked on a GPU, `non_blocking`, so the copy joins the stream's queue) and, on a
  GPU, records a CUDA event after it;
- the next `push` (one step later) reads the earlier slots whose copy has run (a CUDA
  event query, which does not wait); one still queued is read at the push after, by
  which time the host has queued a whole step behind it, so the GPU never runs dry; on
  the CPU the value is already there;
- `drain()` reads everything still queued (the end of training, a checkpoint).

The host buffer is read through a numpy view made once, so no torch call sits on the
step's path at all. A nan or inf loss is named with its own step when it is read: one
step later than the step that produced it (two at most on a GPU; that step's update has
run), or at the end.
"""

from __future__ import annotations

import math
from collections import deque

import torch

SLOTS = 64  # ring of host slots; at most two are in flight (the step being read and the step just queued)


class DeferredLosses:
    """`on_value(step, value)` receives each loss when read (float, in order of steps
    pushed); `on_nonfinite(step, value)` is called (and may raise) for a nan or inf one."""

    def __init__(self, device, on_value, on_nonfinite):
        self.cuda = torch.device(device).type == "cuda"
        self._host = torch.zeros(SLOTS, dtype=torch.float64, pin_memory=self.cuda)
        self._values = self._host.numpy()  # shares memory with _host: reading it calls no torch op
        self._pending: deque = deque()  # (step, slot, event or None)
        self._next = 0
        self.on_value, self.on_nonfinite = on_value, on_nonfinite

    def push(self, step: int, loss) -> None:
        """Queue `loss` (a 0-d tensor, a float, or None: no loss on this rank) for `step`,
        after reading the losses of the steps before it."""
        self._read(final=False)
        if loss is None:
            return
        slot = self._next
        self._next = (self._next + 1) % SLOTS
        if isinstance(loss, torch.Tensor):
            value = loss.detach()
            if value.dtype != torch.float64:
                value = value.to(torch.float64)  # on the device: the copy below stays asynchronous
            self._host[slot].copy_(value, non_blocking=self.cuda)
            event = None
            if self.cuda and value.device.type == "cuda":
                event = torch.cuda.Event()
                event.record()
        else:
            self._values[slot] = float(loss)
            event = None
        self._pending.append((step, slot, event))

    def drain(self) -> None:
        """Read every loss still queued (waits for the device where one is pending)."""
        self._read(final=True)

    def _read(self, final: bool) -> None:
        while self._pending:
            step, slot, event = self._pending[0]
            copied = event is None or event.query()  # a query does not wait
            if not copied and not final and len(self._pending) == 1:
                break  # the previous step's copy has not run yet: read it at the next push
            self._pending.popleft()
            if not copied:
                event.synchronize()  # this copy only, a step behind the host's queue; later steps stay queued
            value = float(self._values[slot])
            if not math.isfinite(value):
                self.on_nonfinite(step, value)
            self.on_value(step, value)
