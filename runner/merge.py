"""Parent-side merge of what the ranks left: trace.json, metrics.json, model.pt.

Works on partial output too (a crashed run): torn last lines are skipped, missing
ranks are simply absent.
"""

from __future__ import annotations

import json
from pathlib import Path
from statistics import mean


def _read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _rank_files(directory: Path, suffix: str) -> dict[int, Path]:
    out = {}
    for p in directory.glob(f"rank*{suffix}"):
        num = p.name[4:-len(suffix)]
        if num.isdigit():
            out[int(num)] = p
    return dict(sorted(out.items()))


def merge_trace(run_dir: Path, roles, metadata: dict) -> dict:
    """Concatenate trace/rank<r>.jsonl into the Chrome trace trace.json; returns counts."""
    run_dir = Path(run_dir)
    events, torn = [], 0
    for rank, (role, ident) in enumerate(roles):
        events.append({"ph": "M", "name": "process_name", "pid": rank, "tid": 0, "args": {"name": f"{ident} (rank {rank})"}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": rank, "tid": 0, "args": {"sort_index": rank}})
        events.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": 0, "args": {"name": "compute"}})
        events.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": 1, "args": {"name": "comm"}})
    spans = 0
    for rank, path in _rank_files(run_dir / "trace", ".jsonl").items():
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    event = json.loads(line)
                except ValueError:
                    torn += 1
                    continue
                events.append(event)
                spans += event.get("ph") == "X"
    trace = {"traceEvents": events, "displayTimeUnit": "ms", "metadata": dict(metadata, torn_lines=torn)}
    (run_dir / "trace.json").write_text(json.dumps(trace, separators=(",", ":")), encoding="utf-8")
    return {"spans": spans, "torn_lines": torn}


def _steady_samples(m: dict) -> float:
    """Samples a rank processed after its first step (steps are equal-sized)."""
    done = len(m["step_end"])
    return m["samples"] * (done - 1) / done if done > 1 else 0.0


def _steps_reached(m: dict, run_steps: int) -> int:
    served = [int(v) for v in m.get("global_step", {}).values()]
    if served:
        return max(served) + 1
    return len(m["step_end"]) or run_steps


def merge_metrics(run_dir: Path, roles, steps: int) -> dict:
    run_dir = Path(run_dir)
    per_rank = {r: m for r, p in _rank_files(run_dir / "metrics", ".json").items() if (m := _read_json(p))}
    losses: dict[int, list[float]] = {}
    ends: dict[int, float] = {}
    for m in per_rank.values():
        # An async PS worker's own steps serve global steps (its tickets): file them there.
        serves = {int(k): int(v) for k, v in m.get("global_step", {}).items()}
        for s, v in m["loss"].items():
            losses.setdefault(serves.get(int(s), int(s)), []).append(v)
        for s, t in m["step_end"].items():
            g = serves.get(int(s), int(s))
            ends[g] = max(ends.get(g, t), t)
    last = max(list(losses) + list(ends), default=-1)
    loss = [round(mean(losses[s]), 7) if s in losses else None for s in range(last + 1)]
    wall = [round(ends[s], 6) if s in ends else None for s in range(last + 1)]
    # The first step pays for connection setup and first allocations (often 100x a
    # steady step on gloo), so throughput and step times are steady-state: they start
    # at the end of the first step. `warmup_s` reports what was left out.
    # The window opens when the first step anywhere ends. For synchronous strategies that is
    # step 0's end; an async PS worker's tickets are not in time order (a worker whose first
    # step is slow can serve ticket 0 and end after every other ticket), so take the time.
    opened = min(ends.values(), default=0.0)
    steady = {s: t for s, t in ends.items() if t > opened}
    span = (max(steady.values()) - opened) if steady else 0.0
    stages = [m for m in per_rank.values() if m["role"] == "stage"]
    workers = [m for m in per_rank.values() if m["role"] == "worker"]
    total = max((_steady_samples(m) for m in stages), default=0) if stages else sum(_steady_samples(m) for m in workers)
    per_worker, step_time, own_steps = {}, {}, {}
    for m in workers + stages:
        times = {int(k): v for k, v in m["step_time"].items()}
        own_steps[m["id"]] = len(m["step_end"])
        if times:
            kept = [v for k, v in times.items() if k != min(times)] or list(times.values())
            step_time[m["id"]] = round(mean(kept), 6)
            # Over the run's window, as samples_per_s: the workers' bars add up to it (a worker
            # that stopped early counts as idle for the rest, not at the rate it had while busy).
            per_worker[m["id"]] = round(_steady_samples(m) / span, 2) if span > 0 else 0.0
    starts = [m["first_start"] for m in per_rank.values() if m.get("first_start") is not None]
    warmup = (opened - min(starts)) if ends and starts else 0.0
    metrics = {
        "steps": steps,
        "steps_done": last + 1,
        "loss": loss,
        "wall_s": wall,
        "samples_per_s": round(total / span, 2) if span > 0 else 0.0,
        "step_time_s": step_time,
        "bytes": {str(r): {"sent": m["sent"], "recv": m["recv"]} for r, m in per_rank.items()},
        "staleness": [v for m in per_rank.values() for v in m["staleness"]],
        "per_worker_samples_per_s": per_worker,
        "steps_per_worker": own_steps,
        # steps each rank had completed when its counts (bytes) were last written: an
        # interrupted run's bytes per step divide by these, not by the steps asked for
        # (an async PS worker's: the global steps up to the last one it served, as the run's
        # steps count them; a server's: the run's, as it records no steps of its own)
        "steps_per_rank": {str(r): _steps_reached(m, last + 1) for r, m in per_rank.items()},
        "ranks_missing": [r for r in range(len(roles)) if r not in per_rank],  # no counts at all
        "warmup_s": round(warmup, 6),
        # fp16: steps skipped because their gradients overflowed (every rank holding
        # a part of the model skips the same steps)
        "skipped_steps": sorted({s for m in per_rank.values() for s in m.get("skipped", [])}),
        # bytes per rank on one step, by category (runner/memory.py says how each is measured)
        "memory": {str(r): m["memory"] for r, m in per_rank.items() if m.get("memory") is not None},
    }
    (run_dir / "metrics.json").write_text(json.dumps(metrics, indent=1), encoding="utf-8")
    return metrics


def merge_model(run_dir: Path, order=(), aliases: dict | None = None) -> list[str]:
    """Union of every rank's saved parameters into model.pt (keys in `order` first, in
    that order, then the rest as found); returns the keys. `aliases` ({name: the tied
    parameter's first name}) restores a tied weight's second name (a GPT-2's
    lm_head.weight is transformer.wte.weight) where a strategy saved parameters by
    name, so model.pt loads into the model whatever the strategy."""
    import torch

    run_dir = Path(run_dir)
    state = {}
    for rank, path in _rank_files(run_dir / "model_parts", ".pt").items():
        part = torch.load(path, weights_only=True)
        for k, v in part.items():
            if k in state and not torch.equal(state[k], v):
                raise ValueError(f"model_parts/rank{rank}.pt: {k} differs from another rank's copy")
            state[k] = v
    for alias, name in (aliases or {}).items():
        if alias not in state and name in state:
            state[alias] = state[name]
    if state:
        rank_of = {k: i for i, k in enumerate(order)}
        state = dict(sorted(state.items(), key=lambda kv: rank_of.get(kv[0], len(rank_of))))
        torch.save(state, run_dir / "model.pt")
    return list(state)
