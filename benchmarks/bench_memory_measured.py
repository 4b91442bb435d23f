"""Memory per rank, measured against the model, for every example on this machine.

    python benchmarks/bench_memory_measured.py [--only single,tensor-transformer] [--steps 2] [--keep DIR]

Each example runs (`dtgen run --steps N`); metrics.json's `memory` (runner/memory.py:
the bytes of the tensors each category holds on the first step) is set beside
opentikz_dt.memory.expected_memory (the model, docs/memory.md) rank by rank. Goals:
parameters, gradients and optimizer state exact; activations within 15% at the median
and none over 25%. Examples whose model is a python one, or whose activations the model
leaves out, print "--". On CUDA the allocator's peak is printed too.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from opentikz_dt.memory import expected_memory
from opentikz_dt.spec import load_spec

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
STATES = ("params", "grads", "optimizer")
# Cases beside the examples: an example with strategy keys changed, run as its own row
# (name[key=value]): fsdp-transformer at each ZeRO stage (docs/memory.md), the example
# itself being shard: parameters.
VARIANTS = {"fsdp-transformer": [{"shard": "optimizer"}, {"shard": "gradients", "reshard_after_forward": None}]}


def examples(only: list | None, base: Path) -> list[Path]:
    """The examples (by name, or all), each followed by its VARIANTS, written under `base`."""
    out = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        if only and path.stem not in only:
            continue
        out.append(path)
        for changes in VARIANTS.get(path.stem, ()):
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
            for key, value in changes.items():  # None: the key left out
                if value is None:
                    data["strategy"].pop(key, None)
                else:
                    data["strategy"][key] = value
            label = ",".join(f"{k}={v}" for k, v in changes.items() if v is not None)
            variant = base / f"{path.stem}[{label}].yaml"
            variant.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
            out.append(variant)
    return out


def run(spec: Path, out: Path, steps: int) -> dict | None:
    done = subprocess.run([sys.executable, "-m", "opentikz_dt", "run", str(spec), "--out", str(out),
                           "--steps", str(steps), "--force"], capture_output=True, text=True)
    if done.returncode != 0:
        print(f"# {spec.stem}: run failed: {(done.stderr or done.stdout).strip().splitlines()[-1:]}")
        return None
    return json.loads((out / "metrics.json").read_text())


def rows(spec_path: Path, metrics: dict) -> list:
    """(example, rank id, state ok, measured activations, modelled activations, peak)."""
    expected = expected_memory(load_spec(spec_path))
    out = []
    for rank, measured in sorted((int(r), m) for r, m in (metrics.get("memory") or {}).items()):
        want = expected[rank] if expected is not None and rank < len(expected) else None
        states = None if want is None else all(measured[c] == getattr(want, c) for c in STATES)
        out.append((spec_path.stem, want.id if want else f"r{rank}", states, measured.get("activations"),
                    want.activations if want else None, measured.get("peak"),
                    {c: (measured[c], getattr(want, c) if want else None) for c in STATES}))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated example names")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--keep", type=Path, help="keep the runs in this folder")
    args = parser.parse_args()
    only = [x for x in args.only.split(",") if x]
    base = args.keep or Path(tempfile.mkdtemp(prefix="bench-memory-"))
    base.mkdir(parents=True, exist_ok=True)
    table = []
    for spec in examples(only, base):
        metrics = run(spec, base / spec.stem, args.steps)
        if metrics is not None:
            table += rows(spec, metrics)
    print(f"{'example':<38} {'rank':<5} {'states':<7} {'act. measured':>14} {'act. model':>12} {'error':>8} {'peak':>12}")
    errors, state_misses = [], []
    for example, ident, states, got, want, peak, detail in table:
        error = (want - got) / got if got and want is not None else None
        if error is not None:
            errors.append(abs(error))
        if states is False:
            state_misses.append(f"{example} {ident}: {detail}")
        print(f"{example:<38} {ident:<5} {('exact' if states else '--' if states is None else 'DIFF'):<7} "
              f"{got if got is not None else '--':>14} {want if want is not None else '--':>12} "
              f"{f'{error:+.1%}' if error is not None else '--':>8} {peak if peak is not None else '--':>12}")
    for line in state_misses:
        print("# states differ:", line)
    if errors:
        print(f"{len(table)} ranks; states exact on {sum(r[2] is True for r in table)}, differ on {len(state_misses)}; "
              f"activations on {len(errors)}: median |error| {statistics.median(errors):.1%}, worst {max(errors):.1%} "
              "(goals 15%, 25%)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
