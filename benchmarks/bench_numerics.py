"""Precision and optimizers on the CPU: every synchronous strategy against `single`.

    OMP_NUM_THREADS=1 python benchmarks/bench_numerics.py [--steps 6] [--trainings adamw-clip-cosine,bf16-sgd-clip-linear]

Runs each case of runner/testing.py SYNC_CASES (all-reduce native, ring, tree and
hierarchical; sync parameter server with 1 and 2 shards; central storage; pipeline
GPipe and 1F1B) with each training section (runner/testing.py NUMERICS_TRAININGS, the
ones tests/test_runner_numerics.py checks, plus `bf16-adamw`: AdamW in bf16, which the
test leaves out, to show why), and `single` on the global batch with the same section.
Prints, per case and section, the largest |parameter - single's parameter| over the
whole model, the largest parameter (for scale), and the largest relative difference of
a step's mean loss. The same small MLP, data, seed and steps as the numerics test; the
runs are real (gloo on the CPU) and go to a temporary folder removed at the end.
"""

from __future__ import annotations

import argparse
import copy
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from opentikz_dt.runner.testing import (  # noqa: E402
    NUMERICS_TRAININGS, SYNC_CASES, deep_update, run_small, single_reference, small_spec_data)

# AdamW in bf16, as the fp32 AdamW section: not in the test (see NUMERICS_TRAININGS' comment).
EXTRA = {"bf16-adamw": deep_update(copy.deepcopy(NUMERICS_TRAININGS["adamw-clip-cosine"]), {"precision": "bf16"})}
DEFAULT = ("adamw-clip-cosine", "bf16-sgd-clip-linear", "bf16-adamw")


def compare(kind: str, overrides: dict, dp: int, training: dict, steps: int, root: Path) -> tuple:
    """(max |param - single's|, max |param|, relative loss difference) of one case."""
    over = deep_update(copy.deepcopy(overrides), {"training": {**copy.deepcopy(training), "steps": steps}})
    run = run_small(small_spec_data(kind, **over), root)
    ref = single_reference(dp, steps=run.metrics["steps"], root=root, training=training)
    got = torch.load(run.run_dir / "model.pt")
    want = torch.load(ref.run_dir / "model.pt")
    diff = max((got[n].float() - want[n].float()).abs().max().item() for n in want)
    scale = max(want[n].float().abs().max().item() for n in want)
    # metrics.json's loss curve: one mean loss per step; the worst step's relative difference
    loss = max(abs(a - b) / abs(b) for a, b in zip(run.metrics["loss"], ref.metrics["loss"]))
    return diff, scale, loss


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--trainings", default=",".join(DEFAULT),
                        help=f"comma-separated, of {', '.join({**NUMERICS_TRAININGS, **EXTRA})}")
    parser.add_argument("--cases", default=",".join(SYNC_CASES), help="comma-separated, of SYNC_CASES")
    args = parser.parse_args(argv)
    sections = {**NUMERICS_TRAININGS, **EXTRA}
    trainings = [t for t in args.trainings.split(",") if t]
    cases = [c for c in args.cases.split(",") if c]
    unknown = [t for t in trainings if t not in sections] + [c for c in cases if c not in SYNC_CASES]
    if unknown:
        parser.error(f"unknown: {', '.join(unknown)}")
    print(f"torch {torch.__version__}, CPU, gloo; {args.steps} steps; max |param - single| (largest |param|), "
          "largest relative difference of a step's mean loss")
    print()
    print("| strategy | workers | " + " | ".join(trainings) + " |")
    print("|---|---:|" + "---:|" * len(trainings))
    with tempfile.TemporaryDirectory(prefix="dtgen-bench-numerics-") as tmp:
        for name in cases:
            kind, overrides, dp = SYNC_CASES[name]
            workers = overrides["topology"]["workers"]["count"]
            cells = []
            for training in trainings:
                diff, scale, loss = compare(kind, overrides, dp, sections[training], args.steps, Path(tmp))
                cells.append(f"{diff:.1e} ({scale:.2f}); loss {loss:.1e}")
            print(f"| {name} | {workers} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
