"""A set of Kineto traces (one per rank) as one measured run: ranks, groups, steps, notes.

`load_profile_set(paths)` takes a folder (every *.json / *.json.gz in it) or files, reads
them one at a time (kineto.read_rank) and checks that they belong together: one world
size, one pg_config, each rank once, profiled windows that overlap in time (Kineto's
trace ids differ per rank, so they cannot tell runs apart). A subset of the ranks is
normal and said. What cannot be drawn raises TraceError; what can be drawn with a
caveat (no distributedInfo, a partial rank, no ProfilerStep) becomes a warning line.

Groups are named by their mesh dimension (group_dims): a DeviceMesh's groups say it in
their pg_desc (`mesh_<dim>`); `--mesh pipeline=P,data=D,tensor=T` gives the layout
(row-major, the last dimension's ranks adjacent, as init_device_mesh lays them out) and
a group is named by the one coordinate its ranks differ in. Must not import torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import TraceError, UsageError
from .kineto import RankProfile, is_kineto_file, read_rank

DIM_NAMES = {"dp": "data", "data": "data", "dp_shard": "data", "dp_replicate": "data", "fsdp": "data",
             "tp": "tensor", "tensor": "tensor", "pp": "pipeline", "pipeline": "pipeline", "cp": "context",
             "context": "context", "ep": "expert", "expert": "expert"}
_MESH = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*([1-9][0-9]*)\s*$")


class MeshOptionError(UsageError):
    """A --mesh value that is not dim=N,dim=N."""


@dataclass
class ProfileSet:
    ranks: list  # RankProfile, by rank
    world_size: int
    source: str  # what was given (folder or first file), for the figures' note
    groups: dict = field(default_factory=dict)  # ranks tuple -> dimension name ("" unknown)
    warnings: list = field(default_factory=list)
    whole_window: bool = False  # no ProfilerStep: each rank's window is one step
    backend: str = ""
    hosts: dict = field(default_factory=dict)  # rank -> host name

    @property
    def partial(self) -> list:
        return [p.rank for p in self.ranks if p.partial]


def trace_files(paths: list) -> list:
    """The trace files named: a folder's *.json and *.json.gz (not recursive), or the files."""
    files = []
    for given in paths:
        path = Path(given)
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if is_kineto_file(p))
            if not found:
                raise TraceError(f"{path}: no Kineto trace in it (no *.json or *.json.gz)")
            files += found
        elif path.is_file():
            files.append(path)
        else:
            raise TraceError(f"{path}: no such file or folder")
    return files


def looks_like_kineto(path: Path) -> bool:
    """Whether `dtgen figure PATH` means a profile: a trace file, or a folder of them that is no run directory."""
    path = Path(path)
    if path.is_file():
        if path.name.endswith(".json.gz"):
            return True
        # a spec may be JSON too (YAML reads it): a trace says what it is in its first lines
        return path.name.endswith(".json") and _trace_head(path)
    return path.is_dir() and not (path / "spec.yaml").is_file() and any(is_kineto_file(p) for p in path.iterdir())


def _trace_head(path: Path) -> bool:
    try:
        with path.open("r", encoding="utf-8", errors="replace") as handle:
            head = handle.read(65536)
    except OSError:
        return True  # the reader says what is wrong with it
    return any(key in head for key in ('"traceEvents"', '"schemaVersion"', '"distributedInfo"'))


def parse_mesh(text: str | None) -> list | None:
    """'pipeline=2,data=4,tensor=8' -> [('pipeline', 2), ('data', 4), ('tensor', 8)]."""
    if text is None:
        return None
    out = []
    for part in text.split(","):
        match = _MESH.match(part)
        if not match:
            raise MeshOptionError(f"--mesh {text!r}: expected dim=N,dim=N (e.g. pipeline=2,data=4,tensor=8), "
                                  f"outermost first")
        name = DIM_NAMES.get(match.group(1).lower(), match.group(1))
        if name in (n for n, _ in out):
            raise MeshOptionError(f"--mesh {text!r}: {name} twice")
        out.append((name, int(match.group(2))))
    return out


