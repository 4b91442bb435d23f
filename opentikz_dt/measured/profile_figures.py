"""`dtgen figure PROFILE_DIR_OR_FILES`: a user's PyTorch profiler traces as dtgen's measured figures.

Three figures, named `measured-<folder>-timeline|topology|comm`:
- the timeline, drawn by the same template and palette as a dtgen run's (figures/timeline.py's
  model): per traced rank a lane of its main thread (forward, backward, optimizer, blocking
  collectives, pipeline send/recv, idle), a lane of the collectives that ran beside it
  (gloo's threads; NCCL on the GPU), and on a GPU one lane per CUDA stream;
- the topology: ranks (under their hosts where the traces name several) and every process
  group from pg_config, one row per mesh dimension, each group's bytes per step;
- the communication table per collective kind and group (profile_stats.comm_rows).
Each says "measured" and from which traces. The spec the templates need (palette, width,
words) is a neutral one built here: nothing of it is drawn as a claim. Must not import torch.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..figures.fit import target_width_cm
from ..figures.model import Tex, elide
from ..figures.render import base_context, environment, finish, render_timeline
from ..figures.timeline import NARROW_CM, Box, Lane, Panel, Timeline
from ..spec import spec_from_data
from ..texsafe import escape_text
from ..workload import human_bytes
from .export import write_outputs
from .profile_set import ProfileSet, load_profile_set
from .profile_stats import StepWindow, comm_rows, group_bytes, rank_split, select_steps
from .window import Cell, bound_boxes, parse_steps

SHORT = {"all-reduce": "AR", "all-gather": "AG", "reduce-scatter": "RS", "broadcast": "B", "reduce": "R",
         "all-to-all": "A2A", "barrier": "bar", "gather": "G", "scatter": "S"}
DIM_SHORT = {"data": "dp", "tensor": "tp", "pipeline": "pp", "context": "cp", "expert": "ep"}
PHASE_BOX = {"forward": "forward", "backward": "backward", "optimizer": "optimizer", "send": "send", "recv": "recv",
             "wait": "wait"}
MAX_RANKS_DRAWN = 8  # lanes of ranks (each with its comm and stream lanes)
MAX_TOPOLOGY_RANKS = 16
MERGE_FRACTION = 0.004  # same-kind spans closer than this share of the window join (python overhead between ops)
BOX_BUDGET = 2400


def neutral_spec(title: str, width: str | None, lanes: int):
    """A spec for the templates' palette, width and words only (it claims nothing about the run)."""
    figure = {"max_workers_drawn": 32}
    if width is not None:
        figure["width"] = width
    return spec_from_data({"name": "profile", "title": title, "topology": {"workers": {"count": 2}},
                           "strategy": {"kind": "allreduce", "algorithm": "native"}, "figure": figure},
                          name="<profile>", data_files=False)


def _origin(pset: ProfileSet) -> str:
    return Path(pset.source.split(" and ")[0]).resolve().name or "profile"


def stem_name(pset: ProfileSet) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", _origin(pset)).strip("-.") or "profile"


def source_line(pset: ProfileSet) -> str:
    """What every figure of the profile says it is: measured, by whom, from which traces."""
    traced = len(pset.ranks)
    ranks = f"{traced} of {pset.world_size} ranks" if traced < pset.world_size else f"{traced} ranks"
    backend = f" ({pset.backend})" if pset.backend else ""
    partial = f"; rank {', '.join(map(str, pset.partial))} cut off" if pset.partial else ""
    return f"measured: torch.profiler traces of {ranks}{backend} from {pset.source}{partial}"


# --- timeline ----------------------------------------------------------------------------


def _coll_label(kind: str, dim: str) -> str:
    short = SHORT.get(kind, kind)
    prefix = DIM_SHORT.get(dim, "")
    return f"{prefix} {short}" if prefix else short


def _merge(cells: list, gap: float) -> list:
    out = []
    for c in sorted(cells, key=lambda c: c.start):
        if out and out[-1].kind == c.kind and out[-1].label == c.label and c.start - out[-1].end < gap:
            last = out[-1]
            out[-1] = last._replace(end=max(last.end, c.end), count=last.count + c.count)
        else:
            out.append(c)
    return out


