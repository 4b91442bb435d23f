"""The spec's topology diagram annotated with what a run measured.

Starts from the figures' own Layout of the spec (so the picture is the same one), then
puts the measured bytes per step on each worker's links, the mean step time under
each worker, and draws the straggler (a worker STRAGGLER_RATIO slower than the median)
in the highlight colour. Pure: Layout in, Layout out. Must not import torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from ..figures.model import Layout, Node, Tex
from ..figures.render import render_topology
from ..figures.spacing import fitted_flow_run, text_cm
from ..figures.topology_fit import compact_spec, fitted
from ..figures.topology import build_layout, layout_kind
from ..texsafe import escape_text
from ..workload import human_bytes
from .plots import stragglers
from .run import Run

_WORKER = re.compile(r"^w([1-9][0-9]*)$")
SENDING = ("grad", "act", "ring", "peer")


@dataclass(frozen=True)
class LinkBytes:
    edge: str  # Edge.name
    worker: str
    direction: str  # sent | recv
    per_step: float


@dataclass(frozen=True)
class Annotation:
    layout: Layout
    links: tuple  # LinkBytes drawn
    step_ms: dict  # worker -> mean step time (ms)
    stragglers: tuple


def _rank_of(worker: str) -> int:
    return int(worker[1:]) - 1  # workers come first: w1 is rank 0 (runner-interface.md)


def annotate_layout(spec, metrics: dict, layout: Layout | None = None) -> Annotation:
    """The spec's Layout with measured bytes on links, step times under workers, the straggler marked."""
    steps = max(1, metrics["steps"])
    traffic = metrics["bytes"]
    step_ms = {w: t * 1000 for w, t in metrics["step_time_s"].items()}
    layout = layout or _layout_for(spec, step_ms)
    # a fitted parameter server's links are as long as their labels need (spacing.fitted_flow_run)
    run = fitted_flow_run(compact_spec(_spaced_spec(spec, step_ms))) \
        if fitted(spec) and layout_kind(spec) in _FLOW_RUN_KINDS else None
    slow = tuple(stragglers(metrics["step_time_s"]))
    highlight = "otorange" if spec.figure.colors["worker"] != "otorange" else "otpurple"
    nodes = []
    for node in layout.nodes:
        match = _WORKER.match(node.name)
        if match and node.kind == "icon" and node.name in step_ms:
            text = escape_text(f"{step_ms[node.name]:.1f} ms/step")  # the straggler is told by its colour and the note
            # a fitted figure puts the time on a line of its own: the label stays about as narrow as the icon
            label = f"{node.label}\\\\{text}" if fitted(spec) else f"{node.label}: {text}"
            node = replace(node, label=Tex(label), color=highlight if node.name in slow else node.color)
        nodes.append(node)
    # A link label is exact only where a worker has one link each way (parameter server,
    # ring); a worker with several (pipeline middle stages, trees, gossip) gets its totals
    # under its name instead, since the runner counts bytes per rank, not per link.
    out_edges: dict = {}
    in_edges: dict = {}
    for edge in layout.edges:
        if edge.elided:
            continue
        if edge.style in SENDING and _WORKER.match(edge.src.node):
            out_edges.setdefault(edge.src.node, []).append(edge.name)
        if edge.style in SENDING + ("wts",) and _WORKER.match(edge.dst.node):
            in_edges.setdefault(edge.dst.node, []).append(edge.name)
    boxed = {m for g in layout.groups if _HOST.match(g.name) for m in g.members}
    # A fitted column's links converge on the server, too close for a label on each: where every
    # worker's links carry the same bytes (as printed), the flow labels say them once.
    ranks = [_rank_of(w) for w in sorted(set(out_edges) | set(in_edges))]
    once = run is not None and layout_kind(spec) != "allreduce" and _alike([traffic.get(r, {}) for r in ranks], steps)
    edges, links = [], []
    for edge in layout.edges:
        src, dst = edge.src.node, edge.dst.node
        found = None
        if edge.style in SENDING and out_edges.get(src) == [edge.name]:
            found = (src, "sent")
        elif edge.style == "wts" and in_edges.get(dst) == [edge.name]:
            found = (dst, "recv")
        if found and _rank_of(found[0]) in traffic:
            worker, direction = found
            per_step = traffic[_rank_of(worker)][direction] / steps
            text = escape_text(human_bytes(per_step))
            # Near the worker end, where the links of different workers are far apart.
            # (a fitted figure's rows are close: nearer the middle, clear of the next worker's label)
            # (a worker in a host box: past the box's padding, so the label clears the box's border)
            near = 0.5 if fitted(spec) else 0.42
            other = dst if direction == "sent" else src
            if worker in boxed and other not in boxed and edge.route == "line":
                near = 0.58
            pos = near if _WORKER.match(src) else round(1 - near, 3)
            if edge.route == "ortho":  # a ring link: beside its vertical run, as drawn
                pos = edge.label_pos
            # Sloped along its link, on the outer side of the pair: the link that leaves the
            # worker's port higher up is labelled above, its partner below (TikZ keeps both upright).
            worker_port = edge.src if direction == "sent" else edge.dst
            side = ("above, sloped" if worker_port.dy >= 0 else "below, sloped") if edge.route == "line" \
                else edge.label_side
            if run is not None and other in _SERVER_ENDS:  # between the column and the server
                if once:  # the flow labels where the figure has them: bytes on those links only
                    pos, side = edge.label_pos, edge.label_side
                else:
                    pos = run.centre_pos() if _WORKER.match(src) else round(1 - run.centre_pos(), 3)
                    side = "above" if edge.both else side
            if edge.route == "ortho":  # a ring link: its traffic per step, not the chunk it carries first
                label = Tex(f"{text}/step")
            elif edge.style == "act":  # between pipeline stages: two short lines fit the gap
                label, side = Tex(f"{edge.label}\\\\{text}" if edge.label else text), f"{side}, align=center"
            elif once and run is not None and other in _SERVER_ENDS:
                label = Tex(f"{edge.label}~{text}" if edge.label else "")
            else:
                label = Tex(f"{edge.label}~{text}" if edge.label else text)
            edge = replace(edge, label=label, label_pos=pos, label_side=side)
            links.append(LinkBytes(edge.name, worker, direction, per_step))
        edges.append(edge)
    edges = _ring_return_clear_of_labels(edges)
    totals = sorted((w for w in out_edges if len(out_edges[w]) > 1 and _rank_of(w) in traffic), key=_rank_of)
    macros = dict(layout.macros)
    if "titlelabel" in macros:
        macros["titlelabel"] = Tex("Measured: " + macros["titlelabel"])
    # The strategy's own note sits a little lower: the worker labels above it grew by their step times.
    nodes = [replace(n, y=n.y - 0.25) if n.name == "note" else n for n in nodes]
    own = [n for n in nodes if n.name == "note"]
    lines = [f"measured, mean of {metrics['steps']:,} steps: traffic per link per step; step time per worker"]
    if once:
        lines.append("every worker's links alike: labelled once")
    if totals:
        lines.append("; ".join(
            f"{_who(spec, w)} per step: {human_bytes(traffic[_rank_of(w)]['sent'] / steps)} out, "
            f"{human_bytes(traffic[_rank_of(w)]['recv'] / steps)} in" for w in totals[:4])
            + (" ..." if len(totals) > 4 else ""))
    if slow:
        lines.append(f"straggler, highlighted: {', '.join(slow)}")
    if fitted(spec):
        lines = [part for line in lines for part in _wrap(line)]
    text = Tex("\\\\".join(escape_text(line) for line in lines))
    # Hung below the strategy's bottom note, or below the lowest worker's label (a server's note
    # hangs beside the server instead): however many lines it has.
    below = "note" if own and not own[0].rel else min((n for n in nodes if _WORKER.match(n.name) and n.label and not n.rel),
                                   key=lambda n: (n.y, -n.x)).name + "-label"
    gap = "6pt"
    host = next((g for g in layout.groups if below in g.members), None)
    if host is not None:  # clear of the host box around that label: below its lowest point, past its padding
        bottom = f"{host.name}-bottom"
        below = f"{bottom}" if bottom in host.members else f"{below}.south west"
        gap = "6pt+7pt"  # hostbox inner sep
    else:
        below = f"{below}.south west"
    nodes.append(Node("measured-note", kind="text", rel=f"below={gap} of {below}, anchor=north west",
                      text=text))
    annotated = replace(layout, nodes=tuple(nodes), edges=tuple(edges), macros=macros)
    return Annotation(annotated, tuple(links), step_ms, slow)