def load_profile_set(paths: list, mesh: list | None = None) -> ProfileSet:
    files = trace_files(paths)
    warnings: list = []
    profiles: list[RankProfile] = []
    for path in files:
        profiles.append(read_rank(path))
    distributed = [p for p in profiles if p.rank is not None]
    if len(distributed) < len(profiles):
        if distributed:
            bare = next(p for p in profiles if p.rank is None)
            raise TraceError(f"{bare.path}: no distributedInfo, unlike {distributed[0].path} (rank "
                             f"{distributed[0].rank}): traces of different runs?")
        if len(profiles) > 1:
            raise TraceError(f"{profiles[1].path}: no distributedInfo in any of the {len(profiles)} traces, so "
                             f"nothing says which rank each is: give one file")
        warnings.append(f"{profiles[0].path}: no distributedInfo (profiled without torch.distributed): "
                        f"drawn as one rank")
        profiles[0].rank, profiles[0].world_size = 0, 1
    _check_together(profiles)
    profiles.sort(key=lambda p: p.rank)
    world = profiles[0].world_size
    if len(profiles) < world:
        shown = _ranges([p.rank for p in profiles])
        warnings.append(f"{len(profiles)} of {world} ranks traced (ranks {shown}): the others are not drawn")
    for p in profiles:
        if p.partial:
            warnings.append(f"{p.path}: rank {p.rank}'s trace is cut off (did it crash?): "
                            f"drawn up to its last complete event")
    whole = not any(p.steps for p in profiles)
    if whole:
        warnings.append("no ProfilerStep spans (profiled without prof.step()): the whole profiled window "
                        "is drawn as one step")
        for p in profiles:
            p.steps = [(0, p.window[0], p.window[1])]
    _gloo_groups(profiles)
    group_set = {tuple(sorted(pg.get("ranks") or [])): str(pg.get("pg_desc") or "")
                 for p in profiles for pg in p.pg_config if isinstance(pg.get("ranks"), list)}
    for p in profiles:
        for c in p.collectives:
            group_set.setdefault(c.group, "")
    group_set.pop((), None)
    groups = group_dims(group_set, world, mesh)
    backend = profiles[0].backend
    hosts = {p.rank: p.host for p in profiles if p.host}
    source = str(paths[0]) if len(paths) == 1 else f"{paths[0]} and {len(paths) - 1} more"
    return ProfileSet(profiles, world, source, groups, warnings, whole, backend, hosts)


def _ranges(ranks: list) -> str:
    """[0, 1, 2, 5] -> '0-2, 5'."""
    out, run = [], []
    for r in sorted(ranks):
        if run and r == run[-1] + 1:
            run.append(r)
        else:
            if run:
                out.append(f"{run[0]}\u2013{run[-1]}" if len(run) > 1 else str(run[0]))
            run = [r]
    if run:
        out.append(f"{run[0]}\u2013{run[-1]}" if len(run) > 1 else str(run[0]))
    return ", ".join(out)


def _check_together(profiles: list) -> None:
    """Traces of different runs, or one rank twice, cannot be drawn as one run."""
    first = profiles[0]
    seen: dict = {}
    for p in profiles:
        if p.world_size != first.world_size:
            raise TraceError(f"{p.path}: from a different run than {first.path} (world size {p.world_size}, "
                             f"not {first.world_size})")
        if p.rank in seen:
            raise TraceError(f"{p.path}: rank {p.rank} again (also {seen[p.rank]}): traces of different runs?")
        if p.rank is None or not 0 <= p.rank < (p.world_size or 1):
            raise TraceError(f"{p.path}: rank {p.rank} is not in a world of {p.world_size}")
        seen[p.rank] = p.path
        if _pg_key(p) != _pg_key(first):
            raise TraceError(f"{p.path}: from a different run than {first.path} (its process groups differ)")
    # Each rank's profiled window spans the same steps, joined by collectives: windows that
    # do not overlap at all are different runs (or clocks far apart: the figure could not align them).
    ordered = sorted(profiles, key=lambda p: p.window[0])
    reach = ordered[0]
    for p in ordered[1:]:
        if p.window[0] > reach.window[1]:
            gap = (p.window[0] - reach.window[1]) / 1e6
            gap_text = f"{gap:,.1f} s" if gap >= 1 else f"{gap * 1e3:,.1f} ms"
            raise TraceError(f"{p.path}: from a different run than {reach.path} (its profiled window starts "
                             f"{gap_text} after the other's ends; ranks of one run overlap)")
        if p.window[1] > reach.window[1]:
            reach = p