def _idle(cells: list, steps: list, t0: float, t1: float, gap: float) -> list:
    """Time inside a step that no drawn span covers, as `wait` cells ("idle")."""
    out = []
    for _, s, e in steps:
        s, e = max(s, t0), min(e, t1)
        if e <= s:
            continue
        reach = s
        for c in cells:
            if c.end <= s or c.start >= e:
                continue
            if c.start - reach > gap:
                out.append(Cell(reach, c.start, "wait", 0, "idle"))
            reach = max(reach, c.end)
        if e - reach > gap:
            out.append(Cell(reach, e, "wait", 0, "idle"))
    return out


def rank_lanes(pset: ProfileSet, profile, window: StepWindow, budget: int, short: bool = False) -> list:
    """The lanes of one rank: main thread, collectives beside it, GPU streams. `short`: for a
    narrow figure, "r0", "r0 comm", "r0 s7" (the timeline would otherwise abbreviate them
    as a dtgen run's workers, W1, W2: numbers that are not the ranks)."""
    t0, t1 = window.t0, window.t1
    gap = (t1 - t0) * MERGE_FRACTION
    phases = {}  # cell -> legend phase of a collective
    main = []
    for p in profile.phases:
        if p.end < t0 or p.start > t1:
            continue
        if p.kind == "comm":
            kind, label = "allreduce", _coll_label(p.collective, "")
        else:
            kind, label = PHASE_BOX[p.kind], "wait" if p.kind == "wait" else ""
        cell = Cell(max(p.start, t0), min(p.end, t1), kind, 1, label)
        main.append(cell)
        if kind == "allreduce":
            phases[(cell.start, cell.label)] = p.collective
    main = _merge(main, gap)
    main += _idle(main, profile.steps, t0, t1, gap)
    covered = [(p.start, p.end) for p in profile.phases if p.kind in ("comm", "send", "recv")]  # drawn on the main lane
    beside = []
    for c in profile.collectives:
        if c.end < t0 or c.start > t1 or (not c.on_gpu and any(s <= c.start and c.end <= e for s, e in covered)):
            continue
        kind = c.kind if c.kind in ("send", "recv") else "allreduce"
        cell = Cell(max(c.start, t0), min(c.end, t1), kind, 1,
                    "" if kind != "allreduce" else _coll_label(c.kind, pset.groups.get(c.group, "")))
        beside.append(cell)
        if kind == "allreduce":
            phases[(cell.start, cell.label)] = c.kind
    name = f"r{profile.rank}" if short else f"rank {profile.rank}"
    ident = f"w{profile.rank + 1}"
    lanes = [Lane(ident, name, _lane_boxes(main, phases, budget, t0, t1))]
    if beside and not profile.kernels:
        lanes.append(Lane(f"{ident}-comm", f"{name} comm" if short else f"{name} (comm)",
                          _lane_boxes(beside, phases, budget, t0, t1)))
    streams: dict = {}
    for k in profile.kernels:
        if k.end < t0 or k.start > t1:
            continue
        kind = "allreduce" if k.kind == "comm" else k.kind
        cell = Cell(max(k.start, t0), min(k.end, t1), kind, 1, SHORT.get(k.collective, "") if k.kind == "comm" else "")
        if kind == "allreduce":
            phases[(cell.start, cell.label)] = k.collective
        streams.setdefault(k.stream, []).append(cell)
    for stream, cells in sorted(streams.items()):
        lanes.append(Lane(f"{ident}-s{stream}", f"{name} s{stream}" if short else f"{name} stream {stream}",
                          _lane_boxes(_merge(cells, gap / 4), phases, budget, t0, t1)))
    return lanes


def _lane_boxes(cells: list, phases: dict, budget: int, t0: float, t1: float) -> tuple:
    bounded, merged = bound_boxes(sorted(cells, key=lambda c: c.start), t0, t1, budget)
    out = []
    for c in bounded:
        phase = phases.get((c.start, c.label), "") if c.kind == "allreduce" else ""
        if c.kind == "allreduce" and not phase:
            phase = "collective"
        out.append(Box(c.start / 1000, c.end / 1000, c.kind, c.label if not merged else "", phase))
    return tuple(out)


