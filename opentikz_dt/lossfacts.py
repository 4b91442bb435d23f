"""What a loss curve says, defined once for the run summary, its warning and `dtgen compare`.

- final loss: the mean loss of the last FINAL_STEPS steps (fewer when the run is shorter),
  so one noisy step does not decide it;
- diverged: a loss that is not finite (nan, inf), or a final loss above DIVERGED_RATIO x
  the first step's loss (training made it clearly worse than the untrained model).
Must not import torch.
"""

from __future__ import annotations

import math

FINAL_STEPS = 5
DIVERGED_RATIO = 1.5

FINAL_DEFINITION = f"mean loss of the last {FINAL_STEPS} steps"
DIVERGED_DEFINITION = (f"a non-finite loss, or a final loss above {DIVERGED_RATIO:g} $\\times$ the first step's loss")


def _values(loss: list) -> list:
    return [v for v in loss if v is not None]


def final_loss(loss: list) -> float | None:
    values = _values(loss)
    if not values:
        return None
    tail = values[-FINAL_STEPS:]
    return math.fsum(tail) / len(tail)


def divergence(loss: list) -> str | None:
    """Why the curve diverged (one phrase), or None when it did not."""
    values = _values(loss)
    if not values:
        return None
    bad = next((i for i, v in enumerate(values) if not math.isfinite(v)), None)
    if bad is not None:
        return f"the loss became {values[bad]} at step {bad}"
    final, first = final_loss(values), values[0]
    if first > 0 and final > DIVERGED_RATIO * first:
        return f"the final loss {final:.4g} is above {DIVERGED_RATIO:g} x the first step's {first:.4g}"
    return None