def _alike(traffic: list, steps: int) -> bool:
    """True when the workers (their ranks' traffic) all send the same bytes per step and all
    receive the same, as the figure prints them."""
    return all(len({human_bytes(t.get(d, 0) / steps) for t in traffic}) == 1 for d in ("sent", "recv"))


_HOST = re.compile(r"^h([1-9][0-9]*)$")
_SERVER_ENDS = ("ps", "psgroup", "ar")  # what the links of a parameter server (an all-reduce bar) end at
_FLOW_RUN_KINDS = ("parameter-server", "central-storage", "allreduce")  # drawn with spacing.fitted_flow_run


def measured_hosts(layout: Layout, ranks: list, wrap: bool = False) -> Layout:
    """Host boxes say where their workers actually ran: each box (h1..) gets the address
    run.json measured for its workers, or, when they ran on several machines (the spec's
    hosts did not match the nodes), how many. Boxes of workers without an address (a
    one-machine run) are left as the spec drew them. `wrap` (a fitted figure): the address
    on a line of its own, so the label is no wider than the box and links leave it alone."""
    addr = {f"w{r['rank'] + 1}": r.get("addr") for r in ranks if r.get("role") == "worker" and r.get("addr")}
    if not addr:
        return layout
    groups = []
    for group in layout.groups:
        seen = sorted({addr[m] for m in group.members if m in addr}) if _HOST.match(group.name) else []
        if seen:
            where = seen[0] if len(seen) == 1 else f"ran on {len(seen)} machines"
            joint = "\\\\" if wrap else " "
            group = replace(group, label=Tex(f"{group.label}{joint}({escape_text(where)})"))
        groups.append(group)
    return replace(layout, groups=tuple(groups))


