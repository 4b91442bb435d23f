"""What `dtgen predict` prints once it has written the predicted run directory: the
answer, as `dtgen run`'s summary gives a run's, read back from the files it wrote.

A header naming what the numbers come from (the calibration file and the machine it
measured, or the illustrative cost model; a link or device preset with its source), one
row per group of ranks that came out alike (1,024 identical workers are one row, not
1,024), then the global throughput and the interval. Memory per rank is the expected
parameters, gradients and optimizer state (opentikz_dt.memory; activations are not
predicted); a model known only at run time (`python`) has none, and the summary says so.
Units are decimal, as everywhere in dtgen's output: 1 MB = 10^6 bytes.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..memory import expected_memory
from ..spec import load_spec
from ..strategies import plugin


def prediction_summary(run_dir: str | Path) -> str:
    run_dir = Path(run_dir)
    metrics = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
    run = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    spec = load_spec(run_dir / "spec.yaml", data_files=False)
    memory = expected_memory(spec)
    rows = _grouped_rows(run["ranks"], metrics, {m.rank: m for m in memory or ()})
    table = _table([("ranks", "ids", "role", "step time", "samples/s", "memory MB")] + rows)
    s = spec.strategy
    method = plugin(s.kind).method_words(s)
    head = (f"{spec.name}: predicted {method}, {run['world_size']} rank(s), {metrics['steps']} steps, "
            f"from {source_of(run['predicted'])}")
    tail = [f"throughput {metrics['samples_per_s']:,.0f} samples/s" + _interval(metrics)]
    tail.append(_memory_fact(memory))
    return "\n".join([head, *table, "; ".join(tail)])


def source_of(predicted: dict) -> str:
    """Which calibration or datasheet the numbers come from, in words."""
    if predicted.get("illustrative"):
        said = "the illustrative cost model (no calibration: relative costs, not this machine's)"
    else:
        said = f"calibration {predicted['calibration']} ({predicted.get('source', '?')})"
    link = predicted.get("link_preset")
    if link:
        said += f"; link {link['name']} ({link['source']})"
    device = predicted.get("device_preset")
    if device:
        said += f"; device {device['name']} ({device['source']})"
    return said


def _grouped_rows(ranks: list, metrics: dict, memory: dict) -> list[tuple]:
    """Consecutive ranks of one role with the same numbers as one row (w1..w64)."""
    groups: list[dict] = []
    for entry in ranks:
        rank, ident, role = entry["rank"], entry["id"], entry["role"]
        step = metrics["step_time_s"].get(ident)
        rate = metrics["per_worker_samples_per_s"].get(ident)
        held = memory.get(rank)
        values = (role, f"{step * 1000:.1f} ms" if step else "-", f"{rate:,.0f}" if rate else "-",
                  f"{(held.params + held.grads + held.optimizer) / 1e6:.2f}" if held else "-")
        if groups and groups[-1]["values"] == values and groups[-1]["last"] == rank - 1:
            groups[-1].update(last=rank, last_id=ident)
        else:
            groups.append({"values": values, "first": rank, "last": rank, "first_id": ident, "last_id": ident})
    return [((str(g["first"]), g["first_id"]) if g["first"] == g["last"]
             else (f"{g['first']}-{g['last']}", f"{g['first_id']}..{g['last_id']}")) + g["values"] for g in groups]


def _table(rows: list[tuple]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.rjust(w) if i >= 3 else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
             for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def _interval(metrics: dict) -> str:
    low, high = metrics.get("step_time_interval_s") or (None, None)
    if low is None or high is None or low == high:
        return ""
    return f" (step time {low * 1000:.1f}-{high * 1000:.1f} ms over the calibration's spread)"


def _memory_fact(memory) -> str:
    if memory is None:
        return "memory not predicted (a python model's sizes are known only once the runner builds it)"
    return "memory per rank: expected parameters, gradients and optimizer state (activations not predicted)"
