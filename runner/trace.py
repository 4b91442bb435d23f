"""Per-rank span recording, streamed to trace/rank<r>.jsonl as Chrome trace events.

Events are kept as raw tuples of perf_counter_ns stamps while recording (well under a
microsecond for `add_span`, about 1 µs for a `span` context manager) and serialised at
flush time, which happens at most every `FLUSH_S` seconds from `maybe_flush` (called at
step ends) and on close. Serialisation formats each line from a template and caches the
JSON of repeated `args` (the per-chunk all-reduce spans repeat the same few), which
writes the same bytes as `json.dumps` at a fraction of its cost. Timestamps are already on the run's clock: microseconds since
the run epoch, aligned at the start barrier (see worker.py). The recording is bounded:
only steps with `step % sample_every == 0` and at most `max_events` events per rank.
"""

from __future__ import annotations

import json
import time
from contextlib import nullcontext
from time import perf_counter_ns

TIDS = {"compute": 0, "comm": 1}
FLUSH_S = 0.5
FLUSH_EVENTS = 4096
_NULL = nullcontext()


class _Span:
    __slots__ = ("tracer", "name", "tid", "step", "args", "flow_in", "flow_out", "t0")

    def __init__(self, tracer, name, tid, step, args, flow_in, flow_out):
        self.tracer, self.name, self.tid, self.step = tracer, name, tid, step
        self.args, self.flow_in, self.flow_out = args, flow_in, flow_out

    def __enter__(self):
        self.t0 = perf_counter_ns()
        return self

    def __exit__(self, *exc):
        t1 = perf_counter_ns()
        if self.flow_in is None and self.flow_out is None:  # the common case: one tuple
            self.tracer._record(self.name, TIDS[self.tid], self.t0, t1, self.step, self.args)
        else:
            self.tracer.add_span(self.name, self.t0, t1, self.step, self.tid,
                                 flow_in=self.flow_in, flow_out=self.flow_out, **self.args)
        return False


