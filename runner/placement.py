"""Where ranks compute and how they talk: a pure function of the spec's request and the
node's GPU count, so the choice is unit-tested without a GPU and said in one line.

- `runtime.device: cpu` (or auto without a GPU): every rank on the CPU, gloo.
- `cuda` with at least one GPU per rank on the node: rank i on GPU i, nccl (auto).
- `cuda` with fewer GPUs than ranks: ranks round-robin on the GPUs (rank i on GPU
  i mod G), compute on the GPU, communicate with gloo; tensors go through host
  memory where gloo needs it (runner/comm.py). NCCL refuses two ranks on one GPU
  (its communicators assume one device per rank), so nccl is chosen only when every
  rank has its own GPU, and an explicit `backend: nccl` without that is an error.
- `backend: gloo` with `device: cuda` and enough GPUs: one GPU each, gloo.
Must not import torch (the launcher's first line and the tests call it directly).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InputError


@dataclass(frozen=True)
class Placement:
    device: str  # "cpu" | "cuda"
    backend: str  # "gloo" | "nccl"
    gpus: int  # GPUs on this node the ranks use (0 on CPU)
    reason: str  # the line `dtgen run` prints first

    def gpu_of(self, local_rank: int) -> int | None:
        return local_rank % self.gpus if self.device == "cuda" else None

    def device_name(self, local_rank: int) -> str:
        return "cpu" if self.device == "cpu" else f"cuda:{self.gpu_of(local_rank)}"

    @property
    def stage_through_host(self) -> bool:
        """gloo on GPU tensors: point-to-point and some collectives need host copies."""
        return self.device == "cuda" and self.backend == "gloo"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def choose_placement(device: str, backend: str, ranks: int, gpus: int) -> Placement:
    """`device`/`backend` as in the spec (auto|cpu|cuda, auto|gloo|nccl); `ranks` on this
    node; `gpus` visible CUDA devices on this node."""
    if device == "auto":
        device = "cuda" if gpus > 0 and backend != "gloo" else "cpu"
        why_device = "runtime.device auto: " + (f"{_plural(gpus, 'GPU')} found" if device == "cuda" else
                                                 "no CUDA GPU" if gpus == 0 else "backend gloo asked for")
    else:
        why_device = f"runtime.device {device}"
    if device == "cuda" and gpus == 0:
        raise InputError("runtime.device is cuda but CUDA is not available on this machine")
    if backend == "nccl" and device != "cuda":
        raise InputError("runtime.backend nccl needs runtime.device cuda (NCCL runs on GPUs only)")
    if device == "cpu":
        return Placement("cpu", "gloo", 0, f"{_plural(ranks, 'rank')} on the CPU with gloo ({why_device})")
    own = gpus >= ranks
    if backend == "nccl" and not own:
        raise InputError(f"runtime.backend nccl needs one GPU per rank: {_plural(ranks, 'rank')} on "
                       f"{_plural(gpus, 'GPU')} of this node; use backend auto (or gloo) to share the GPUs")
    if backend == "auto":
        backend = "nccl" if own else "gloo"
    if own:
        how = "nccl" if backend == "nccl" else "gloo (runtime.backend gloo), tensors staged through host memory"
        return Placement("cuda", backend, ranks, f"{_plural(ranks, 'rank')} on {_plural(ranks, 'GPU')}, "
                                                 f"one each, with {how} ({why_device})")
    per_gpu = -(-ranks // gpus)
    return Placement("cuda", "gloo", gpus, (
        f"{_plural(ranks, 'rank')} round-robin on {_plural(gpus, 'GPU')} (up to {per_gpu} per GPU) with gloo, "
        f"tensors staged through host memory: nccl needs one GPU per rank ({why_device})"))


def check_strategy(placement: Placement, spec) -> str | None:
    """InputError if `spec`'s strategy cannot run on `placement` (its runner plugin's
    check_placement); else None, or the cost of running there that the run's first line
    says (a pipeline's stages on GPUs shared over gloo: through host memory). Imports
    the plugin, and so torch, only when called."""
    from .strategies import load_strategy

    return load_strategy(spec.strategy.kind).check_placement(placement, spec)