def _pg_key(p: RankProfile) -> tuple:
    return tuple(sorted((str(pg.get("pg_name")), tuple(pg.get("ranks") or [])) for pg in p.pg_config
                        if isinstance(pg.get("ranks"), list)))


def _gloo_groups(profiles: list) -> None:
    """gloo spans name no group. A rank in several groups: a gloo thread belongs to one
    process group, so its collectives' group is the candidate whose every traced member
    has a thread running the same sequence of (kind, bytes)."""
    signatures: dict = {}  # rank -> set of thread signatures
    for p in profiles:
        signatures[p.rank] = {tuple((c[0], c[2]) for c in items) for items in p.gloo_threads.values()}
    for p in profiles:
        if not p.gloo_threads or all(c.group for c in p.collectives):
            continue
        groups = {tuple(sorted(pg.get("ranks") or [])) for pg in p.pg_config if isinstance(pg.get("ranks"), list)}
        candidates = [g for g in groups if len(g) > 1 and p.rank in g]
        resolved = {}
        for tid, items in p.gloo_threads.items():
            signature = tuple((c[0], c[2]) for c in items)
            fits = [g for g in candidates
                    if all(signature in signatures[q] for q in g if q in signatures and q != p.rank)]
            if len(fits) == 1:
                for c in items:
                    resolved[(c[3], c[0])] = fits[0]
        if resolved:
            out = []
            for c in p.collectives:
                group = resolved.get((c.start, c.kind)) if not c.group else None
                if group:  # gloo records an all-gather's input shard: its size is the group's
                    size = c.size * len(group) if c.kind == "all-gather" and c.size is not None else c.size
                    c = c._replace(group=group, size=size)
                out.append(c)
            p.collectives = out


def group_dims(groups: dict, world: int, mesh: list | None) -> dict:
    """ranks -> the dimension each group spans: from --mesh's layout, else from a
    DeviceMesh's pg_desc (mesh_tensor), else 'world' for the group of every rank, a
    two-rank p2p pair 'p2p', and '' for a group nothing names."""
    out = {}
    shape = [n for _, n in mesh] if mesh else None
    if shape is not None:
        total = 1
        for n in shape:
            total *= n
        if total != world:
            raise MeshOptionError(f"--mesh {','.join(f'{k}={v}' for k, v in mesh)}: {total} ranks, but the traces "
                                  f"say the world has {world}")
    for ranks, desc in groups.items():
        name = ""
        if shape is not None:
            name = _dim_of(ranks, mesh)
        if not name and desc.startswith("mesh_"):
            name = DIM_NAMES.get(desc[5:].lower(), desc[5:])
        if not name and len(ranks) == world:
            name = "world"
        if not name and desc and not desc.startswith("default") and not desc.startswith("undefined"):
            name = desc
        out[ranks] = name
    return out


def _dim_of(ranks: tuple, mesh: list) -> str:
    """The mesh dimension along which `ranks` vary alone ('' if none or several)."""
    shape = [n for _, n in mesh]

    def coords(rank):
        out = []
        for n in reversed(shape):
            out.append(rank % n)
            rank //= n
        return out[::-1]

    points = [coords(r) for r in ranks]
    varying = [k for k in range(len(shape)) if len({c[k] for c in points}) > 1]
    if len(varying) == 1 and len(ranks) == shape[varying[0]]:
        return mesh[varying[0]][0]
    if len(ranks) == 2 and len(varying) == 1:
        return f"{mesh[varying[0]][0]} p2p"
    return ""