def profile_timeline(pset: ProfileSet, window: StepWindow, target_cm: float | None = None) -> Timeline:
    ranks = pset.ranks
    short = target_cm is not None and target_cm <= NARROW_CM
    shown = elide(len(ranks), MAX_RANKS_DRAWN)
    lanes_per_rank = 1 + (1 if any(p.collectives for p in ranks) else 0) + max(
        (len({k.stream for k in p.kernels}) for p in ranks), default=0)
    budget = max(8, BOX_BUDGET // max(1, len(shown) * lanes_per_rank))
    lanes = []
    for index in shown:
        if index is None:
            hidden = len(ranks) - (len(shown) - 1)
            lanes.append(Lane("more", f"{hidden} more ranks", (), role="gap", hidden=hidden))
            continue
        lanes += rank_lanes(pset, ranks[index - 1], window, budget, short)
    splits = [rank_split(pset, p, window.t0, window.t1) for p in ranks]
    total = sum(s.total for s in splits) or 1.0
    split = (f"compute {sum(s.compute for s in splits) / total:.0%}, exposed communication "
             f"{sum(s.exposed_comm for s in splits) / total:.0%}, idle {sum(s.idle for s in splits) / total:.0%}"
             f" (mean of {len(splits)} ranks)")
    how = {"default": "near the median step time", "requested": "as requested", "whole": "no ProfilerStep"}
    legend = "; r: rank, s: CUDA stream" if short else ""
    note = f"{source_line(pset)}; {window.label} ({how[window.chosen]}); {split}; ranks' own clocks{legend}"
    title = f"measured: {_origin(pset)}, {window.label}"
    return Timeline(f"Profiled run: {_origin(pset)}", (Panel("measured", title, tuple(lanes)),),
                    window.t0 / 1000, window.t1 / 1000, note,
                    axis_label=Tex(escape_text(f"time (ms) from the start of {_first_step(window)}")))


def _first_step(window: StepWindow) -> str:
    return "the profiled window" if window.chosen == "whole" else f"step {window.first}"


# --- topology -------------------------------------------------------------------------------


def _dims(pset: ProfileSet) -> list:
    """(dimension name, [groups]) rows of the topology: one per name, groups in rank order."""
    rows: dict = {}
    for group, dim in pset.groups.items():
        if len(group) < 2:
            continue
        rows.setdefault(dim or "group", []).append(group)
    order = ("world", "pipeline", "data", "context", "expert", "tensor")
    return sorted(((k, sorted(v)) for k, v in rows.items()),
                  key=lambda kv: (order.index(kv[0]) if kv[0] in order else len(order), kv[0]))


NARROW_TOPOLOGY_RANKS = 9  # at one column: the first 7 ranks, an ellipsis, the last


def _narrow_ranks(world: int) -> list:
    if world <= NARROW_TOPOLOGY_RANKS:
        return list(range(1, world + 1))
    return list(range(1, NARROW_TOPOLOGY_RANKS - 1)) + [None, world]


def render_profile_topology(pset: ProfileSet, spec, body_only: bool = False) -> str:
    """The ranks and their groups. At a narrow width (a column) fewer rank columns, closer,
    the row labels abbreviated (`data 4x4`: groups x ranks each) and the bytes per step
    without their unit's words, all said in the note."""
    target = target_width_cm(spec)
    narrow = target is not None and target <= NARROW_CM
    world = pset.world_size
    shown = _narrow_ranks(world) if narrow else elide(world, MAX_TOPOLOGY_RANKS)
    step = 0.58 if narrow else 0.9
    cols = []  # (x, rank or None)
    for k, index in enumerate(shown):
        cols.append((k * step, None if index is None else index - 1))
    traced = {p.rank for p in pset.ranks}
    nbytes = group_bytes(pset)
    rows = []
    colors = ("otblue", "otorange", "otteal", "otpurple", "otgray")
    for r, (dim, groups) in enumerate(_dims(pset)):
        y = -0.75 * (r + 1)
        member = {}
        for g_index, group in enumerate(groups):
            for rank in group:
                member[rank] = g_index
        cells = []
        for x, rank in cols:
            if rank is None or rank not in member:
                continue
            g_index = member[rank]
            cells.append((x, y, Tex(str(g_index + 1)), "!35!otpaper" if g_index % 2 == 0 else "!12!otpaper"))
        sizes = sorted({len(g) for g in groups})
        each = [nbytes[g] for g in groups if g in nbytes]
        if narrow:
            volume = human_bytes(sum(each) / len(each)) if each else "--"
            label = f"{dim} {len(groups)}\u00d7{'/'.join(map(str, sizes))}"
        else:
            volume = (f"{human_bytes(sum(each) / len(each))}/step per rank" if each else "no traced collective")
            label = f"{dim}: {len(groups)} group{'s' if len(groups) > 1 else ''} of {'/'.join(map(str, sizes))}"
        rows.append({"y": y, "color": colors[r % len(colors)], "cells": cells,
                     "label": Tex(escape_text(label)), "volume": Tex(escape_text(volume))})
    ranks = [(x, Tex(str(rank)) if rank is not None else Tex("$\\cdots$"), rank in traced if rank is not None else True)
             for x, rank in cols]
    # Hosts as boxes h1, h2, ... around their ranks (a host name can be longer than its
    # ranks are wide), the names in the note; the elision column belongs to no host.
    hosts, host_names = [], []
    names = [pset.hosts.get(rank, "") if rank is not None else None for _, rank in cols]
    if len(set(pset.hosts.values())) > 1:
        start = 0
        for k in range(1, len(cols) + 1):
            if k == len(cols) or names[k] != names[start]:
                if names[start]:
                    if names[start] not in host_names:
                        host_names.append(names[start])
                    tag = f"h{host_names.index(names[start]) + 1}"
                    pad = step / 2 - 0.02 if narrow else 0.4
                    hosts.append((cols[start][0] - pad, cols[k - 1][0] + pad, Tex(tag)))
                start = k
    width = cols[-1][0] if cols else 0.0
    untraced = world - len(traced)
    notes = [source_line(pset)]
    if host_names:
        drawn = ", ".join(f"h{i + 1} {name}" for i, name in enumerate(host_names))
        notes.append(f"hosts: {drawn} ({len(set(pset.hosts.values()))} in all)")
    if narrow:
        hidden = (f"; ranks {NARROW_TOPOLOGY_RANKS - 2}\u2013{world - 2} not drawn"
                  if world > NARROW_TOPOLOGY_RANKS else "")
        notes.append("rows: dimension, groups \u00d7 ranks each; cells: the group each rank is in (numbered per "
                     "row); right: bytes per step and rank (nccl-tests sizes of the group's collectives; --: none "
                     "traced)" + hidden + (f"; {untraced} ranks untraced (grey)" if untraced else ""))
    else:
        notes.append("cells: the group each rank is in (numbered per row); bytes: nccl-tests sizes of the group's "
                     "collectives per step and rank" + (f"; {untraced} ranks untraced (grey)" if untraced else ""))
    context = base_context(spec, "profile topology", body_only, [], source=pset.source)
    context.update(ranks=ranks, rows=rows, hosts=hosts, width=width, narrow=narrow, step=step,
                   title=Tex(escape_text(f"Profiled run: {_origin(pset)}, {world} ranks")),
                   notes=[Tex(escape_text(n)) for n in notes],
                   bottom=-0.75 * (len(rows) + 1) + 0.2,
                   note_width=(target - 1.0) if narrow else max(9.0, width + 5.0))
    return finish(environment().get_template("profile-topology.tex.j2").render(context), body_only)


# --- communication table ----------------------------------------------------------------


def _rate(value) -> str:
    return "--" if value is None else f"{value / 1e9:.3g}"


def render_comm_table(pset: ProfileSet, spec, body_only: bool = False) -> str:
    target = target_width_cm(spec)
    if target is not None and target <= NARROW_CM:
        return _narrow_comm_table(pset, spec, body_only)
    header = ["Collective", "Group", "Calls/step", "Size", "Time (ms)", "algbw (GB/s)", "busbw (GB/s)"]
    rows = []
    for row in comm_rows(pset):
        group = f"{row.dim or 'group'} [{_ranks_text(row.group)}]" if row.group else "not recorded"
        cells = [escape_text(row.kind), escape_text(group), f"{row.calls_per_step:.3g}",
                 escape_text(human_bytes(row.size)) if row.size is not None else "--",
                 f"{row.time_us / 1000:.3g}", _rate(row.algbw), _rate(row.busbw)]
        rows.append(Tex(" & ".join(cells)))
    if not rows:
        rows.append(Tex(" & ".join(["none traced"] + ["--"] * (len(header) - 1))))
    notes = [source_line(pset),
             "Per call, averaged over the traced ranks of each group and the profiled steps. Size: the bytes "
             "nccl-tests counts (an all-reduce's buffer; all ranks' data of an all-gather or reduce-scatter). "
             "algbw = size / time; busbw = algbw x 2(n-1)/n (all-reduce), (n-1)/n (all-gather, reduce-scatter), "
             "1 (broadcast, send, recv); n: the group's ranks."]
    context = base_context(spec, "communication table", body_only, [], source=pset.source)
    context.update(colspec=Tex("ll" + "r" * (len(header) - 2)), header=Tex(" & ".join(header)), rows=rows,
                   footnote=[Tex(escape_text(n)) for n in notes], ncols=len(header))
    return environment().get_template("table-summary.tex.j2").render(context)


def _narrow_comm_table(pset: ProfileSet, spec, body_only: bool) -> str:
    """The table at one column: six columns (algbw left out: size / time), collectives and
    dimensions abbreviated, a smaller font, the abbreviations said under it."""
    header = ["Op", "Group", "Calls", "Size", "ms", "busbw"]
    rows, ops, dims = [], {}, {}
    for row in comm_rows(pset):
        op = SHORT.get(row.kind, row.kind)
        ops[op] = row.kind
        dim = DIM_SHORT.get(row.dim, row.dim or "g")
        dims[dim] = row.dim or "group"
        group = f"{dim} {_ranks_text(row.group).replace(', ', ',')}" if row.group else "--"
        cells = [escape_text(op), escape_text(group), f"{row.calls_per_step:.3g}",
                 escape_text(human_bytes(row.size)) if row.size is not None else "--",
                 f"{row.time_us / 1000:.3g}", _rate(row.busbw)]
        rows.append(Tex(" & ".join(cells)))
    if not rows:
        rows.append(Tex(" & ".join(["none"] + ["--"] * (len(header) - 1))))
    legend = ", ".join(f"{k} {v}" for k, v in list(ops.items()) + list(dims.items()) if k != v)
    notes = [source_line(pset),
             (f"{legend}. " if legend else "") +
             "Per call, averaged over the traced ranks of each group and the profiled steps; calls per step and "
             "rank. Size: nccl-tests bytes; ms: time per call; busbw (GB/s) = size / time x 2(n-1)/n (all-reduce), "
             "(n-1)/n (all-gather, reduce-scatter), 1 (others); n: the group's ranks."]
    context = base_context(spec, "communication table", body_only, [], source=pset.source)
    context.update(colspec=Tex("ll" + "r" * (len(header) - 2)), header=Tex(" & ".join(header)), rows=rows,
                   footnote=[Tex(escape_text(n)) for n in notes], ncols=len(header), compact=True)
    return environment().get_template("table-summary.tex.j2").render(context)


def _ranks_text(group: tuple) -> str:
    if len(group) > 2 and list(group) == list(range(group[0], group[-1] + 1)):
        return f"{group[0]}\u2013{group[-1]}"
    if len(group) > 6:
        stride = group[1] - group[0]
        if all(b - a == stride for a, b in zip(group, group[1:])):
            return f"{group[0]}, {group[1]}, \u2026, {group[-1]}"
    return ", ".join(map(str, group))


# --- the command ---------------------------------------------------------------------------


KINDS = {"timeline": ("timeline",), "topology": ("topology",), "all": ("timeline", "topology", "comm"),
         "comm": ("comm",)}


def figure_profile_command(paths: list, out_dir, kind: str, formats, body_only: bool, steps: str | None = None,
                           width: str | None = None, mesh: list | None = None, notify=None) -> list:
    """What `dtgen figure PROFILE_DIR_OR_FILES` does; returns the written paths."""
    pset = load_profile_set(paths, mesh)
    for line in pset.warnings:
        if notify is not None:
            notify(line)
    window = select_steps(pset, parse_steps(steps))
    stem = stem_name(pset)
    first = Path(paths[0])
    out = Path(out_dir) if out_dir is not None else (first if first.is_dir() else first.parent) / "figures"
    spec = neutral_spec(f"Profiled run: {_origin(pset)}", width, len(pset.ranks))
    makers = {
        "timeline": lambda bare: render_timeline(spec, profile_timeline(pset, window, target_width_cm(spec)),
                                                 body_only=bare),
        "topology": lambda bare: render_profile_topology(pset, spec, bare),
        "comm": lambda bare: render_comm_table(pset, spec, bare),
    }
    written = []
    for name in KINDS.get(kind, KINDS["all"]):
        make = makers[name]
        written += write_outputs(make(False), out, f"measured-{stem}-{name}", tuple(formats) or ("tex",),
                                 body=make(True) if body_only else None, target_cm=target_width_cm(spec),
                                 notify=notify)
    return written
