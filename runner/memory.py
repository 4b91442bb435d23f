"""Memory per rank, measured on one step: what `metrics.json`'s `memory` says.

Every strategy's train loop makes one call, `ctx.record_memory(step, params, optimizer)`,
after its update, naming the parameter tensors this rank holds (a replica, a server's
shard, a pipeline stage, the central store) and the optimizer that updates them (None
where another rank updates them). The first call measures; later calls cost one
comparison. Categories, in bytes, each tensor storage counted once:

  params       the storages of `params`
  grads        the storages of their `.grad` (a flat gradient buffer the grads are views
               of counts once, whole)
  optimizer    the storages of the optimizer's per-parameter state (momentum, Adam's
               moments); 0-d tensors (Adam's step counters, 4 bytes each) are left out
  activations  the peak, over the measured step, of the bytes autograd saved for backward
               (torch.autograd.graph.saved_tensors_hooks: a storage is counted from the
               first time it is saved until every save of it was unpacked by backward
               or freed with its graph;
               parameters autograd saves, such as a linear layer's weight, are not
               activations and are left out)

Source "tensors": the four categories above, counted from the tensors (any device).
On CUDA `peak` is the allocator's peak from the context's creation (before the model is
built) to the end of the measured step (torch.cuda.reset_peak_memory_stats, then
max_memory_allocated): the model, its gradients and optimizer state, the step's
activations and every buffer; source then says "cuda-allocator". On CPU `peak` is None. Buffers a strategy allocates for communication (receive buffers,
flattened copies) are in the allocator's peak only.

The saved-tensor hooks are on from the context's creation until the first measurement,
so they see exactly the first step this rank trains (the warm-up step, which throughput
leaves out). Compiled models (training.compile) may run their backward outside the
hooks: activations are then None.
"""

from __future__ import annotations

import torch

CATEGORIES = ("params", "grads", "optimizer", "activations")


def _storage(t: torch.Tensor) -> tuple[int, int]:
    """(key, bytes) of the storage behind `t`: views of one buffer share a key. A sharded
    tensor (a DTensor: fsdp's parameters, gradients and optimizer state) is the shard
    this rank holds."""
    if hasattr(t, "to_local") and hasattr(t, "device_mesh"):  # a DTensor, without importing its module
        t = t.to_local()
    s = t.untyped_storage()
    return (s.data_ptr(), s.nbytes())


def storage_bytes(tensors) -> int:
    """Bytes of the distinct storages behind `tensors` (None entries skipped)."""
    seen = {}
    for t in tensors:
        if t is not None:
            key, nbytes = _storage(t)
            seen[key] = nbytes
    return sum(seen.values())


def optimizer_tensors(optimizer) -> list:
    """The optimizer's per-parameter state tensors (0-d step counters left out)."""
    if optimizer is None:
        return []
    return [v for state in optimizer.state.values() for v in state.values()
            if torch.is_tensor(v) and v.dim() > 0]


class SavedTensors:
    """Live and peak bytes of the storages autograd keeps for backward while the hooks are on."""

    def __init__(self, is_parameter):
        self.is_parameter = is_parameter  # storage key -> True for a model parameter's storage
        self.refs: dict[int, int] = {}
        self.nbytes: dict[int, int] = {}
        self.live = self.peak = 0
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)

    def start(self) -> None:
        self._hooks.__enter__()

    def stop(self) -> None:
        self._hooks.__exit__(None, None, None)

    def _pack(self, t):
        key, nbytes = _storage(t)
        if self.is_parameter(key):
            return (None, t)
        if key not in self.refs:
            self.refs[key], self.nbytes[key] = 0, nbytes
            self.live += nbytes
            self.peak = max(self.peak, self.live)
        self.refs[key] += 1
        # a detached alias: same storage, no reference from the tensor back to its own
        # grad_fn (returning `t` itself would make a cycle only the garbage collector frees)
        return _Saved(self, key, t.detach())

    def _unpack(self, packed):
        if isinstance(packed, tuple):  # a parameter
            return packed[1]
        packed.release()
        return packed.tensor

    def _release(self, key: int) -> None:
        if key in self.refs:
            self.refs[key] -= 1
            if self.refs[key] == 0:
                del self.refs[key]
                self.live -= self.nbytes.pop(key)


class _Saved:
    """One save of a storage: released when backward unpacks it, or when its graph is
    freed without a backward (a forward run only to infer shapes, as a pipeline stage's
    first step does), whichever comes first."""

    __slots__ = ("owner", "key", "tensor", "done")

    def __init__(self, owner: SavedTensors, key: int, tensor):
        self.owner, self.key, self.tensor, self.done = owner, key, tensor, False

    def release(self) -> None:
        if not self.done:
            self.done = True
            self.owner._release(self.key)

    def __del__(self):
        self.release()


class MemoryMeter:
    """One rank's measurement (see the module docstring)."""

    def __init__(self, device, compiled: bool = False):
        self.device = device
        self.cuda = device.type == "cuda"
        self.result: dict | None = None
        self._models: list = []  # models built through the context: their parameters are not activations
        self._param_keys: set | None = None
        self._saved = None if compiled else SavedTensors(self._is_parameter)
        if self._saved is not None:
            self._saved.start()
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(device)

    def built(self, model) -> None:
        """A model the context built: its parameters' storages are known parameters."""
        self._models.append(model)
        self._param_keys = None

    def _is_parameter(self, key: int) -> bool:
        if self._param_keys is None:
            self._param_keys = {_storage(p)[0] for m in self._models for p in m.parameters()}
        return key in self._param_keys

    def record(self, params, optimizer=None) -> None:
        if self.result is not None:
            return
        if self._saved is not None:
            self._saved.stop()
        params = list(params)
        peak = None
        if self.cuda:
            torch.cuda.synchronize(self.device)
            peak = int(torch.cuda.max_memory_allocated(self.device))
        self.result = {
            "params": storage_bytes(params),
            "grads": storage_bytes(p.grad for p in params),
            "optimizer": storage_bytes(optimizer_tensors(optimizer)),
            "activations": None if self._saved is None else self._saved.peak,
            "peak": peak,
            "source": "cuda-allocator" if self.cuda else "tensors",
        }
        self._models.clear()
