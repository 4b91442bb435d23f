"""What a simulation produces: Chrome trace events per rank, step ends, step times, bytes.

`Recorder` writes events exactly as runner/trace.py does (µs on the run's clock, pid =
rank, tid 0 compute / 1 comm, args with step and id, push flow arrows). With
`record=False` (sweeps) it only keeps the numbers the metrics need, which is what
makes 1,024 workers x 100 steps fast. Must not import torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Result:
    ids: list                                        # rank -> id (w1.., ps..)
    roles: list                                      # rank -> role
    events: dict = field(default_factory=dict)       # rank -> [Chrome events]
    step_end: dict = field(default_factory=dict)     # step -> latest end over workers (µs)
    step_time: dict = field(default_factory=dict)    # worker id -> [µs per step]
    step_done: dict = field(default_factory=dict)    # worker id -> [end µs per step]
    staleness: list = field(default_factory=list)
    bytes: dict = field(default_factory=dict)        # rank -> [sent, recv]
    phases: dict = field(default_factory=dict)       # span name -> total µs over all ranks (every span)
    busy: dict = field(default_factory=dict)         # rank -> µs of compute (tid 0; sweeps too)


class Recorder:
    def __init__(self, ids: list, roles: list, record: bool = True):
        self.result = Result(list(ids), list(roles), bytes={r: [0, 0] for r in range(len(ids))})
        self.record = record
        self.ids = ids

    def span(self, rank: int, name: str, tid: int, t0: float, t1: float, step: int, busy: float | None = None,
             **args) -> float:
        """A span; `busy`: of a compute span, the µs it computes (DDP's backward also waits)."""
        if t1 <= t0:
            return t0
        if tid == 0 and name != "slowdown":  # a straggler's slowdown sleeps: it holds no core
            self.result.busy[rank] = self.result.busy.get(rank, 0.0) + (t1 - t0 if busy is None else busy)
        if not self.record:  # sweeps: only the step times matter
            return t1
        phases = self.result.phases
        phases[name] = phases.get(name, 0.0) + (t1 - t0)
        if self.record:
            full = {"step": step, "id": self.ids[rank]}
            full.update(args)
            self.result.events.setdefault(rank, []).append(
                {"ph": "X", "name": name, "pid": rank, "tid": tid, "ts": round(t0, 3), "dur": round(t1 - t0, 3),
                 "args": full})
        return t1

    def flow(self, rank: int, ph: str, fid: int, tid: int, ts: float) -> None:
        if not self.record:
            return
        event = {"ph": ph, "name": "push", "cat": "push", "id": fid, "pid": rank, "tid": tid, "ts": round(ts, 3)}
        if ph == "f":
            event["bp"] = "e"
        self.result.events.setdefault(rank, []).append(event)

    def flow_id(self, src: int, step: int, dst: int) -> int:
        world = len(self.ids)
        return (step * world + src) * world + dst + 1

    def send(self, src: int, dst: int, nbytes: float) -> None:
        b = self.result.bytes
        b[src][0] += int(nbytes)
        b[dst][1] += int(nbytes)

    def moved(self, rank: int, sent: float, recv: float) -> None:
        b = self.result.bytes[rank]
        b[0] += int(sent)
        b[1] += int(recv)

    def duty(self) -> float:
        """The share of the run's time a computing rank computes (busy over the last step's end)."""
        r = self.result
        end = max(r.step_end.values(), default=0.0)
        return min(1.0, sum(r.busy.values()) / (len(r.busy) * end)) if r.busy and end > 0 else 1.0

    def step(self, worker: str, step: int, t0: float, t1: float) -> None:
        """A worker (or stage) finished `step`, which it started at t0."""
        self.result.step_time.setdefault(worker, []).append(t1 - t0)
        self.result.step_done.setdefault(worker, []).append(t1)
        ends = self.result.step_end
        ends[step] = max(ends.get(step, t1), t1)
