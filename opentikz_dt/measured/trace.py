"""Loading a run's trace into typed spans: trace.json, or the per-rank streams of a crashed run.

Accepts a run directory, a merged Chrome trace (trace.json) or one rank's
trace/rank<r>.jsonl. A merged trace that is cut off is read up to its last complete
event; per-rank streams may end in a torn line. Either way the Trace says it ended
early, so figures can say so. Anything that is not a trace raises one TraceError.
Times stay in the trace's microseconds on the run's clock. Must not import torch.
"""

from __future__ import annotations

import gc
import json
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path
from typing import NamedTuple

from ..errors import TraceError

COMPUTE, COMM = 0, 1
_RANK_FILE = re.compile(r"^rank(\d+)\.jsonl$")
_PROCESS_NAME = re.compile(r"^([a-z]{1,8}[0-9]{0,6}) \(rank (\d+)\)$")
# Rank ids end up in node names and labels: only the interface's shapes (w1, ps, ps2, ...).
_ID = re.compile(r"^[a-z]{1,8}[0-9]{0,6}$")


class Span(NamedTuple):
    """One X event: [start, end) in µs on the run's clock, on rank `rank`, thread `tid`."""

    rank: int
    tid: int
    name: str
    start: float
    end: float
    step: int
    id: str
    args: dict

    @property
    def dur(self) -> float:
        return self.end - self.start


class Flow(NamedTuple):
    """A flow event: `s` at the end of a push, `f` at the start of the update it caused."""

    fid: int
    ph: str
    rank: int
    tid: int
    ts: float


@dataclass
class Trace:
    """The valid X events of a run (raw, so a million of them cost one pass), indexed by rank and step."""

    events: list  # raw Chrome X events (dicts) that passed the field checks
    extents: dict  # (rank, step) -> [first start, last end (µs), span count]
    flows: list = field(default_factory=list)  # raw s/f events; flows_of() types them
    ids: dict = field(default_factory=dict)  # rank -> id (w1, ps, ...)
    metadata: dict = field(default_factory=dict)
    ended_early: bool = False
    note: str = ""  # why it ended early, for the figure
    source: str = ""
    skipped: int = 0  # events that were torn or malformed

    @property
    def ranks(self) -> list[int]:
        return sorted(self.ids)

    @property
    def end_us(self) -> float:
        return max((e[1] for e in self.extents.values()), default=0.0)

    @property
    def start_us(self) -> float:
        return min((e[0] for e in self.extents.values()), default=0.0)

    @property
    def steps(self) -> list[int]:
        return sorted({step for _, step in self.extents})

    @property
    def spans(self) -> list:
        """Every span, sorted by start (materialised on demand: tests and small traces)."""
        return self.spans_between(float("-inf"), float("inf"))

    def spans_between(self, t0: float, t1: float) -> list:
        """Spans overlapping [t0, t1] (µs), sorted by start; zero-length spans at the edges count."""
        out = []
        new = tuple.__new__
        for e in self.events:
            start = e["ts"]
            end = start + e["dur"]
            if end >= t0 and start <= t1:
                a = e["args"]
                out.append(new(Span, (e["pid"], e["tid"], e["name"], start, end, a["step"], a["id"], a)))
        out.sort(key=_START)
        return out


_START = itemgetter(3)


def load_trace(path: str | Path) -> Trace:
    """Read a run directory, trace.json or rank<r>.jsonl; raise TraceError if it is none of those."""
    with _no_gc():
        trace = _load(Path(path))
    # A million event dicts left in the young generations make every later collection
    # rescan them (measured: indexing 1M events took 1.0 s instead of 0.3 s). They hold
    # no cycles, so park them where the cyclic GC does not look; refcounting still frees them.
    gc.freeze()
    return trace


def trace_from_events(events: list, metadata: dict, source: str) -> Trace:
    """A Trace of Chrome trace events already in memory (a simulation's), as load_trace would
    read them from a trace.json."""
    raw = _Raw()
    raw.events, raw.metadata = events, metadata
    return _finish(raw, Path(source))


def _load(path: Path) -> Trace:
    if path.is_dir():
        return _load_run_dir(path)
    if not path.is_file():
        raise TraceError(f"{path}: no such file or run directory")
    if path.suffix == ".jsonl":
        return _finish(_read_jsonl([path]), path)
    return _finish(_read_merged(path), path)


class _Raw:
    def __init__(self):
        self.events: list = []
        self.metadata: dict = {}
        self.skipped = 0
        self.truncated = False


def _load_run_dir(run: Path) -> Trace:
    merged = run / "trace.json"
    streams = sorted((p for p in (run / "trace").glob("rank*.jsonl") if _RANK_FILE.match(p.name)),
                     key=lambda p: int(_RANK_FILE.match(p.name).group(1)))
    if not merged.is_file() and not streams:
        what = "the run recorded no trace (runtime.trace.enabled: false?)" if (run / "run.json").is_file() \
            else "not a run directory"
        raise TraceError(f"{run}: {what}: no trace.json and no trace/rank*.jsonl")
    raw = None
    if merged.is_file():
        try:
            raw = _read_merged(merged, allow_salvage=not streams)
        except TraceError:
            if not streams:
                raise
    if raw is None:  # merged trace missing or cut off: the per-rank streams hold more
        raw = _read_jsonl(streams)
        raw.truncated = True
    trace = _finish(raw, merged if merged.is_file() and not raw.truncated else run / "trace")
    status = _run_status(run)
    if status:
        trace.ended_early = True
        trace.note = status
    elif trace.ended_early and not trace.note:
        trace.note = "run ended early"
    return trace


