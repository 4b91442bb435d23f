"""Wire format and push inbox of the server strategies (parameter server, central storage).

- Weights travel as one flat byte buffer per shard: the shard's float tensors in model
  order, then a float64 header (server version, server's run-clock time in µs when it
  sent). One message per fetch: the version and send time ride along for free, so a
  worker can split its blocked time into `wait` (server not done yet) and `fetch`.
- Gradients travel as one flat float buffer per shard, no header (sync). An async push
  carries a float64 ticket after them: the update it answers (its global step is
  ticket // workers), or STOP from a worker leaving (see runner/ps_async.py).
- `Inbox` returns whichever worker's push landed first *without* any-source receive
  (NCCL has none): one pending receive per worker. A gloo receive reports completion
  only from `wait()` (measured: `is_completed()` stays False), so on gloo a waiter thread
  per pending receive blocks in `wait()` and queues the worker; on NCCL the main thread
  polls `is_completed()` (a CUDA event query), then calls `wait()`. Either way
  `arrived_ns` is the perf_counter_ns() at which the returned push was seen complete (the
  waiter thread's, not the main thread's later pick-up): the server traces it in its
  `update` span (`received_us`).
Imports torch; used only by runner strategies.
"""

from __future__ import annotations

import queue
import threading
import time
from time import perf_counter_ns

import torch

from ..errors import RunError

HEADER = 2  # float64 values after the weights: version, sender time (µs, run clock)
_HEADER_BYTES = 8 * HEADER


def flat_numel(tensors) -> int:
    return sum(t.numel() for t in tensors)


def weights_buffer(tensors, ticket: bool = False) -> torch.Tensor:
    """An empty receive buffer for `pack_weights(tensors, ...)` (with a ticket: the async server's)."""
    size = flat_numel(tensors) * tensors[0].element_size() + _HEADER_BYTES + 8 * ticket
    return torch.empty(size, dtype=torch.uint8, device=tensors[0].device)


def pack_weights(tensors, version: int, now_us: float, ticket: int | None = None) -> torch.Tensor:
    """`ticket` (async only): the update the receiving worker computes next, STOP when the budget is spent."""
    flat = torch.cat([t.detach().reshape(-1) for t in tensors])
    values = [float(version), float(now_us)] + ([] if ticket is None else [float(ticket)])
    header = torch.tensor(values, dtype=torch.float64, device=flat.device)
    return torch.cat([flat.view(torch.uint8), header.view(torch.uint8)])


def unpack_weights(buf: torch.Tensor, tensors, ticket: bool = False) -> tuple:
    """Copy the weights into `tensors` in place; return (version, sender time in µs[, ticket])."""
    head = _HEADER_BYTES + 8 * ticket
    body = buf[:-head].view(tensors[0].dtype)
    offset = 0
    with torch.no_grad():
        for t in tensors:
            t.copy_(body[offset:offset + t.numel()].view_as(t))
            offset += t.numel()
    # clone: the header's byte offset need not be 8-aligned for a float64 view
    values = buf[-head:].clone().view(torch.float64).tolist()
    return (int(values[0]), values[1]) + ((int(values[2]),) if ticket else ())


STOP = -1  # ticket: no update left in the budget (weights) / this worker is done (gradients)


def grads_buffer(tensors) -> torch.Tensor:
    """An empty receive buffer for `pack_grads(tensors, ...)`."""
    return torch.empty(flat_numel(tensors) * tensors[0].element_size() + 8, dtype=torch.uint8,
                       device=tensors[0].device)


def pack_grads(tensors, ticket: int) -> torch.Tensor:
    """An async push: the gradients (zeros for STOP) then the ticket they answer, as float64."""
    flat = (torch.cat([t.grad.reshape(-1) for t in tensors]) if ticket != STOP
            else torch.zeros(flat_numel(tensors), dtype=tensors[0].dtype, device=tensors[0].device))
    header = torch.tensor([float(ticket)], dtype=torch.float64, device=flat.device)
    return torch.cat([flat.view(torch.uint8), header.view(torch.uint8)])


def unpack_grads(buf: torch.Tensor, dtype) -> tuple:
    """(flat gradient view into `buf`, no copy; the ticket) of a `pack_grads` message."""
    return buf[:-8].view(dtype), int(buf[-8:].clone().view(torch.float64).item())


def flatten_grads(tensors) -> torch.Tensor:
    return torch.cat([t.grad.reshape(-1) for t in tensors])


def assign_grads(flat: torch.Tensor, tensors) -> None:
    """Make `flat` (views into it, no copy) the `.grad` of `tensors`."""
    offset = 0
    for t in tensors:
        t.grad = flat[offset:offset + t.numel()].view_as(t)
        offset += t.numel()


class Inbox:
    """One pending receive per worker; `next()` yields the worker whose receive completed."""

    def __init__(self, backend: str, timeout_s: float):
        self.poll = backend == "nccl"
        self.timeout_s = timeout_s
        self._pending: dict[int, object] = {}
        self._done: queue.Queue = queue.Queue()
        self.arrived_ns = 0  # when the push `next()` last returned was seen complete

    def __len__(self) -> int:
        return len(self._pending)

    def post(self, worker: int, work) -> None:
        self._pending[worker] = work
        if not self.poll:
            threading.Thread(target=self._wait, args=(worker, work), daemon=True,
                             name=f"dtgen-inbox-{worker}").start()

    def _wait(self, worker: int, work) -> None:
        try:
            work.wait()
            self._done.put((worker, None, perf_counter_ns()))
        except Exception as exc:  # handed to the main thread, which raises it
            self._done.put((worker, exc, 0))

    def next(self) -> int:
        """Block until some worker's pending receive completes; return that worker."""
        if self.poll:
            return self._next_polled()
        try:
            worker, exc, self.arrived_ns = self._done.get(timeout=self.timeout_s)
        except queue.Empty:
            raise RunError(f"no push arrived from workers {sorted(self._pending)} "
                           f"within runtime.timeout_s = {self.timeout_s:g} s") from None
        if exc is not None:
            raise exc
        del self._pending[worker]
        return worker

    def _next_polled(self) -> int:
        deadline = time.monotonic() + self.timeout_s
        while True:
            for worker, work in self._pending.items():
                if work.is_completed():
                    self.arrived_ns = perf_counter_ns()
                    work.wait()
                    del self._pending[worker]
                    return worker
            if time.monotonic() > deadline:
                raise RunError(f"no push arrived from workers {sorted(self._pending)} "
                               f"within runtime.timeout_s = {self.timeout_s:g} s")
            time.sleep(50e-6)


def perf_ns_of(tracer, run_us: float) -> int:
    """A run-clock time (µs) as this process's perf_counter_ns() value."""
    return int(tracer.base_ns + (run_us - tracer.offset_us) * 1000)
