"""One rank's PyTorch profiler (Kineto) trace, reduced to what dtgen's figures draw.

A Kineto trace is one JSON object per rank (`.json`, or `.json.gz` from
tensorboard_trace_handler(use_gzip=True)): `distributedInfo` (backend, rank,
world_size, pg_config: every process group's ranks), `host_name`, and `traceEvents`.
This module reads one file, keeps a few small tuples of it (RankProfile) and drops the
rest, so a trace set is read one rank at a time and memory is bounded by its largest
file, not by the set (benchmarks/bench_profile_read.py measures both).

What it keeps, in µs on the rank's own clock (Kineto's `ts` plus the file's
baseTimeNanoseconds, so ranks that share a clock line up):
- steps: the `ProfilerStep#N` spans (none: the whole window is one step, and the set says so);
- phases: the main thread's top-level spans, classified forward / backward / optimizer /
  collective / send / recv (PHASE_RULES), the time between them left for idle;
- collectives: one per operation, with its kind, group (ranks), bytes as nccl-tests count
  them, and duration: from NCCL's `record_param_comms` metadata (and the `nccl*` kernel's
  time on the GPU where there is one), or from gloo's `gloo:<kind>` spans (bytes from
  their input shapes, recorded with record_shapes=True);
- streams: on a GPU, each CUDA stream's kernels (compute kernels take the phase of the
  CPU span that launched them; NCCL kernels are communication).
A file cut off mid-write (a crashed rank) is read up to its last complete event and
marked partial. Must not import torch.
"""

from __future__ import annotations

import bisect
import gc
import gzip
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from ..errors import TraceError
from .trace import complete_events