def _run_status(run: Path) -> str:
    """'run failed: rank 2 (w3) exit 1' from run.json, or '' when it finished or is unknown."""
    try:
        info = json.loads((run / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    if isinstance(info, dict) and info.get("status") == "interrupted":
        return "run interrupted (Ctrl-C)"
    if not isinstance(info, dict) or info.get("status") != "failed":
        return ""
    failure = info.get("failure") or {}
    if isinstance(failure, dict) and type(failure.get("rank")) is int:
        ident = failure.get("id")
        ident = ident if isinstance(ident, str) and _ID.match(ident) else "?"
        code = failure.get("exit_code")
        code = code if type(code) is int else "?"
        return f"run failed: rank {failure['rank']} ({ident}) exited with {code}"
    return "run failed"


def _read_merged(path: Path, allow_salvage: bool = True):
    """A Chrome trace; None when it is cut off and the caller has something better."""
    text = path.read_text(encoding="utf-8", errors="replace")
    raw = _Raw()
    try:
        data = _loads_nogc(text)
    except ValueError as exc:
        if '"traceEvents"' not in text[:4096]:
            raise TraceError(f"{path}: not a trace (not JSON: {exc.msg} at line {exc.lineno} column {exc.colno})") from None
        if not allow_salvage:
            return None
        return _salvage(text, raw)
    if isinstance(data, list):  # the JSON Array Format of Chrome traces
        raw.events = data
    elif isinstance(data, dict) and isinstance(data.get("traceEvents"), list):
        raw.events = data["traceEvents"]
        raw.metadata = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
    else:
        raise TraceError(f"{path}: not a trace (expected a Chrome trace object with a \"traceEvents\" list)")
    return raw


@contextmanager
def _no_gc():
    # A big trace is a million small dicts; the cyclic GC rescanning them while they are
    # built costs about a third of the parse, and none of them can be in a cycle.
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _loads_nogc(text: str):
    with _no_gc():
        return json.loads(text)


def complete_events(text: str, pos: int) -> list:
    """Every complete JSON value of the array whose items start at `pos`, up to its end or
    the first one cut off (a trace whose writer died mid-file)."""
    decoder = json.JSONDecoder()
    events, size = [], len(text)
    while 0 < pos < size:
        while pos < size and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= size or text[pos] == "]":
            break
        try:
            event, pos = decoder.raw_decode(text, pos)
        except ValueError:
            break
        events.append(event)
    return events


def _salvage(text: str, raw: _Raw) -> _Raw:
    """Every complete event of a merged trace whose end is missing."""
    raw.events.extend(complete_events(text, text.index("[", text.index('"traceEvents"')) + 1))
    raw.truncated = True
    return raw


def _read_jsonl(paths: list) -> _Raw:
    raw = _Raw()
    for path in paths:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        with _no_gc():
            good = _parse_lines(lines, raw)
        if lines and not good:
            raise TraceError(f"{path}: not a trace (no line is a JSON trace event)")
    return raw


def _parse_lines(lines: list, raw: _Raw) -> int:
    """Parse one rank's stream into raw.events; a torn last line marks the trace cut off."""
    good = 0
    loads = json.loads
    last = len(lines) - 1
    for index, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            raw.events.append(loads(line))
            good += 1
        except ValueError:
            raw.skipped += 1
            if index == last:
                raw.truncated = True  # the rank died mid-write
    return good


def _finish(raw: _Raw, source: Path) -> Trace:
    """Check each event's fields once, keep the valid X events and index them by (rank, step).

    One tight pass with no per-event objects: a million events cost about 0.3 s here.
    """
    events, flows, ids, extents = [], [], {}, {}
    skipped = raw.skipped
    keep = events.append
    for event in raw.events:
        try:
            ph = event["ph"]
            if ph == "X":
                args = event["args"]
                start = event["ts"]
                end = start + event["dur"]
                key = (event["pid"], args["step"])
                if (type(key[0]) is not int or type(key[1]) is not int or event["tid"] not in (0, 1)
                        or type(event["name"]) is not str or not end >= start or not _ID.match(args["id"])):
                    raise TypeError
                keep(event)
                ext = extents.get(key)
                if ext is None:
                    extents[key] = [start, end, 1]
                    ids.setdefault(key[0], args["id"])
                else:
                    ext[2] += 1
                    if start < ext[0]:
                        ext[0] = start
                    if end > ext[1]:
                        ext[1] = end
            elif ph == "s" or ph == "f":
                flows.append(event)
            elif ph == "M" and event.get("name") == "process_name":
                match = _PROCESS_NAME.match(str(event["args"]["name"]))
                if match:
                    ids.setdefault(int(match.group(2)), match.group(1))
        except (KeyError, TypeError, IndexError, ValueError):
            skipped += 1
    if not events:
        if raw.events and skipped == len(raw.events):
            raise TraceError(f"{source}: not a trace (no event has the Chrome trace fields ph, ts, dur, pid, tid, args)")
        raise TraceError(f"{source}: the trace has no spans (the run recorded nothing)")
    ended = bool(raw.metadata.get("ended_early")) or raw.truncated
    note = "run ended early: trace cut off" if ended else ""
    return Trace(events, extents, flows, ids, raw.metadata, ended, note, str(source), skipped)


def flows_of(trace: Trace) -> list:
    """The valid flow events as Flow tuples (only figures that draw arrows need them)."""
    out = []
    for event in trace.flows:
        try:
            out.append(Flow(event["id"], event["ph"], event["pid"], event["tid"], float(event["ts"])))
        except (KeyError, TypeError, ValueError):
            pass
    return out
