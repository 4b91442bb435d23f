"""Write a simulation Result as a run directory (docs/dev/runner-interface.md), so that
`dtgen figure` and `dtgen compare` draw a prediction exactly as a measurement.

A predicted run says so: run.json has `"predicted": {...}` (the calibration and
assumptions) and trace.json's metadata `"predicted": true`. Metrics are computed as
runner/merge.py does (steady state: the first step left out). A prediction has no
loss (the simulator does not train); synthetic runs for tests pass one.
`crash_at_ms` cuts the streams as a crashed run leaves them (tests of crashed runs).
Must not import torch.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import tempfile
from pathlib import Path

import yaml

from ..errors import DtgenError
from ..measured.trace import trace_from_events
from ..strategies import plugin
from .engine import Result


def is_predicted_run(path: Path) -> bool:
    """A folder a prediction wrote (safe to replace), or an empty one."""
    if path.is_dir() and not any(path.iterdir()):
        return True
    try:
        info = json.loads((path / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(info, dict) and (info.get("predicted") is not None or info.get("dtgen") == "synthetic")


def metrics_of(result: Result, spec, steps: int, loss: list | None = None) -> dict:
    ends = {s: t / 1e6 for s, t in result.step_end.items() if s < steps}
    first = min(ends, default=0)
    steady = [t for s, t in ends.items() if s > first]
    span = (max(steady) - ends[first]) if steady else 0.0
    # samples per step: every worker's slice of the batch, or one batch through a pipeline's stages
    dp = plugin(spec.strategy.kind).data_parallel_width(spec)
    batch = spec.training.batch_size
    done = len(ends)
    total = batch * dp * (done - 1) if done > 1 else 0
    step_time, per_worker, own_steps = {}, {}, {}
    for w, times in result.step_time.items():
        kept = times[1:steps] or times[:1]
        step_time[w] = round(statistics.fmean(kept) / 1e6, 6) if kept else 0.0
        # as merge.py: a worker's steady samples over the run's window, so the bars add up to samples_per_s
        own = [t for t in result.step_done[w] if t / 1e6 <= max(steady, default=0.0)] or result.step_done[w][:1]
        own_steps[w] = len(own)
        per_worker[w] = round(batch * (len(own) - 1) / span, 2) if span > 0 else 0.0
    return {"steps": steps, "steps_done": done, "loss": list(loss or []),
            "wall_s": [round(ends[s], 6) for s in sorted(ends)],
            "samples_per_s": round(total / span, 2) if span > 0 else 0.0, "step_time_s": step_time,
            "bytes": {str(r): {"sent": b[0], "recv": b[1]} for r, b in result.bytes.items()},
            "staleness": list(result.staleness), "per_worker_samples_per_s": per_worker,
            "steps_per_worker": own_steps, "warmup_s": round(ends.get(first, 0.0), 6), "skipped_steps": []}


def _trace_events(result: Result, roles) -> list:
    meta = [{"ph": "M", "name": "process_name", "pid": r, "tid": 0, "args": {"name": f"{i} (rank {r})"}}
            for r, (_, i) in enumerate(roles)]
    meta += [{"ph": "M", "name": "thread_name", "pid": r, "tid": t, "args": {"name": n}}
             for r in range(len(roles)) for t, n in ((0, "compute"), (1, "comm"))]
    return meta


def write_run_dir(out: str | Path, spec, result: Result, steps: int, predicted: dict | None = None,
                  loss: list | None = None, crash_at_ms: float | None = None, crash_rank: int = 0,
                  merged_on_crash: bool = False, dtgen: str = "predicted", extra_metrics: dict | None = None) -> Path:
    """Write the run directory atomically (a temporary sibling renamed into place);
    `extra_metrics` (a prediction's interval) joins metrics.json."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        _write(tmp, spec, result, steps, predicted, loss, crash_at_ms, crash_rank, merged_on_crash, dtgen,
               extra_metrics)
        if out.exists():
            if not is_predicted_run(out):
                raise DtgenError(f"{out}: exists and is not a predicted run; choose another folder")
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _write(out, spec, result, steps, predicted, loss, crash_at_ms, crash_rank, merged_on_crash, dtgen,
           extra_metrics=None) -> None:
    roles = list(zip(result.roles, result.ids))
    events = {r: sorted(evs, key=lambda e: e["ts"]) for r, evs in result.events.items()}
    end_us = max(result.step_end.values(), default=0.0)
    failed = crash_at_ms is not None
    metrics = metrics_of(result, spec, steps, loss)
    if failed:
        cut = crash_at_ms * 1000
        events = {r: [e for e in evs if e["ts"] + e.get("dur", 0) <= cut] for r, evs in events.items()}
        done = sum(1 for t in result.step_end.values() if t <= cut)
        metrics = metrics_of(result, spec, done, (loss or [])[:done])
        metrics["steps"] = steps
        end_us = cut
    (out / "trace").mkdir(parents=True)
    (out / "logs").mkdir()
    (out / "spec.yaml").write_text(yaml.safe_dump(spec.data, sort_keys=False), encoding="utf-8")
    # every event is serialised once: the same text goes to rank<r>.jsonl and trace.json
    encode = json.JSONEncoder(separators=(",", ":")).encode
    lines = {r: [encode(e) for e in evs] for r, evs in events.items()}
    for rank in range(len(roles)):
        text = "".join(line + "\n" for line in lines.get(rank, []))
        if failed and rank == crash_rank:
            text += json.dumps({"ph": "X", "name": "forward", "pid": rank, "tid": 0, "ts": 1.0})[:25]
        (out / "trace" / f"rank{rank}.jsonl").write_text(text, encoding="utf-8")
        (out / "logs" / f"rank{rank}.log").write_text(f"{dtgen} rank {rank}\n", encoding="utf-8")
    # a datasheet prediction is of the GPUs its `hardware:` names (NCCL between them); any other
    # of the CPU processes the calibration measured
    gpus = (predicted or {}).get("source") == "datasheet"
    device, backend = ("cuda", "nccl") if gpus else ("cpu", "gloo")
    run = {"dtgen": dtgen, "torch": "none",
           "backend": backend if gpus or spec.runtime.backend == "auto" else spec.runtime.backend,
           "device": device, "world_size": len(roles),
           "start": "2026-01-01T00:00:00Z", "end": "2026-01-01T00:00:%02dZ" % min(59, int(end_us / 1e6)),
           "status": "failed" if failed else "ok",
           "failure": ({"rank": crash_rank, "role": roles[crash_rank][0], "id": roles[crash_rank][1],
                        "exit_code": 1, "log": f"logs/rank{crash_rank}.log"} if failed else None),
           "ranks": [{"rank": r, "role": role, "id": i, "host": "localhost", "pid": 1000 + r, "device": device,
                      "backend": backend, "exit_status": (1 if failed and r == crash_rank else 0)}
                     for r, (role, i) in enumerate(roles)]}
    if predicted is not None:
        run["predicted"] = predicted
    (out / "run.json").write_text(json.dumps(run, indent=1), encoding="utf-8")
    metrics.update(extra_metrics or {})
    (out / "metrics.json").write_text(json.dumps(metrics), encoding="utf-8")
    if failed and not merged_on_crash:
        return
    order = sorted((e["ts"], r, i) for r, evs in events.items() for i, e in enumerate(evs))
    metadata = _metadata(spec, predicted, failed)
    head = [encode(e) for e in _trace_events(result, roles)]
    with open(out / "trace.json", "w", encoding="utf-8") as handle:
        handle.write('{"traceEvents":[')
        handle.write(",".join(head + [lines[r][i] for _, r, i in order]))
        handle.write('],"displayTimeUnit":"ms","metadata":' + encode(metadata) + "}")


def _metadata(spec, predicted: dict | None, failed: bool) -> dict:
    """trace.json's metadata of a simulated run."""
    metadata = {"spec": spec.name, "strategy": spec.strategy.kind, "sync": spec.strategy.sync,
                "ended_early": failed}
    if predicted is not None:
        metadata["predicted"] = True
        if predicted.get("lane_stages"):  # one representative rank per stage: the figures name it so
            metadata["lane_stages"] = predicted["lane_stages"]
            metadata["ranks_per_lane"] = predicted["ranks"] // predicted["lanes"]
    return metadata


def result_trace(spec, result: Result, predicted: dict):
    """The measured.trace.Trace a run directory written from `result` would load as, without
    writing it (the expected timeline draws it: a folder of one file per rank costs seconds
    at a thousand ranks)."""
    roles = list(zip(result.roles, result.ids))
    events = sorted((e for evs in result.events.values() for e in evs), key=lambda e: e["ts"])
    return trace_from_events(_trace_events(result, roles) + events, _metadata(spec, predicted, False),
                             f"{spec.name} (simulated)")