STEP = re.compile(r"^ProfilerStep#(\d+)$")
# bytes per element of the dtypes collectives carry (Kineto's names: gloo spans' "Input
# type", record_param_comms' "dtype")
DTYPE_BYTES = {"float": 4, "float32": 4, "Float": 4, "double": 8, "float64": 8, "Double": 8, "half": 2,
               "float16": 2, "Half": 2, "c10::Half": 2, "bfloat16": 2, "BFloat16": 2, "c10::BFloat16": 2,
               "int": 4, "int32": 4, "Int": 4, "long": 8, "int64": 8, "Long": 8, "long int": 8, "short": 2,
               "int16": 2, "char": 1, "signed char": 1, "int8": 1, "unsigned char": 1, "uint8": 1, "Byte": 1,
               "bool": 1, "Bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1, "Float8_e4m3fn": 1, "Float8_e5m2": 1}
# A collective's name in any of the spellings traces use -> the kind dtgen names it by.
KINDS = {"allreduce": "all-reduce", "all_reduce": "all-reduce", "allreduce_coalesced": "all-reduce",
         "allreduce_coalesced_": "all-reduce",
         "allgather": "all-gather", "all_gather": "all-gather", "_allgather_base": "all-gather",
         "allgather_into_tensor_coalesced": "all-gather", "all_gather_into_tensor": "all-gather",
         "allgather_coalesced": "all-gather",
         "reduce_scatter": "reduce-scatter", "reducescatter": "reduce-scatter",
         "_reduce_scatter_base": "reduce-scatter",
         "reduce_scatter_tensor": "reduce-scatter", "reduce_scatter_tensor_coalesced": "reduce-scatter",
         "broadcast": "broadcast", "reduce": "reduce", "gather": "gather", "scatter": "scatter",
         "all_to_all": "all-to-all", "alltoall": "all-to-all", "alltoall_base": "all-to-all", "all2all": "all-to-all",
         "barrier": "barrier", "send": "send", "recv": "recv", "recv_anysource": "recv", "sendrecv": "send"}
NCCL_KERNEL = re.compile(r"nccl(?:Dev)?Kernel_([A-Za-z]+)", re.IGNORECASE)
NCCL_KERNEL_KINDS = {"allreduce": "all-reduce", "allgather": "all-gather", "reducescatter": "reduce-scatter",
                     "broadcast": "broadcast", "reduce": "reduce", "sendrecv": "send", "send": "send", "recv": "recv",
                     "alltoall": "all-to-all"}
COMM_PREFIXES = ("c10d::", "c10d_functional::", "_c10d_functional::", "gloo:", "nccl:", "record_param_comms")
PP_ACTION = re.compile(r"^PP:\d+(F|I|B|W|SEND_F|RECV_F|SEND_B|RECV_B)\d*$")
PP_KINDS = {"F": "forward", "I": "backward", "B": "backward", "W": "backward", "SEND_F": "send", "SEND_B": "send",
            "RECV_F": "recv", "RECV_B": "recv"}


class Phase(NamedTuple):
    """One classified span of the main thread: forward, backward, optimizer, comm, wait, send or recv."""

    kind: str
    start: float
    end: float
    collective: str = ""  # comm spans: the collective's kind (all-reduce, ...)


class Collective(NamedTuple):
    """One collective on one rank: its kind, group (sorted global ranks; () when the trace
    does not say), nccl-tests size in bytes (None when the trace records no shapes), time."""

    kind: str
    group: tuple
    size: int | None
    start: float
    end: float
    peer: int | None = None  # send/recv: the other rank, where the trace says it
    on_gpu: bool = False


class Kernel(NamedTuple):
    stream: int
    kind: str  # forward | backward | optimizer | comm
    start: float
    end: float
    collective: str = ""


@dataclass
class RankProfile:
    path: str
    rank: int | None  # None: no distributedInfo
    world_size: int | None
    backend: str = ""
    host: str = ""
    pg_config: list = field(default_factory=list)
    steps: list = field(default_factory=list)  # (number, start, end)
    phases: list = field(default_factory=list)  # Phase, sorted by start
    collectives: list = field(default_factory=list)  # Collective, sorted by start
    kernels: list = field(default_factory=list)  # Kernel (GPU traces)
    window: tuple = (0.0, 0.0)  # first and last µs of any span
    partial: bool = False  # the file was cut off: what is here is what the rank wrote
    events: int = 0  # X events read
    gloo_threads: dict = field(default_factory=dict)  # gloo thread -> the collectives it ran (group inference)
    device_name: str = ""  # the GPUs' model from deviceProperties, where every listed GPU is the same one


# --- reading ---------------------------------------------------------------------------


def is_kineto_file(path: Path) -> bool:
    name = path.name
    return path.is_file() and (name.endswith(".json") or name.endswith(".json.gz"))


def _read_text(path: Path) -> str:
    try:
        if path.name.endswith(".gz"):
            with gzip.open(path, "rt", encoding="utf-8", errors="replace") as handle:
                try:
                    return handle.read()
                except (EOFError, OSError):  # a gzip stream cut off: nothing past the last full block
                    raise TraceError(f"{path}: a gzip file cut off before its first complete block") from None
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise TraceError(f"{path}: cannot be read ({exc.strerror or exc})") from None


def _read_gz_partial(path: Path) -> str:
    """What a truncated gzip file holds up to where it stops (a crashed rank's .json.gz)."""
    import zlib

    data = path.read_bytes()
    decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        return decoder.decompress(data).decode("utf-8", errors="replace")
    except zlib.error:
        return ""


def load_document(path: Path) -> tuple[dict, bool]:
    """(the trace object, whether it was cut off). A cut-off file keeps its header (Kineto
    writes distributedInfo before traceEvents) and every complete event."""
    try:
        text = _read_text(path)
    except TraceError:
        if not path.name.endswith(".gz"):
            raise
        text = _read_gz_partial(path)
    try:
        data = json.loads(text)
    except ValueError as exc:
        head = text[:65536]
        if '"traceEvents"' not in head and '"schemaVersion"' not in head:
            raise TraceError(f"{path}: not a Kineto trace (not JSON: {exc.msg} at line {exc.lineno} "
                             f"column {exc.colno})") from None
        return _salvage(text), True
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise TraceError(f'{path}: not a Kineto trace (no "traceEvents" list: torch.profiler writes one object '
                         f"per rank with it)")
    return data, False


def _salvage(text: str) -> dict:
    """The header and every complete event of a trace whose end is missing."""
    at = text.find('"traceEvents"')
    if at < 0:
        return {"traceEvents": []}
    try:
        header = json.loads(text[:at].rstrip().rstrip(",") + "}")
    except ValueError:
        header = {}
    events = complete_events(text, text.find("[", at) + 1)
    header = header if isinstance(header, dict) else {}
    header["traceEvents"] = events
    return header


def read_rank(path: str | Path) -> RankProfile:
    """Read one rank's Kineto trace; TraceError when it is not one."""
    # A trace is a hundred thousand small dicts, none in a cycle: the cyclic GC rescanning
    # them while they are built and reduced costs a third of the read (as in trace.py).
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _read_rank(Path(path))
    finally:
        if enabled:
            gc.enable()


def _read_rank(path: Path) -> RankProfile:
    data, partial = load_document(path)
    info = data.get("distributedInfo")
    info = info if isinstance(info, dict) else {}
    rank = info.get("rank") if type(info.get("rank")) is int else None
    world = info.get("world_size") if type(info.get("world_size")) is int else None
    pgs = [pg for pg in info.get("pg_config") or [] if isinstance(pg, dict)] if isinstance(
        info.get("pg_config"), list) else []
    base = data.get("baseTimeNanoseconds")
    offset = base / 1000 if isinstance(base, (int, float)) and not isinstance(base, bool) else 0.0
    profile = RankProfile(str(path), rank, world, str(info.get("backend") or ""), str(data.get("host_name") or ""),
                          pgs, partial=partial, device_name=_device_name(data.get("deviceProperties")))
    events = data["traceEvents"]
    del data
    _reduce(events, profile, offset)
    if not profile.events:
        if partial:
            raise TraceError(f"{path}: cut off before its first complete event (a rank that crashed early?)")
        raise TraceError(f"{path}: not a Kineto trace (no event has the fields ph, ts, dur, name)")
    return profile


def _device_name(properties) -> str:
    """The GPU model a CUDA trace's deviceProperties list (one entry per visible GPU): its
    name where all are one model, else "" (which of them the rank used is not recorded there)."""
    if not isinstance(properties, list):
        return ""
    names = {str(d.get("name")).strip() for d in properties if isinstance(d, dict) and d.get("name")}
    return names.pop() if len(names) == 1 else ""


def _reduce(events: list, profile: RankProfile, offset: float) -> None:
    """Keep the rank's steps, main-thread phases, collectives and kernels; drop the rest."""
    by_tid: dict = {}  # tid -> [(start, end, name, args, cat)] of CPU spans
    kernels, launches = [], {}
    first, last = float("inf"), float("-inf")
    count = 0
    for e in events:
        try:
            if e["ph"] != "X":
                continue
            start = e["ts"] + offset
            end = start + e["dur"]
            name = e["name"]
        except (KeyError, TypeError):
            continue
        if type(name) is not str or not end >= start:
            continue
        count += 1
        cat = e.get("cat") or ""
        args = e.get("args")
        if type(args) is not dict:
            args = {}
        if cat in ("kernel", "gpu_memcpy", "gpu_memset"):
            kernels.append((start, end, name, args))
            continue
        if cat in ("cuda_runtime", "cuda_driver"):
            if "correlation" in args:
                launches[args["correlation"]] = start
            continue
        if cat == "Trace" or not isinstance(e.get("tid"), int):
            continue  # the profiler's own span of its window
        first, last = min(first, start), max(last, end)
        by_tid.setdefault(e["tid"], []).append((start, end, name, args, cat))
    profile.events = count
    if not by_tid:
        return
    main = _main_thread(by_tid)
    spans = sorted(by_tid[main], key=lambda s: (s[0], -s[1]))
    profile.window = (first, last)
    profile.steps = sorted((int(STEP.match(s[2]).group(1)), s[0], s[1]) for s in spans if STEP.match(s[2]))
    profile.phases = _phases(spans)
    profile.collectives = _collectives(by_tid, main, profile)
    if kernels:
        profile.kernels = _kernels(kernels, launches, profile)


def _main_thread(by_tid: dict) -> int:
    """The thread holding the ProfilerStep spans, else the one with the most span time."""
    for tid, spans in by_tid.items():
        if any(STEP.match(s[2]) for s in spans):
            return tid
    return max(by_tid, key=lambda tid: sum(s[1] - s[0] for s in by_tid[tid]))


# --- classifying the main thread -----------------------------------------------------------


def phase_of(name: str) -> tuple[str, str]:
    """(phase kind, collective kind) of a top-level span on the main thread (docs/profiles.md):
    Optimizer.* -> optimizer; a pipeline schedule's PP:<stage><action> -> its action; a wait
    on a collective -> wait; a collective or p2p -> comm, send, recv; an autograd function
    or a name with 'backward' -> backward; anything else -> forward."""
    if name.startswith("Optimizer.") or name.startswith("optimizer"):
        return "optimizer", ""
    pp = PP_ACTION.match(name)
    if pp:
        kind = PP_KINDS[pp.group(1)]
        return kind, kind if kind in ("send", "recv") else ""
    if "wait" in name.lower() and (name.startswith(COMM_PREFIXES) or name.startswith("FSDP::")):
        return "wait", ""  # blocked on a collective (c10d::wait, wait_tensor, FSDP's rs_wait)
    if name.startswith(COMM_PREFIXES):
        kind = collective_kind(name)
        if kind in ("send", "recv"):
            return kind, kind
        return ("comm", kind) if kind else ("forward", "")
    lower = name.lower()
    if "backward" in lower or name.startswith("autograd::") or name.startswith("torch::autograd"):
        return "backward", ""
    return "forward", ""


def collective_kind(name: str) -> str:
    """'gloo:all_reduce', 'c10d::allreduce_', 'nccl:all_gather', '_c10d_functional::all_reduce' -> all-reduce
    ('' for a c10d op that is no collective: wait, wrappers)."""
    base = name.rsplit(":", 1)[-1].strip().rstrip("_")
    return KINDS.get(base, KINDS.get(base.lower(), ""))


def _phases(spans: list) -> list:
    """Top-level spans (not inside another; ProfilerStep spans are the steps, not spans) classified."""
    out, reach = [], float("-inf")
    for start, end, name, _args, _cat in spans:
        if STEP.match(name) or name.startswith("## "):
            continue
        if start < reach:
            continue  # nested in the top-level span before it
        reach = end
        kind, coll = phase_of(name)
        out.append(Phase(kind, start, end, coll))
    return out


# --- collectives ------------------------------------------------------------------------


def _elements(dims) -> int | None:
    """Elements of a shape list ([[4680]], [[8, 256]], [[[5]], [], ...]): the first tensor's."""
    while isinstance(dims, list) and dims and isinstance(dims[0], list):
        dims = dims[0]
    if not isinstance(dims, list) or not all(type(d) is int for d in dims):
        return None
    count = 1
    for d in dims:
        count *= d
    return count


def _dtype_bytes(value) -> int | None:
    if isinstance(value, list):
        value = next((v for v in value if isinstance(v, str) and v), None)
    return DTYPE_BYTES.get(str(value)) if value is not None else None


def nccl_tests_size(kind: str, in_bytes: int | None, out_bytes: int | None, group_size: int) -> int | None:
    """The size nccl-tests reports (and divides by time for algbw): the whole buffer of an
    all-reduce / broadcast / reduce, all ranks' data of an all-gather (its output) and of a
    reduce-scatter (its input), the message of a send or recv."""
    if kind == "all-gather":
        return out_bytes if out_bytes else (in_bytes * group_size if in_bytes is not None else None)
    if kind == "reduce-scatter":
        return in_bytes if in_bytes else (out_bytes * group_size if out_bytes is not None else None)
    return in_bytes if in_bytes is not None else out_bytes


def _ranks_of(value) -> tuple:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return ()
    if isinstance(value, list) and all(type(r) is int for r in value):
        return tuple(sorted(value))
    return ()


def _collectives(by_tid: dict, main: int, profile: RankProfile) -> list:
    """NCCL's record_param_comms metadata where the trace has it, else gloo's spans."""
    out = []
    groups = [tuple(sorted(pg.get("ranks") or [])) for pg in profile.pg_config if isinstance(pg.get("ranks"), list)]
    world = tuple(range(profile.world_size)) if profile.world_size else ()
    meta_seen = False
    for tid, spans in by_tid.items():
        for start, end, name, args, _cat in spans:
            if name == "record_param_comms" or (name.startswith("nccl:") and "Collective name" in args):
                meta_seen = True
                out.append(_from_metadata(args, start, end, world))
    if meta_seen:
        return sorted(out, key=lambda c: c.start)
    peers = _p2p_peers(by_tid.get(main, []))
    for tid, spans in by_tid.items():
        mine = []
        for start, end, name, args, _cat in spans:
            if not name.startswith("gloo:"):
                continue
            kind = collective_kind(name)
            if not kind:
                continue
            elements = _elements(args.get("Input Dims"))
            width = _dtype_bytes(args.get("Input type"))
            nbytes = elements * width if elements is not None and width is not None else None
            peer = peers.get(round(start)) if kind in ("send", "recv") else None
            mine.append([kind, (), nbytes, start, end, peer])
        if mine:
            profile.gloo_threads[tid] = mine
            out.extend(mine)
    candidates = [g for g in dict.fromkeys(groups or [world]) if len(g) > 1 and (profile.rank in g)]
    for item in out:
        kind, peer = item[0], item[5]
        if kind in ("send", "recv") and peer is not None and profile.rank is not None:
            item[1] = tuple(sorted((profile.rank, peer)))
        elif len(candidates) == 1:
            item[1] = candidates[0]
        n = len(item[1]) or 1
        if item[2] is not None and kind == "all-gather":  # gloo records the input shard
            item[2] = item[2] * n
    return sorted((Collective(k, g, b, s, e, p) for k, g, b, s, e, p in out), key=lambda c: c.start)


def _p2p_peers(spans: list) -> dict:
    """round(start of the gloo:send/recv inside it) -> peer, from c10d::send / c10d::recv_'s
    concrete inputs (tensors, group, peer, tag: the peer is the third)."""
    out = {}
    calls = [(s, e, a) for s, e, n, a, _c in spans if n in ("c10d::send", "c10d::recv_")]
    inner = [(s, n) for s, e, n, a, _c in spans if n in ("gloo:send", "gloo:recv")]
    starts = [c[0] for c in calls]
    for start, _name in inner:
        index = bisect.bisect_right(starts, start) - 1
        if index < 0 or calls[index][1] < start:
            continue
        concrete = calls[index][2].get("Concrete Inputs")
        if isinstance(concrete, list) and len(concrete) > 2 and str(concrete[2]).lstrip("-").isdigit():
            out[round(start)] = int(concrete[2])
    return out


def _from_metadata(args: dict, start: float, end: float, world: tuple) -> Collective:
    """A collective from NCCL's metadata (record_param_comms or an nccl kernel's args)."""
    kind = collective_kind(str(args.get("Collective name", ""))) or str(args.get("Collective name", "?"))
    group = _ranks_of(args.get("Process Group Ranks")) or world
    width = _dtype_bytes(args.get("dtype"))
    n_in, n_out = args.get("In msg nelems"), args.get("Out msg nelems")
    in_bytes = n_in * width if type(n_in) is int and width else None
    out_bytes = n_out * width if type(n_out) is int and width else None
    size = args.get("Group size") if type(args.get("Group size")) is int else len(group) or 1
    return Collective(kind, group, nccl_tests_size(kind, in_bytes, out_bytes, size), start, end)


def _kernels(kernels: list, launches: dict, profile: RankProfile) -> list:
    """Each kernel on its stream, with the phase of the CPU span that launched it; an NCCL
    kernel is communication, and its time replaces the CPU-side time of its collective."""
    starts = [p.start for p in profile.phases]
    out = []
    gpu_comms = []
    for start, end, name, args in kernels:
        stream = args.get("stream") if type(args.get("stream")) is int else 0
        match = NCCL_KERNEL.search(name)
        if match:
            kind = collective_kind(str(args.get("Collective name", ""))) or NCCL_KERNEL_KINDS.get(
                match.group(1).lower(), "all-reduce")
            out.append(Kernel(stream, "comm", start, end, kind))
            gpu_comms.append((start, end, kind, args))
            continue
        launched = launches.get(args.get("correlation"))
        kind = "forward"
        if launched is not None:
            index = bisect.bisect_right(starts, launched) - 1
            if index >= 0 and profile.phases[index].end >= launched and profile.phases[index].kind in (
                    "forward", "backward", "optimizer"):
                kind = profile.phases[index].kind
        out.append(Kernel(stream, kind, start, end))
    if gpu_comms and profile.collectives:
        _gpu_times(profile, sorted(gpu_comms))
    return sorted(out, key=lambda k: (k.stream, k.start))


def _gpu_times(profile: RankProfile, gpu_comms: list) -> None:
    """A collective's time is its kernel's on the GPU: the n-th NCCL kernel of a kind is the
    n-th record_param_comms of that kind (both in launch order)."""
    queues: dict = {}
    for start, end, kind, _args in gpu_comms:
        queues.setdefault(kind, []).append((start, end))
    taken: dict = {}
    out = []
    for c in profile.collectives:
        queue = queues.get(c.kind, [])
        index = taken.get(c.kind, 0)
        if index < len(queue):
            taken[c.kind] = index + 1
            out.append(c._replace(start=queue[index][0], end=queue[index][1], on_gpu=True))
        else:
            out.append(c)
    profile.collectives = out