class Tracer:
    """Records X spans and flow events for one rank."""

    def __init__(self, path, rank: int, ident: str, enabled: bool = True, max_events: int = 200_000,
                 sample_every: int = 1, world_size: int = 1):
        self.path, self.rank, self.ident = path, rank, ident
        self.enabled, self.max_events, self.sample_every = enabled, max_events, max(1, sample_every)
        self.world_size = world_size
        self.base_ns = perf_counter_ns()  # perf counter at the run clock's origin + offset_us
        self.offset_us = 0.0
        self.count = 0
        self.dropped = 0
        self._buf: list[tuple] = []
        self._args_json: dict = {}  # cache: args items -> their JSON text after "id"
        self._last_flush = time.monotonic()
        self._file = None
        # callables(final) that hand over spans resolved after the fact (runner/device_spans.py)
        self.resolvers: list = []

    def set_clock(self, base_ns: int, offset_us: float) -> None:
        """perf_counter_ns() == base_ns corresponds to offset_us on the run's clock."""
        self.base_ns, self.offset_us = base_ns, offset_us

    def now_us(self) -> float:
        return (perf_counter_ns() - self.base_ns) / 1000 + self.offset_us

    def run_us(self, ns: int) -> float:
        """A perf_counter_ns() stamp on the run's clock (µs), as spans' `ts` are written."""
        return round((ns - self.base_ns) / 1000 + self.offset_us, 3)

    def enabled_for(self, step: int) -> bool:
        return self.enabled and step % self.sample_every == 0 and self.count < self.max_events

    def span(self, name: str, tid: str = "compute", step: int = 0, flow_in=None, flow_out=None, **args):
        """Context manager recording an X span (a no-op for unsampled steps)."""
        if not self.enabled_for(step):
            return _NULL
        return _Span(self, name, tid, step, args, flow_in, flow_out)

    def _record(self, name: str, tid: int, t0_ns: int, t1_ns: int, step: int, args: dict) -> None:
        """Hot path: one X span from raw stamps (`tid` already an int); callers checked enabled_for."""
        if self.count >= self.max_events:
            self.dropped += 1
            return
        self._buf.append(("X", name, tid, t0_ns, t1_ns, step, args))
        self.count += 1
        if len(self._buf) >= FLUSH_EVENTS:
            self.flush()

    def add_resolved(self, name: str, tid: int, t0_ns: int, t1_ns: int, step: int, args: dict) -> None:
        """A span whose stamps became known after the fact (a resolver, during flush)."""
        if self.count >= self.max_events:
            self.dropped += 1
            return
        self._buf.append(("X", name, tid, t0_ns, t1_ns, step, args))
        self.count += 1

    def add_span(self, name: str, t0_ns: int, t1_ns: int, step: int, tid: str = "compute",
                 flow_in=None, flow_out=None, **args) -> None:
        """Record a span from explicit perf_counter_ns() stamps (hooks, callbacks)."""
        if not self.enabled_for(step):
            self.dropped += self.enabled
            return
        self._buf.append(("X", name, TIDS[tid], t0_ns, t1_ns, step, args))
        self.count += 1
        if flow_in is not None:
            self._buf.append(("f", flow_in, TIDS[tid], t0_ns + 1000, 0, step, None))
            self.count += 1
        if flow_out is not None:
            self._buf.append(("s", flow_out, TIDS[tid], max(t0_ns, t1_ns - 1000), 0, step, None))
            self.count += 1
        if len(self._buf) >= FLUSH_EVENTS:
            self.flush()

    def flow_id(self, src_rank: int, step: int, dst_rank: int = 0) -> int:
        """Deterministic flow id, identical on sender and receiver."""
        return (step * self.world_size + src_rank) * self.world_size + dst_rank + 1

    def flow_start(self, fid: int, step: int, tid: str = "comm") -> None:
        if self.enabled_for(step):
            self._buf.append(("s", fid, TIDS[tid], perf_counter_ns(), 0, step, None))
            self.count += 1

    def flow_finish(self, fid: int, step: int, tid: str = "compute") -> None:
        if self.enabled_for(step):
            self._buf.append(("f", fid, TIDS[tid], perf_counter_ns(), 0, step, None))
            self.count += 1

    def _line(self, rec) -> str:
        """One event as a JSON line, the same text as json.dumps(self._event(rec), separators=(",", ":"))."""
        ph, name, tid, t0, t1, step, args = rec
        if ph != "X" or type(step) is not int:
            return json.dumps(self._event(rec), separators=(",", ":"))
        try:
            key = (name, tuple(args.items()))
            tail = self._args_json.get(key)
        except TypeError:  # unhashable arg values
            key, tail = None, None
        if tail is None:
            if any(k in ("step", "id") for k in args):
                return json.dumps(self._event(rec), separators=(",", ":"))
            tail = "".join(f",{json.dumps(k)}:{json.dumps(v, separators=(',', ':'))}" for k, v in args.items())
            if key is not None and len(self._args_json) < 4096:
                self._args_json[key] = tail
        ts = round((t0 - self.base_ns) / 1000 + self.offset_us, 3)
        dur = round((t1 - t0) / 1000, 3)
        return (f'{{"ph":"X","name":{self._name_json(name)},"pid":{self.rank},"tid":{tid},"ts":{ts!r},'
                f'"dur":{dur!r},"args":{{"step":{step},"id":{self._ident_json}{tail}}}}}')

    def _name_json(self, name: str) -> str:
        cache = self._args_json
        key = ("\0name", name)
        text = cache.get(key)
        if text is None:
            text = cache[key] = json.dumps(name)
        return text

    def _event(self, rec) -> dict:
        ph, name, tid, t0, t1, step, args = rec
        ts = round((t0 - self.base_ns) / 1000 + self.offset_us, 3)
        if ph == "X":
            full = {"step": step, "id": self.ident}
            full.update(args)
            return {"ph": "X", "name": name, "pid": self.rank, "tid": tid, "ts": ts,
                    "dur": round((t1 - t0) / 1000, 3), "args": full}
        event = {"ph": ph, "name": "push", "cat": "push", "id": name, "pid": self.rank, "tid": tid, "ts": ts}
        if ph == "f":
            event["bp"] = "e"
        return event

    def maybe_flush(self) -> None:
        if (self._buf or self.resolvers) and time.monotonic() - self._last_flush >= FLUSH_S:
            self.flush()

    def flush(self, final: bool = False) -> None:
        self._last_flush = time.monotonic()
        for resolve in self.resolvers:
            resolve(final)
        if not self._buf:
            return
        if self._file is None:
            self._file = open(self.path, "a", encoding="utf-8")
        buf, self._buf = self._buf, []
        self._ident_json = json.dumps(self.ident)
        self._file.write("".join(self._line(r) + "\n" for r in buf))
        self._file.flush()

    def close(self) -> None:
        self.flush(final=True)
        if self._file is not None:
            self._file.close()
            self._file = None
