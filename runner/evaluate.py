"""The held-out evaluation (`training.eval`): the final model.pt on the samples no
training batch saw, in the parent after the merge, so every strategy is evaluated the
same way whatever rank held which part of the model."""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

from .data import Data
from .model import build_model, make_loss


def evaluate(run_dir: Path, spec) -> dict | None:
    """{"samples", "loss"[, "perplexity"]} or {"samples", "error"}; None without training.eval."""
    cfg = spec.data.get("training", {}).get("eval")
    run_dir = Path(run_dir)
    if not cfg or not (run_dir / "model.pt").is_file():
        return None
    launch = json.loads((run_dir / "launch.json").read_text(encoding="utf-8"))
    spec_dir = launch.get("spec_dir")
    out = {"samples": int(cfg["samples"])}
    try:
        with torch.random.fork_rng(devices=[]):
            model = build_model(spec, "cpu", spec_dir)
            model.load_state_dict(torch.load(run_dir / "model.pt", map_location="cpu", weights_only=True))
        data = Data(spec, "cpu", launch.get("dataset_path"), spec_dir)
        loss_fn = make_loss(spec, spec_dir)
        model.eval()
        total, count = 0.0, 0
        with torch.no_grad():
            for x, y in data.eval_batches():
                total += float(loss_fn(model(x), y)) * len(x)  # the loss is a mean over its batch
                count += len(x)
    except (RuntimeError, ValueError, KeyError, OSError) as exc:
        out["error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ''}"
        return out
    out["loss"] = round(total / count, 7)
    if spec.training.model_kind == "transformer":  # per-token cross-entropy: perplexity is its exp
        out["perplexity"] = round(math.exp(min(out["loss"], 700.0)), 4)
    return out
