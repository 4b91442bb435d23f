"""What `dtgen predict` prints once it has written the predicted run directory: the
answer, as `dtgen run`'s summary gives a run's, read back from the files it wrote.

A header naming what the numbers come from (the calibration file and the machine it
measured, or the illustrative cost model; a link or device preset with its source), one
row per group of ranks that came out alike (1,024 identical workers are one row, not
1,024), then the global throughput and the interval. Memory per rank is the expected
parameters, gradients and optimizer state, and the activations where the memory model
has them (opentikz_dt.memory); with a `hardware:` device, whether the fullest rank fits
it. A model known only at run time (`python`) has none, and the summary says so. A
datasheet prediction (predict/cluster.py) writes one lane per pipeline stage: the header
says how many ranks those lanes stand for, the tail the model FLOP/s per GPU (the
published rows' count). Units are decimal, as everywhere in dtgen's output: 1 MB = 10^6
bytes.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..memory import expected_memory, spec_fit
from ..spec import load_spec
from ..strategies import plugin


def prediction_summary(run_dir: str | Path) -> str:
    run_dir = Path(run_dir)
    metrics = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
    run = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    spec = load_spec(run_dir / "spec.yaml", data_files=False)
    memory = expected_memory(spec)
    rows = _grouped_rows(run["ranks"], metrics, {m.id: m for m in memory or ()})
    table = _table([("ranks", "ids", "role", "step time", "samples/s", "memory MB")] + rows)
    s = spec.strategy
    method = plugin(s.kind).method_words(s)
    predicted = run["predicted"]
    ranks = f"{run['world_size']} rank(s)"
    if predicted.get("lanes"):  # a datasheet prediction: one lane per pipeline stage
        ranks = (f"{predicted['ranks']:,} ranks as {predicted['lanes']} lane(s) "
                 f"({predicted.get('representatives', 'one per pipeline stage')})")
    head = f"{spec.name}: predicted {method}, {ranks}, {metrics['steps']} steps, from {source_of(predicted)}"
    tail = [f"throughput {metrics['samples_per_s']:,.0f} samples/s" + _interval(metrics)]
    if predicted.get("model_tflops_per_gpu") is not None:
        tail.append(f"{predicted['model_tflops_per_gpu']:,.1f} model TFLOP/s per GPU "
                    "(the published rows' count: Narayanan et al., SC'21, Eq. 3)")
    if predicted.get("caveat"):  # what the published rows say this model misses (predict/cluster.py)
        tail.append(f"caveat: {predicted['caveat']}")
    tail.append(_memory_fact(memory))
    fit = spec_fit(spec)
    if fit is not None:
        tail.append(f"on {spec.hardware.device_preset.short}: {fit.message()}")
    return "\n".join([head, *table, "; ".join(tail)])


def source_of(predicted: dict) -> str:
    """Which calibration or datasheet the numbers come from, in words."""
    if predicted.get("illustrative"):
        said = "the illustrative cost model (no calibration: relative costs, not this machine's)"
    elif predicted.get("measured_compute"):  # a calibration on the hardware's device (cluster.calibrated_compute)
        compute = predicted["measured_compute"]
        said = (f"datasheets and calibration {compute['calibration']} ({predicted['caption']}; the datasheet's "
                f"compute x {compute['scale']:.3f}, as measured at {compute['samples']} sample(s))")
    elif predicted.get("device_probe"):  # rates measured on the hardware's device (predict/device_probe.py)
        probe = predicted["device_probe"]
        said = (f"datasheets and device probe {probe['device_probe']} ({predicted['caption']}; matmuls at "
                f"{predicted['matmul_efficiency']:.1%} of the dense peak, HBM at {predicted['hbm_efficiency']:.1%} "
                "of its datasheet bandwidth)")
    elif predicted.get("source") == "datasheet":
        said = (f"datasheets ({predicted['caption']}; matmuls at {predicted['matmul_efficiency']:.1%} of the "
                f"dense peak, HBM at {predicted['hbm_efficiency']:.1%} of its bandwidth, measured efficiencies)")
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
    """Consecutive ranks of one role with the same numbers as one row (w1..w64). `memory` is
    keyed by worker id: a datasheet prediction's lanes are ranks 0, 1, ... of its run
    directory but stand for w1, w65, ... of the spec."""
    groups: list[dict] = []
    for entry in ranks:
        rank, ident, role = entry["rank"], entry["id"], entry["role"]
        step = metrics["step_time_s"].get(ident)
        rate = metrics["per_worker_samples_per_s"].get(ident)
        held = memory.get(ident)
        values = (role, f"{step * 1000:.1f} ms" if step else "-", f"{rate:,.0f}" if rate else "-",
                  f"{held.total / 1e6:.2f}" if held else "-")
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
    if any(m.activations is not None for m in memory):
        return "memory per rank: expected parameters, gradients, optimizer state and activations (docs/memory.md)"
    return "memory per rank: expected parameters, gradients and optimizer state (activations not predicted)"
