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
from ..figures.topology import build_layout
from ..texsafe import escape_text
from .plots import stragglers
from .run import Run

_WORKER = re.compile(r"^w([1-9][0-9]*)$")
SENDING = ("grad", "act", "ring", "peer")


def human_bytes(value: float) -> str:
    """88104 -> '88.1 kB' (SI units, 3 significant digits)."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if value >= size:
            return f"{value / size:.3g} {unit}"
    return f"{value:.0f} B"


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
    layout = layout or build_layout(spec)
    steps = max(1, metrics["steps"])
    traffic = metrics["bytes"]
    step_ms = {w: t * 1000 for w, t in metrics["step_time_s"].items()}
    slow = tuple(stragglers(metrics["step_time_s"]))
    highlight = "otorange" if spec.figure.colors["worker"] != "otorange" else "otpurple"
    nodes = []
    for node in layout.nodes:
        match = _WORKER.match(node.name)
        if match and node.kind == "icon" and node.name in step_ms:
            text = f"{step_ms[node.name]:.1f} ms/step"  # the straggler is told by its colour and the note
            node = replace(node, label=Tex(f"{node.label}: {escape_text(text)}"),
                           color=highlight if node.name in slow else node.color)
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
            pos = 0.42 if _WORKER.match(src) else 0.58
            # Sloped along its link, on the outer side of the pair: the link that leaves the
            # worker's port higher up is labelled above, its partner below (TikZ keeps both upright).
            worker_port = edge.src if direction == "sent" else edge.dst
            side = ("above, sloped" if worker_port.dy >= 0 else "below, sloped") if edge.route == "line" \
                else edge.label_side
            edge = replace(edge, label=Tex(f"{edge.label}~{text}" if edge.label else text), label_pos=pos,
                           label_side=side)
            links.append(LinkBytes(edge.name, worker, direction, per_step))
        edges.append(edge)
    totals = sorted((w for w in out_edges if len(out_edges[w]) > 1 and _rank_of(w) in traffic), key=_rank_of)
    macros = dict(layout.macros)
    if "titlelabel" in macros:
        macros["titlelabel"] = Tex("Measured: " + macros["titlelabel"])
    own = [n for n in nodes if n.name == "note"]
    bottom = min((n.y for n in nodes if not n.rel), default=0.0)
    y = own[0].y - 0.95 if own else bottom - 1.45
    lines = [f"measured, mean of {metrics['steps']:,} steps: bytes per step on each link; step time per worker"]
    if totals:
        lines.append("per step, " + "; ".join(
            f"{w}: {human_bytes(traffic[_rank_of(w)]['sent'] / steps)} out, "
            f"{human_bytes(traffic[_rank_of(w)]['recv'] / steps)} in" for w in totals[:4])
            + (" ..." if len(totals) > 4 else ""))
    if slow:
        lines.append(f"straggler, highlighted: {', '.join(slow)}")
    text = Tex("\\\\".join(escape_text(line) for line in lines))
    nodes.append(Node("measured-note", own[0].x if own else layout.colsep, y - 0.2 * (len(lines) - 1), kind="text",
                      text=text))
    annotated = replace(layout, nodes=tuple(nodes), edges=tuple(edges), macros=macros)
    return Annotation(annotated, tuple(links), step_ms, slow)


_HOST = re.compile(r"^h([1-9][0-9]*)$")


def measured_hosts(layout: Layout, ranks: list) -> Layout:
    """Host boxes say where their workers actually ran: each box (h1..) gets the address
    run.json measured for its workers, or, when they ran on several machines (the spec's
    hosts did not match the nodes), how many. Boxes of workers without an address (a
    one-machine run) are left as the spec drew them."""
    addr = {f"w{r['rank'] + 1}": r.get("addr") for r in ranks if r.get("role") == "worker" and r.get("addr")}
    if not addr:
        return layout
    groups = []
    for group in layout.groups:
        seen = sorted({addr[m] for m in group.members if m in addr}) if _HOST.match(group.name) else []
        if seen:
            where = seen[0] if len(seen) == 1 else f"ran on {len(seen)} machines"
            group = replace(group, label=Tex(f"{group.label} ({escape_text(where)})"))
        groups.append(group)
    return replace(layout, groups=tuple(groups))


def render_annotated_topology(run: Run, body_only: bool = False) -> str:
    """The measured topology figure of a run as standalone TeX."""
    annotation = annotate_layout(run.spec, run.metrics)
    layout = measured_hosts(annotation.layout, run.info.get("ranks") or [])
    return render_topology(run.spec, body_only=body_only, layout=layout)



