"""A count of the host reads a rank's training makes (`DTGEN_SYNC_AUDIT=<folder>`).

Each call of `Tensor.item`, `Tensor.cpu`, `Tensor.tolist`, `torch.cuda.synchronize` and
`torch.cuda.Event.synchronize` made from Python while the strategy trains is counted,
and written to `<folder>/rank<r>.json` when training ends: `total`, over the whole of
`train` (setup and the final gather included), and `loop`, between the end of the rank's
first step and the end of its last (Metrics.step_done), the steady state of the loop. On a GPU
each is a point where the host waits for the device; a training loop that makes one
per step runs at the speed of its launches. The counts make that visible on any
machine: `loop` should be all zeros (tests check it on the CPU for every strategy that
uses the shared step, runner/step_losses.py).

Two kinds of read are not counted, because neither waits for a device:
  - on a rank whose device is not the CPU, a read of a tensor on the CPU (on a GPU the
    reads above are host-device syncs only for tensors on the GPU);
  - torch's optimizers reading their step counter (`torch.optim.optimizer._get_value`,
    which Adam, AdamW and the others call once a parameter a step): torch keeps `step`
    on the host unless the optimizer is capturable or fused, so the read waits for
    nothing on a GPU either; on a CPU run, where every tensor is on the host, only its
    caller tells it apart.
Off unless the variable is set; the wrappers are only installed then.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path

import torch

from .metrics import Metrics

ENV = "DTGEN_SYNC_AUDIT"
try:  # the function torch's optimizers read their host-kept step counter through (private)
    from torch.optim.optimizer import _get_value as _step_counter_read
    _STEP_COUNTER_READ = _step_counter_read.__code__
except ImportError:  # a torch that reads it elsewhere: those reads are counted
    _STEP_COUNTER_READ = None
_COUNTED = ((torch.Tensor, "item"), (torch.Tensor, "cpu"), (torch.Tensor, "tolist"),
            (torch.cuda, "synchronize"), (torch.cuda.Event, "synchronize"))


def _name(owner, attr: str) -> str:
    return f"{'Event.' if owner is torch.cuda.Event else 'cuda.' if owner is torch.cuda else 'Tensor.'}{attr}"


@contextlib.contextmanager
def audited(rank: int, device: str = "cpu"):
    """Count the calls meanwhile when DTGEN_SYNC_AUDIT names a folder; a no-op otherwise.
    `device`: the rank's training device (its reads of CPU tensors are not device reads
    unless it trains on the CPU)."""
    folder = os.environ.get(ENV)
    if not folder:
        yield
        return
    counts = {_name(owner, attr): 0 for owner, attr in _COUNTED}
    marks: list[dict] = []  # the counts at each step's end
    saved = []
    for owner, attr in _COUNTED:
        original = getattr(owner, attr)
        saved.append((owner, attr, original))
        setattr(owner, attr, _counting(original, counts, _name(owner, attr), owner is torch.Tensor,
                                       on_host=torch.device(device).type == "cpu"))
    step_done = Metrics.step_done

    def marked(self, *args, **kwargs):
        marks.append(dict(counts))
        return step_done(self, *args, **kwargs)

    Metrics.step_done = marked
    try:
        yield
    finally:
        Metrics.step_done = step_done
        for owner, attr, original in saved:
            setattr(owner, attr, original)
        loop = {k: marks[-1][k] - marks[0][k] for k in counts} if marks else dict.fromkeys(counts, 0)
        path = Path(folder) / f"rank{rank}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"total": counts, "loop": loop, "steps": len(marks)}), encoding="utf-8")


def _counting(original, counts: dict, name: str, of_a_tensor: bool, on_host: bool):
    def counted(*args, **kwargs):
        if not of_a_tensor or _reads_the_device(args[0], on_host):
            counts[name] += 1
        return original(*args, **kwargs)

    return counted


def _reads_the_device(tensor, on_host: bool) -> bool:
    """Whether reading `tensor` on the host would wait for the device (see the docstring)."""
    if not on_host and tensor.device.type == "cpu":
        return False
    return sys._getframe(2).f_code is not _STEP_COUNTER_READ  # 0 here, 1 counted, 2 its caller
