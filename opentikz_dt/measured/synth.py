"""Synthetic run directories that follow docs/dev/runner-interface.md exactly.

For tests and benchmarks of the measured figures without launching torch: a small
discrete-event simulation of sync / async parameter server, ring all-reduce and a
1F1B / GPipe pipeline writes spec.yaml, run.json, metrics.json, trace.json and the
per-rank trace/rank<r>.jsonl. `crash_at_ms` cuts every rank's stream at that time,
tears the last line of the failing rank and leaves trace.json out (or marks it
`ended_early`), as a crashed run does. Must not import torch.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ..spec import Spec, spec_from_data

KINDS = ("ps-sync", "ps-async", "allreduce-ring", "pipeline-1f1b", "pipeline-gpipe")
PARAM_BYTES = 88_104  # the example MLP 32-128-128-10 in float32


def spec_data(kind: str, workers: int = 3, steps: int = 60, microbatches: int = 4,
              slowdown: dict | None = None) -> dict:
    """A spec (plain data, before defaults) for one synthetic kind."""
    topology: dict = {"workers": {"count": workers}}
    if slowdown:
        topology["workers"]["slowdown"] = dict(slowdown)
    if kind.startswith("ps-"):
        topology["servers"] = {"count": 1}
        strategy = {"kind": "parameter-server", "sync": kind[3:]}
    elif kind == "allreduce-ring":
        strategy = {"kind": "allreduce", "algorithm": "ring"}
    elif kind.startswith("pipeline-"):
        strategy = {"kind": "pipeline", "microbatches": microbatches, "schedule": kind[9:]}
    else:
        raise ValueError(f"unknown synthetic kind {kind!r} (one of {', '.join(KINDS)})")
    return {"name": f"synth-{kind}", "topology": topology, "strategy": strategy,
            "training": {"steps": steps}}


@dataclass
class _Recorder:
    """Collects Chrome events per rank, as runner/trace.py writes them."""

    ids: list
    events: dict = field(default_factory=dict)

    def span(self, rank, name, tid, t0, t1, step, **args):
        full = {"step": step, "id": self.ids[rank]}
        full.update(args)
        self.events.setdefault(rank, []).append(
            {"ph": "X", "name": name, "pid": rank, "tid": tid, "ts": round(t0, 3),
             "dur": round(t1 - t0, 3), "args": full})

    def flow(self, rank, ph, fid, tid, ts):
        event = {"ph": ph, "name": "push", "cat": "push", "id": fid, "pid": rank, "tid": tid, "ts": round(ts, 3)}
        if ph == "f":
            event["bp"] = "e"
        self.events.setdefault(rank, []).append(event)


class _Sim:
    def __init__(self, spec: Spec, seed: int):
        self.spec = spec
        self.rng = random.Random(seed)
        self.workers = spec.topology.workers.count
        self.ids = list(spec.topology.workers.ids)
        if spec.strategy.kind == "parameter-server":
            self.ids += list(spec.topology.servers.ids)
        self.rec = _Recorder(self.ids)
        self.step_end: dict[int, float] = {}  # step -> time the step finished (µs)
        self.step_time: dict[str, list] = {w: [] for w in spec.topology.workers.ids}
        self.staleness: list[int] = []
        self.bytes = {r: [0, 0] for r in range(len(self.ids))}

    def dur(self, mean: float, step: int) -> float:
        warm = 4.0 if step == 0 else 1.0
        return mean * warm * self.rng.uniform(0.85, 1.25)

    def slow(self, rank: int) -> float:
        return self.spec.topology.workers.slowdown_of(self.ids[rank])

    def flow_id(self, src: int, step: int, dst: int) -> int:
        world = len(self.ids)
        return (step * world + src) * world + dst + 1

    def compute(self, rank: int, step: int, t: float) -> float:
        """forward, backward and the injected straggler sleep; returns the end time."""
        f = self.dur(1800, step)
        b = self.dur(3200, step)
        self.rec.span(rank, "forward", 0, t, t + f, step)
        self.rec.span(rank, "backward", 0, t + f, t + f + b, step)
        t += f + b
        if self.slow(rank) > 1:
            extra = (self.slow(rank) - 1) * (f + b)
            self.rec.span(rank, "slowdown", 0, t, t + extra, step)
            t += extra
        return t

    # --- parameter server -------------------------------------------------------------
    def ps_sync(self, steps: int) -> None:
        n, ps, t = self.workers, self.workers, 0.0
        server_free = 0.0
        for step in range(steps):
            push_end = []
            for k in range(n):
                t0 = t + self.rng.uniform(0, 80)
                f = self.dur(500, step)
                self.rec.span(k, "fetch", 1, t0, t0 + f, step)
                t1 = self.compute(k, step, t0 + f)
                p = self.dur(550, step)
                self.rec.span(k, "push", 1, t1, t1 + p, step)
                self.rec.flow(k, "s", self.flow_id(k, step, ps), 1, max(t1, t1 + p - 1))
                push_end.append((t0, t1 + p))
                self.bytes[k][0] += PARAM_BYTES
                self.bytes[k][1] += PARAM_BYTES
            ready = max(e for _, e in push_end)
            if ready > server_free:
                self.rec.span(ps, "wait", 1, server_free, ready, step)
            u = self.dur(700, step)
            self.rec.span(ps, "update", 0, ready, ready + u, step, worker="all", version=step + 1, staleness=0)
            for k in range(n):
                self.rec.flow(ps, "f", self.flow_id(k, step, ps), 0, ready + 1)
            server_free = ready + u
            for k, (t0, end) in enumerate(push_end):
                self.rec.span(k, "wait", 1, end, server_free, step)
                self.step_time[self.ids[k]].append(server_free - t0)
            self.bytes[ps][0] += n * PARAM_BYTES
            self.bytes[ps][1] += n * PARAM_BYTES
            self.step_end[step] = server_free
            t = server_free + 20

    def ps_async(self, steps: int) -> None:
        n, ps = self.workers, self.workers
        start = [self.rng.uniform(0, 200) for _ in range(n)]
        done = [0] * n
        fetched_version = [0] * n
        version, server_free = 0, 0.0
        pending = {}
        while min(done) < steps:
            for k in range(n):
                if k not in pending and done[k] < steps:
                    step = done[k]
                    t0 = start[k]
                    f = self.dur(500, step)
                    self.rec.span(k, "fetch", 1, t0, t0 + f, step)
                    fetched_version[k] = version
                    t1 = self.compute(k, step, t0 + f)
                    p = self.dur(550, step)
                    self.rec.span(k, "push", 1, t1, t1 + p, step)
                    self.rec.flow(k, "s", self.flow_id(k, step, ps), 1, t1 + p - 1)
                    pending[k] = (t0, t1 + p, step)
            k = min(pending, key=lambda w: pending[w][1])
            t0, arrive, step = pending.pop(k)
            begin = max(arrive, server_free)
            if begin > server_free + 1:
                self.rec.span(ps, "wait", 1, server_free, begin, step)
            u = self.dur(600, step)
            stale = version - fetched_version[k]
            version += 1
            self.rec.span(ps, "update", 0, begin, begin + u, step, worker=self.ids[k], version=version,
                          staleness=stale)
            self.rec.flow(ps, "f", self.flow_id(k, step, ps), 0, begin + 1)
            self.staleness.append(stale)
            server_free = begin + u
            if begin > arrive + 1:
                self.rec.span(k, "wait", 1, arrive, begin, step)
            self.step_time[self.ids[k]].append(server_free - t0)
            for r in (k,):
                self.bytes[r][0] += PARAM_BYTES
                self.bytes[r][1] += PARAM_BYTES
            self.bytes[ps][0] += PARAM_BYTES
            self.bytes[ps][1] += PARAM_BYTES
            self.step_end[step] = max(self.step_end.get(step, 0.0), server_free)
            start[k] = server_free + 15
            done[k] += 1

    # --- ring all-reduce ------------------------------------------------------------------
    def allreduce_ring(self, steps: int) -> None:
        n, t = self.workers, 0.0
        chunk_bytes = PARAM_BYTES // n
        for step in range(steps):
            starts = [t + self.rng.uniform(0, 60) for _ in range(n)]
            ready = [self.compute(k, step, starts[k]) for k in range(n)]
            hop = max(ready)
            for k in range(n):
                if hop > ready[k] + 1:
                    self.rec.span(k, "wait", 1, ready[k], hop, step)
            for phase in ("reduce-scatter", "all-gather"):
                for chunk in range(n - 1):
                    c = self.dur(260, step)
                    for k in range(n):
                        self.rec.span(k, "allreduce", 1, hop, hop + c * self.rng.uniform(0.9, 1.0), step,
                                      algorithm="ring", phase=phase, chunk=chunk)
                        self.bytes[k][0] += chunk_bytes
                        self.bytes[k][1] += chunk_bytes
                    hop += c
            end = hop
            for k in range(n):
                o = self.dur(300, step)
                self.rec.span(k, "optimizer", 0, hop, hop + o, step)
                end = max(end, hop + o)
                self.step_time[self.ids[k]].append(hop + o - starts[k])
            self.step_end[step] = end
            t = end + 20

    # --- pipeline -------------------------------------------------------------------------
    def pipeline(self, steps: int) -> None:
        p, m = self.workers, self.spec.strategy.microbatches
        gpipe = self.spec.strategy.schedule == "gpipe"
        act_bytes = 4 * 128 * self.spec.training.batch_size // m
        t = 0.0
        for step in range(steps):
            orders = []
            for s in range(p):
                if gpipe:
                    ops = [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
                else:
                    warm = min(p - s - 1, m)
                    ops = [("F", i) for i in range(warm)]
                    nf, nb = warm, 0
                    while nf < m:
                        ops += [("F", nf), ("B", nb)]
                        nf += 1
                        nb += 1
                    ops += [("B", i) for i in range(nb, m)]
                orders.append(ops)
            end: dict = {}
            free = [t] * p
            pos = [0] * p
            comm = self.dur(120, step)
            while any(pos[s] < len(orders[s]) for s in range(p)):
                progressed = False
                for s in range(p):
                    if pos[s] >= len(orders[s]):
                        continue
                    op, mb = orders[s][pos[s]]
                    if op == "F":
                        dep = end.get(("F", s - 1, mb)) if s > 0 else t
                    else:
                        dep = end.get(("B", s + 1, mb)) if s < p - 1 else end.get(("F", s, mb))
                    if dep is None:
                        continue
                    ready = dep + (comm if (op == "F" and s > 0) or (op == "B" and s < p - 1) else 0)
                    begin = max(free[s], ready)
                    d = self.dur(900 if op == "F" else 1700, step) * self.slow(s)
                    name = "forward" if op == "F" else "backward"
                    self.rec.span(s, name, 0, begin, begin + d, step, mb=mb, stage=s + 1)
                    end[(op, s, mb)] = begin + d
                    free[s] = begin + d
                    pos[s] += 1
                    progressed = True
                    peer = s + 1 if op == "F" else s - 1
                    if 0 <= peer < p:
                        self.rec.span(s, "send", 1, begin + d, begin + d + comm, step, mb=mb)
                        self.rec.span(peer, "recv", 1, begin + d, begin + d + comm, step, mb=mb)
                        self.bytes[s][0] += act_bytes
                        self.bytes[peer][1] += act_bytes
                if not progressed:
                    raise RuntimeError("pipeline simulation deadlocked")
            finish = 0.0
            for s in range(p):
                o = self.dur(200, step)
                self.rec.span(s, "optimizer", 0, free[s], free[s] + o, step)
                finish = max(finish, free[s] + o)
            for s in range(p):
                self.step_time[self.ids[s]].append(finish - t)
            self.step_end[step] = finish
            t = finish + 30


def _metrics(sim: _Sim, spec: Spec, steps_done: int, end_us: float) -> dict:
    rng = random.Random(7)
    steps = sorted(s for s in sim.step_end if s < steps_done)
    loss = [round(2.3 * math.exp(-s / 18) + 0.15 + rng.uniform(-0.03, 0.03), 5) for s in steps]
    wall = [round(sim.step_end[s] / 1e6, 6) for s in steps]
    dp = 1 if spec.strategy.kind == "pipeline" else spec.topology.workers.count
    samples = spec.training.batch_size * dp * len(steps)
    total_s = max(end_us / 1e6, 1e-9)
    step_time = {w: (sum(v) / len(v) / 1e6 if v else 0.0) for w, v in sim.step_time.items()}
    per_worker = {w: (spec.training.batch_size / t if t else 0.0) for w, t in step_time.items()}
    return {"steps": len(steps), "loss": loss, "wall_s": wall, "samples_per_s": samples / total_s,
            "step_time_s": step_time, "bytes": {str(r): {"sent": b[0], "recv": b[1]} for r, b in sim.bytes.items()},
            "staleness": list(sim.staleness), "per_worker_samples_per_s": per_worker}


def write_synthetic_run(out: str | Path, kind: str = "ps-sync", workers: int = 3, steps: int = 20,
                        microbatches: int = 4, slowdown: dict | None = None, seed: int = 0,
                        crash_at_ms: float | None = None, crash_rank: int = 0,
                        merged_on_crash: bool = False) -> Path:
    """Write a run directory for a synthetic run of `kind`; returns its path."""
    out = Path(out)
    spec = spec_from_data(spec_data(kind, workers, steps, microbatches, slowdown), name=f"synth-{kind}")
    sim = _Sim(spec, seed)
    if kind == "ps-sync":
        sim.ps_sync(steps)
    elif kind == "ps-async":
        sim.ps_async(steps)
    elif kind == "allreduce-ring":
        sim.allreduce_ring(steps)
    else:
        sim.pipeline(steps)
    events = {r: sorted(evs, key=lambda e: e["ts"]) for r, evs in sim.rec.events.items()}
    end_us = max(sim.step_end.values())
    steps_done = steps
    if crash_at_ms is not None:
        cut = crash_at_ms * 1000
        events = {r: [e for e in evs if e["ts"] + e.get("dur", 0) <= cut] for r, evs in events.items()}
        steps_done = sum(1 for e in sim.step_end.values() if e <= cut)
        end_us = cut
    (out / "trace").mkdir(parents=True, exist_ok=True)
    (out / "logs").mkdir(exist_ok=True)
    (out / "spec.yaml").write_text(yaml.safe_dump(spec.data, sort_keys=False), encoding="utf-8")
    for rank in range(len(sim.ids)):
        text = "".join(json.dumps(e, separators=(",", ":")) + "\n" for e in events.get(rank, []))
        if crash_at_ms is not None and rank == crash_rank:
            text += json.dumps({"ph": "X", "name": "forward", "pid": rank, "tid": 0, "ts": 1.0})[:25]
        (out / "trace" / f"rank{rank}.jsonl").write_text(text, encoding="utf-8")
        (out / "logs" / f"rank{rank}.log").write_text(f"synthetic rank {rank}\n", encoding="utf-8")
    roles = [("worker" if spec.strategy.kind != "pipeline" else "stage", i) for i in spec.topology.workers.ids]
    if spec.strategy.kind == "parameter-server":
        roles += [("server", i) for i in spec.topology.servers.ids]
    failed = crash_at_ms is not None
    run = {"dtgen": "synthetic", "torch": "none", "backend": "gloo", "device": "cpu", "world_size": len(roles),
           "start": "2026-11-21T00:00:00Z", "end": "2026-11-21T00:00:%02dZ" % min(59, int(end_us / 1e6)),
           "status": "failed" if failed else "ok",
           "failure": ({"rank": crash_rank, "role": roles[crash_rank][0], "id": roles[crash_rank][1],
                        "exit_code": 1, "log": f"logs/rank{crash_rank}.log"} if failed else None),
           "ranks": [{"rank": r, "role": role, "id": i, "host": "localhost", "pid": 1000 + r, "device": "cpu",
                      "backend": "gloo", "exit_status": (1 if failed and r == crash_rank else 0)}
                     for r, (role, i) in enumerate(roles)]}
    (out / "run.json").write_text(json.dumps(run, indent=1), encoding="utf-8")
    (out / "metrics.json").write_text(json.dumps(_metrics(sim, spec, steps_done, end_us)), encoding="utf-8")
    if failed and not merged_on_crash:
        return out
    meta = [{"ph": "M", "name": "process_name", "pid": r, "tid": 0, "args": {"name": f"{i} (rank {r})"}}
            for r, (_, i) in enumerate(roles)]
    meta += [{"ph": "M", "name": "thread_name", "pid": r, "tid": t, "args": {"name": n}}
             for r in range(len(roles)) for t, n in ((0, "compute"), (1, "comm"))]
    merged = sorted((e for evs in events.values() for e in evs), key=lambda e: e["ts"])
    trace = {"traceEvents": meta + merged, "displayTimeUnit": "ms",
             "metadata": {"spec": spec.name, "strategy": spec.strategy.kind, "sync": spec.strategy.sync,
                          "ended_early": failed}}
    with open(out / "trace.json", "w", encoding="utf-8") as handle:
        json.dump(trace, handle, separators=(",", ":"))
    return out


def main(argv=None) -> None:
    """python -m opentikz_dt.measured.synth OUT [KIND] [--steps N] [--workers N] [--crash-at-ms T]"""
    import argparse

    parser = argparse.ArgumentParser(description="Write a synthetic dtgen run directory (for tests and benchmarks).")
    parser.add_argument("out")
    parser.add_argument("kind", nargs="?", default="ps-sync", choices=KINDS)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--straggler", default=None, help="worker id to slow down 2x, e.g. w3")
    parser.add_argument("--crash-at-ms", type=float, default=None)
    args = parser.parse_args(argv)
    path = write_synthetic_run(args.out, args.kind, args.workers, args.steps,
                               slowdown={args.straggler: 2.0} if args.straggler else None,
                               crash_at_ms=args.crash_at_ms)
    print(path)


if __name__ == "__main__":
    main()