def _layout_for(spec, step_ms: dict) -> Layout:
    """The spec's layout; at a target width (compact gaps), or in host boxes (where workers sit
    side by side, or links must clear the box's padding), placed as if each worker's label
    already held its step time and each link label its bytes, so the longer labels get their room."""
    layout = build_layout(spec)
    if not fitted(spec) and spec.topology.hosts < 2:
        return layout
    return replace(build_layout(_spaced_spec(spec, step_ms)), macros=layout.macros)


def _spaced_spec(spec, step_ms: dict):
    """The spec with the labels the annotated figure prints (_layout_for): each worker's holds its
    step time, each link's its bytes per step."""
    workers = spec.topology.workers
    # as annotate_layout prints them: a fitted figure's step time on a line of its own, which
    # it never breaks (a no-break space keeps spacing.printed_lines from splitting it)
    joint, space = ("\n", "\u00a0") if fitted(spec) else (": ", " ")
    labels = {**workers.labels, **{w: f"{workers.label_of(w)}{joint}{ms:.1f}{space}ms/step" for w, ms in step_ms.items()
                                   if _WORKER.match(w)}}
    wide = replace(spec, topology=replace(spec.topology, workers=replace(workers, labels=labels)))
    if spec.topology.hosts > 1 or fitted(spec):  # a link label gains its bytes per step ("888 kB", a little spare)
        flows = {k: f"{v}~888.8 kB" for k, v in spec.figure.labels.items() if k in ("grad", "weight")}
        wide = replace(wide, figure=replace(spec.figure, labels={**spec.figure.labels, **flows}))
    return wide


def _wrap(line: str, width: int = 46) -> list[str]:
    """A long footer line as several (a fitted figure must not be widened by its footer)."""
    words, lines = line.split(" "), [""]
    for word in words:
        if lines[-1] and len(lines[-1]) + 1 + len(word) > width:
            lines.append(word)
        else:
            lines[-1] = f"{lines[-1]} {word}".strip()
    return lines


def _who(spec, worker: str) -> str:
    """How the footer names a worker: the pipeline stage it runs, else its label."""
    if spec.strategy.kind == "pipeline":
        return f"Stage {worker[1:]}"
    return spec.topology.workers.label_of(worker)


def _ring_return_clear_of_labels(edges: list) -> list:
    """Ring links are labelled right of their inner bend; the return edge runs further out, past the longest label."""
    inner = [e for e in edges if e.route == "ortho" and e.label]
    if not inner:
        return edges
    outer = max(e.dx for e in edges if e.route == "ortho")
    widest = max(text_cm(e.label) for e in inner if e.dx < outer) if any(e.dx < outer for e in inner) else 0.0
    need = min(e.dx for e in inner) + widest + 0.35
    return [replace(e, dx=round(max(e.dx, need), 2), label_pos=e.label_pos) if e.route == "ortho" and e.dx == outer else e
            for e in edges]


def render_annotated_topology(run: Run, body_only: bool = False) -> str:
    """The measured topology figure of a run as standalone TeX."""
    annotation = annotate_layout(run.spec, run.metrics)
    layout = measured_hosts(annotation.layout, run.info.get("ranks") or [], wrap=fitted(run.spec))
    layout = _built_model_shards(layout, run)
    # run.json's model (from the launcher's preflight) gives a python model's real size
    note = (run.info.get("model") or {}).get("description")
    return render_topology(run.spec, body_only=body_only, layout=layout, note=note)


def _built_model_shards(layout: Layout, run: Run) -> Layout:
    """A python model's shard boxes list the tensors the run's model really had (run.json,
    from the launcher's preflight); the spec alone cannot know them."""
    shards = (run.info.get("model") or {}).get("shards") or {}
    if run.spec.training.model_kind != "python" or not shards:
        return layout
    from ..figures.topology_ps import shard_text

    nodes = tuple(replace(n, text=shard_text(run.spec, n.name, shards[n.name])) if n.name in shards and n.kind == "box"
                  else n for n in layout.nodes)
    return replace(layout, nodes=nodes)
