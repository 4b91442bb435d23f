"""The spec's topology diagram annotated with what a run measured.

Starts from the figures' own Layout of the spec (so the picture is the same one), then
puts the measured bytes per step on each worker's links, the mean step time under
each worker (and, where the run measured memory per rank, its bytes on a line of their
own under each worker and server: metrics.json's `memory`), and draws the straggler (a worker STRAGGLER_RATIO slower than the median)
in the highlight colour. Its words (title, step times, traffic, footer, model note) are
the spec's figure.labels. Pure: Layout in, Layout out. Must not import torch.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

from ..figures.model import Layout, Node, Tex
from ..figures.render import render_topology
from ..figures.memory import total_bytes
from ..figures.spacing import (GAP, LINE_H, MEASURED_BREAK, effective_spacing, fitted_flow_run, icon_size, printed_cm,
                               text_cm)
from ..figures.textwidth import wrap_line
from ..figures.texts import label_tex, label_text, lane_text, sized_model_note
from ..figures.topology_fit import PT_PER_CM, compact_spec, fitted
from ..figures.plugin import plugin_of
from ..figures.topology import build_layout
from ..texsafe import escape_text
from ..workload import human_bytes
from .plots import stragglers
from .clearance import (LINK_LABEL_OFF_PT, box_half, link_label_size, link_labels_cross_labels, links_cross_labels,
                        link_length, sloped_labels_clear_of_labels, sloped_labels_cross)
from .run import Run, bytes_per_step, partial_ranks, steps_measured
from .source import device_icons, source, source_note

_WORKER = re.compile(r"^w([1-9][0-9]*)$")
SENDING = ("grad", "act", "ring", "peer")
# A flow link's symbol (the topology template's macros) where the spec's diagram labels no
# link of that flow: a measured link carries its symbol beside its bytes (_flow_symbols).
FLOW_SYMBOLS = {"grad": r"\gradlabel", "wts": r"\weightlabel"}


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


def annotate_layout(spec, metrics: dict, layout: Layout | None = None, seen: str = "measured",
                    source_line: str | None = None, ranks: list | None = None) -> Annotation:
    """The spec's Layout with measured bytes on links, step times under workers, the straggler marked.
    `seen` (measured | predicted) titles it; `source_line` (the hardware measured on, or the
    prediction's calibration) follows the footer's first line; `ranks` (run.json's: rank, id)
    name the ranks of metrics.json's memory (without them: the workers first, w1 rank 0)."""
    # bytes per step, each rank's by the steps it completed (an interrupted run's stop short of
    # metrics["steps"], the steps asked for, and not all at the same step)
    traffic, steps = bytes_per_step(metrics), 1
    memory = node_memory(metrics, ranks)  # node id -> bytes; {} for runs that did not measure it
    step_ms = {w: t * 1000 for w, t in metrics["step_time_s"].items()}
    # A fitted column's links converge on the server, too close for a label on each: where every
    # worker's links carry the same bytes (as printed), the flow labels say them once, stacked.
    plugin = plugin_of(spec)  # its strategy's figures plugin (strategies/<kind>/figures.py)
    once = fitted(spec) and plugin.flow_labels_once(spec) and \
        _alike([traffic.get(_rank_of(w), {}) for w in step_ms if _WORKER.match(w)], steps)
    given = layout is not None
    layout = layout or _layout_for(spec, step_ms, once, memory=memory)
    # a fitted parameter server's links are as long as their labels need (spacing.fitted_flow_run)
    run = fitted_flow_run(compact_spec(_spaced_spec(spec, step_ms, once))) \
        if fitted(spec) and plugin.flow_run(spec) else None
    slow = tuple(stragglers(metrics["step_time_s"]))
    # A time goes on its own line under every worker where a link would cut through a label
    # holding it on one line (a tall column's steep links: clearance.links_cross_labels).
    one_line = {w: f"{spec.topology.workers.label_of(w)}: {label_text(spec, 'step_time', ms=f'{ms:.1f}')}"
                for w, ms in step_ms.items() if _WORKER.match(w) and not _time_on_own_line(spec, w, ms)}
    # (or where a link's label, sloped below a link leaving a worker steeply down, would run into one)
    crowded = bool(one_line) and (links_cross_labels(spec, layout, one_line) or link_labels_cross_labels(
        spec, layout, one_line, _link_labels(spec, layout, traffic, steps, run, once)[0]))
    if crowded and not given and _column_elided(spec):  # its brace stands left of the labels as printed
        layout = _layout_for(spec, step_ms, once, crowded, memory)
    highlight = "otorange" if spec.figure.colors["worker"] != "otorange" else "otpurple"
    # a label with a memory line keeps its step time on a line of its own too: three narrow lines,
    # not a wide first line reaching under the links leaving the icon (in host boxes the one-line
    # time stays: a box as narrow as three short lines is narrower than its label)
    crowded = crowded or _memory_own_line(spec, memory)
    nodes, labelled = [], set()
    printed = {}  # worker -> the lines of its label as printed, in words (sloped_labels_clear_of_labels)
    for node in layout.nodes:
        match = _WORKER.match(node.name)
        if match and node.kind == "icon" and node.name in step_ms:
            text = label_tex(spec, "step_time", ms=f"{step_ms[node.name]:.1f}")  # the straggler: its colour and the note
            own = _time_on_own_line(spec, node.name, step_ms[node.name], crowded)
            label = f"{node.label}\\\\{text}" if own else f"{node.label}: {text}"
            node = replace(node, label=Tex(label), color=highlight if node.name in slow else node.color)
            name = spec.topology.workers.label_of(node.name)
            time = label_text(spec, "step_time", ms=f"{step_ms[node.name]:.1f}")
            printed[node.name] = [name, time] if own else [f"{name}: {time}"]
        if node.name in memory and node.kind == "icon" and node.label:  # its memory on a line of its own
            node = replace(node, label=Tex(f"{node.label}\\\\{_memory_tex(spec, memory[node.name])}"))
            labelled.add(node.name)
            if node.name in printed:
                printed[node.name].append(label_text(spec, "rank_memory", bytes=human_bytes(memory[node.name])))
        nodes.append(node)
    edges, links, out_edges = _link_labels(spec, layout, traffic, steps, run, once)
    nodes = _level_links_hold_labels(spec, nodes, edges, printed)
    # (a label sloped along a link moves along it, clear of a worker's label reaching under the link)
    edges = sloped_labels_clear_of_labels(spec, replace(layout, nodes=tuple(nodes)), edges, printed)
    # (a worker with several links either way: its bytes cannot be split by link, said as its totals)
    out_edges, in_edges = _worker_links(layout)
    totals = sorted((w for w in set(out_edges) | set(in_edges) if _rank_of(w) in traffic
                     and (len(out_edges.get(w, [])) > 1 or len(in_edges.get(w, [])) > 1)), key=_rank_of)
    macros = dict(layout.macros)
    if "titlelabel" in macros:
        macros["titlelabel"] = label_tex(spec, f"{seen}_title", tex={"title": macros["titlelabel"]})
    # The strategy's own note sits a little lower: the worker labels above it grew by their step
    # times (by a line where a time has a line of its own).
    grown = any(_time_on_own_line(spec, w, ms, crowded) for w, ms in step_ms.items() if _WORKER.match(w))
    drop = 0.25 + (LINE_H if grown and not fitted(spec) else 0.0) + (LINE_H if labelled and not fitted(spec) else 0.0)
    nodes = [replace(n, y=n.y - drop) if n.name == "note" else n for n in nodes]
    # An elided column's ellipsis sits midway between the label above it and the next icon:
    # half a line lower where that label grew a line the layout did not see (fitted: it did).
    # (a run with memory: the layout saw every line already, _label_with_time)
    if grown and not fitted(spec) and not memory:
        nodes = [replace(n, y=round(n.y - LINE_H / 2, 3))
                 if n.kind == "ellipsis" and _WORKER.match(n.name.removesuffix("-more")) else n for n in nodes]
    own = [n for n in nodes if n.name == "note"]
    lines = [label_text(spec, f"{seen}_note", steps=steps_measured(metrics))]
    short = partial_ranks(metrics, {r["rank"]: r["id"] for r in ranks or [] if isinstance(r, dict) and r.get("id")})
    if short:  # an interrupted or failed run: which ranks' counts end early, or are absent
        lines.append(f"counts per rank up to its last completed step; {short}")
    if source_line:
        lines.append(source_line)
    if once:
        lines.append(label_text(spec, "alike_note"))
    if totals:
        lines += _totals_lines(spec, totals, traffic, steps)
    if memory:  # what the bytes under the nodes are; ranks drawn without a label of their own (shard boxes) say theirs here
        unlabelled = [ident for ident in memory if ident not in labelled and not _WORKER.match(ident)]
        lines.append(label_text(spec, "memory_note"))
        if unlabelled:
            lines.append(", ".join(f"{_server_name(spec, ident)}: "
                                   f"{label_text(spec, 'rank_memory', bytes=human_bytes(memory[ident]))}"
                                   for ident in unlabelled))
    if slow:
        lines.append(label_text(spec, "straggler_note", workers=", ".join(slow)))
    lines = [part for line in lines for part in wrap_line(line, FOOTER_CHARS if fitted(spec) else NATURAL_FOOTER_CHARS)]
    text = Tex("\\\\".join(escape_text(line) for line in lines))
    # Hung below the strategy's bottom note, or below the lowest worker's label (a server's note
    # hangs beside the server instead): however many lines it has.
    labelled_workers = [n for n in nodes if _WORKER.match(n.name) and n.label and not n.rel]
    # (a layout without labelled worker icons, a mesh's grid: below its note wherever it hangs)
    below = "note" if own and (not own[0].rel or not labelled_workers) else \
        min(labelled_workers, key=lambda n: (n.y, -n.x)).name + "-label"
    gap = "6pt"
    host = next((g for g in layout.groups if below in g.members), None)
    lowest = None  # what the note hangs below, where that is not `below` itself
    if host is not None:  # clear of the host box around that label: below its lowest point, past its padding
        bottom = f"{host.name}-bottom"
        below = f"{bottom}" if bottom in host.members else f"{below}.south west"
        # (a box whose lowest member need not be that label, a ring of peers' side labels, a
        # tree's: the lowest point drawn so far, its members' and the data's, then its padding)
        lowest = None if bottom in host.members else "current bounding box.south"
        gap = "6pt+7pt"  # hostbox inner sep
    else:
        below = f"{below}.south west"
    rel = f"below={gap} of {below}, anchor=north west"
    drop = sum(float(part.removesuffix("pt")) for part in gap.split("+"))
    if lowest:
        rel = f"anchor=north west, at=({below} |- {lowest}), yshift=-{drop:g}pt"
    if fitted(spec) and any(n.name == "data" for n in nodes):
        # at a target width: from the figure's left edge (the data icon's), not the worker
        # column's, so its wrapped lines stay inside the drawing's width
        rel = f"anchor=north west, at=({lowest or below} -| data.west), yshift=-{drop:g}pt"
    nodes.append(Node("measured-note", kind="text", rel=rel, text=text))
    annotated = replace(layout, nodes=tuple(nodes), edges=tuple(edges), macros=macros)
    return Annotation(annotated, tuple(links), step_ms, slow)


def _totals_lines(spec, totals: list, traffic: dict, steps: int) -> list:
    """The footer's totals of the workers whose links cannot each be given their bytes (a rank's
    bytes are counted per rank, not per link): said once for a run of consecutive workers that all
    print the same (a gossip ring: "Worker 1-Worker 6 per step: ..."), else one per worker, four at most."""
    def said(worker):
        return tuple(human_bytes(traffic[_rank_of(worker)][d] / steps) for d in ("sent", "recv"))

    ranks = [_rank_of(w) for w in totals]
    if len(totals) > 2 and len({said(w) for w in totals}) == 1 and ranks == list(range(ranks[0], ranks[-1] + 1)):
        sent, recv = said(totals[0])
        who = f"{_who(spec, totals[0])}\u2013{_who(spec, totals[-1])}"
        return [label_text(spec, "worker_traffic", worker=who, sent=sent, recv=recv)]
    return ["; ".join(label_text(spec, "worker_traffic", worker=_who(spec, w), sent=said(w)[0], recv=said(w)[1])
                      for w in totals[:4]) + (" ..." if len(totals) > 4 else "")]


def _level_links_hold_labels(spec, nodes: list, edges, printed: dict | None = None) -> list:
    """Where a level link's label, now holding its bytes, is wider than the link (the drawer
    spaced its ends for its own shorter label: an all-reduce bar right of the column, a
    pipeline's next stage), what stands right of the link moves right until it holds the label
    and a gap; the data fan and the nodes left of the link stay. A label hung below its link
    reaches down beside the workers' labels (`printed`: their lines, in words): it must fit
    between those where they are wider than their icons."""
    printed = printed or {}
    at = {n.name: n for n in nodes}
    level = [e for e in edges if e.route == "line" and str(e.label) and e.src.dy == e.dst.dy
             and all(_holds_level_link(at.get(p.node)) for p in (e.src, e.dst))
             and (at[e.src.node].y == at[e.dst.node].y or e.src.level or e.dst.level)]
    for edge in sorted(level, key=lambda e: min(at[e.src.node].x, at[e.dst.node].x)):
        left, right = sorted((at[edge.src.node], at[edge.dst.node]), key=lambda n: n.x)
        below = "below" in edge.label_side
        length = right.x - _half_width(spec, right, printed if below else {}) - left.x \
            - _half_width(spec, left, printed if below else {})
        pos = min(edge.label_pos, 1 - edge.label_pos)  # its label is centred this far along, from the nearer end
        # (between two workers' labels, both estimates conservative: their excess is most of the gap)
        short = (link_label_size(spec, edge.label)[0] + (GAP / 4 if below else GAP)) / 2 / max(pos, 0.1) - length
        if short > SHORT_SPARE_CM:
            edge_x = right.x
            nodes = [replace(n, x=round(n.x + short, 3)) if not n.rel and n.x >= edge_x else n for n in nodes]
            at = {n.name: n for n in nodes}
    return nodes


SHORT_SPARE_CM = 0.05  # a link this much shorter than its label's estimate still holds it (text_cm is conservative)


def _holds_level_link(node) -> bool:
    """A worker's icon or the all-reduce bar: what a level link labelled with its bytes joins."""
    if node is None or node.rel:
        return False
    bar = node.kind == "box" and node.name in _SERVER_ENDS
    return bar or (node.kind == "icon" and bool(_WORKER.match(node.name)))


def _half_width(spec, node, printed: dict | None = None) -> float:
    """Half a link end's width: a box's, or a worker's icon's, or its label's where `printed`
    holds its lines and they are wider."""
    if node.kind == "box":
        return box_half(node)
    lines = (printed or {}).get(node.name, [])
    return max([icon_size(spec, "worker")[0] / 2] + [text_cm(line) / 2 for line in lines])


def _bytes_beside_flow_labels(spec) -> bool:
    """Whether every worker's link to something right of the column (an all-reduce bar) prints
    its bytes beside the flow label, level (a parameter server's links converge, their labels
    sloped, said once in a fitted figure: flow_labels_once)."""
    plugin = plugin_of(spec)
    return plugin.flow_run(spec) and not plugin.flow_labels_once(spec)


def _link_labels(spec, layout: Layout, traffic: dict, steps: int, run, once: bool) -> tuple:
    """The layout's edges with each worker's link labelled with its measured bytes per step
    (`run`: a fitted figure's FlowRun, or None), the LinkBytes drawn, and each worker's sending links."""
    # A link label is exact only where a worker has one link each way (parameter server,
    # ring); a worker with several (pipeline middle stages, trees, gossip) gets its totals
    # under its name instead, since the runner counts bytes per rank, not per link.
    out_edges, in_edges = _worker_links(layout)
    boxed = {m for g in layout.groups if _HOST.match(g.name) for m in g.members}
    symbols = _flow_symbols(layout)
    # an activation link's return link (the gradients a pipeline stage sends back): its label
    # stacks like the activations', two short lines in the gap between the stages
    returns = {(e.dst.node, e.src.node) for e in layout.edges if e.style == "act"}
    edges, links = [], []
    for edge in layout.edges:
        src, dst = edge.src.node, edge.dst.node
        flow = str(edge.label) or symbols.get(_flow_key(edge), "")
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
            # (beside the link, LINK_LABEL_OFF_PT off it: anchored on it, the arrow grazes the glyphs)
            above = worker_port.dy >= 0 if worker_port.dy or not worker_port.dx else \
                _above_is_toward(layout, edge, worker_port.dx)  # a pair side by side (a tree's): by their offsets
            side = f"{'above' if above else 'below'}={LINK_LABEL_OFF_PT:g}pt, sloped" \
                if edge.route == "line" else edge.label_side
            if run is None and other in _SERVER_ENDS and worker not in boxed and _bytes_beside_flow_labels(spec):
                pos = edge.label_pos  # mid-link: the bar moves right until the link holds it (_level_links_hold_labels)
            if run is not None and other in _SERVER_ENDS:  # between the column and the server
                if once and str(edge.label):  # the flow labels where the figure has them: bytes on those links only
                    pos, side = edge.label_pos, edge.label_side
                elif once:  # the other links: their symbol alone, sloped beside them, mid-link
                    pos = 0.5
                else:
                    pos = run.centre_pos() if _WORKER.match(src) else round(1 - run.centre_pos(), 3)
                    side = "above" if edge.both else side
            if edge.route == "ortho":  # a ring link: its traffic per step, not the chunk it carries first
                label = label_tex(spec, "link_bytes", bytes=human_bytes(per_step))
            elif edge.style == "act" or (src, dst) in returns:  # between pipeline stages: two short lines fit the gap
                label, side = Tex(f"{flow}\\\\{text}" if flow else text), f"{side}, align=center"
            elif once and run is not None and other in _SERVER_ENDS:
                # the bytes under the flow label: the gap to the server is sized for the label alone
                label = Tex(f"{edge.label}\\\\{text}" if edge.label else flow)
                side = f"{side}, align=center" if edge.label else side
            else:  # every link says what it carries, not only the one the spec's diagram labels
                label = Tex(f"{flow}~{text}" if flow else text)
                # (between two workers, on a link shorter than that line: its symbol over its bytes)
                if flow and edge.route == "line" and _worker_of(src) and _worker_of(dst) and \
                        link_label_size(spec, label)[0] > (link_length(spec, layout, edge) or 0.0):
                    label, side = Tex(f"{flow}\\\\{text}"), f"{side}, align=center"
            edge = replace(edge, label=label, label_pos=pos, label_side=side)
            links.append(LinkBytes(edge.name, worker, direction, per_step))
        elif flow and not edge.elided and not once and not str(edge.label):
            # no exact bytes (a worker with several links): the symbol alone, beside its link as
            # the labels with bytes sit (the diagram's side suits the link it labels only)
            side = f"{'above' if edge.src.dy >= 0 else 'below'}={LINK_LABEL_OFF_PT:g}pt, sloped"
            edge = replace(edge, label=Tex(flow), label_side=side)
        edges.append(edge)
    edges = _ring_return_clear_of_labels(edges)
    return edges, links, out_edges


def _above_is_toward(layout: Layout, edge, dx: float) -> bool:
    """Whether a label `above` its link, sloped (TikZ turns it upright: a link drawn leftwards
    reads right to left turned half round), lies toward the side the sign of `dx` points to
    (right: positive): the outer side of a pair of links set apart by their ports' dx."""
    at = {n.name: n for n in layout.nodes if not n.rel}
    a, b = (at.get(p.node.removesuffix("-label")) for p in (edge.src, edge.dst))
    if a is None or b is None:
        return dx < 0
    (ax, bx) = (n.x + p.dx / PT_PER_CM for n, p in ((a, edge.src), (b, edge.dst)))  # (a vertical pair leans by them)
    angle = math.atan2(b.y - a.y, bx - ax)
    if math.cos(angle) < -1e-9:  # drawn upside down: TikZ turns the label half round
        angle += math.pi
    return -math.sin(angle) * dx > 0  # `above`: the normal (-sin, cos), its x against dx's side


UNDIRECTED = ("peer",)  # a gossip link carries both its ends' sends (topology_peer: one line, arrows both ways)


def _worker_links(layout: Layout) -> tuple:
    """Each worker's sending links and its receiving links (edge names), the ones drawn elided
    included (they stand for links the worker has): a link ending at a worker's label (a tree's)
    is that worker's; a link of both directions (UNDIRECTED) sends and receives at both ends.
    A link's bytes are exact only where it is its worker's one link that way (_link_labels)."""
    out_edges: dict = {}
    in_edges: dict = {}
    for edge in layout.edges:
        if edge.style not in SENDING + ("wts",):
            continue
        src, dst = (_worker_of(p.node) for p in (edge.src, edge.dst))
        both = edge.style in UNDIRECTED or edge.both
        for worker, links in ((src, out_edges), (dst, in_edges)) + (((dst, out_edges), (src, in_edges)) if both else ()):
            if worker and edge.name not in links.get(worker, []):
                links.setdefault(worker, []).append(edge.name)
    return out_edges, in_edges


def _worker_of(node: str) -> str | None:
    """The worker a link end belongs to: its icon or its label (w2, w2-label); None for others."""
    name = node.removesuffix("-label")
    return name if _WORKER.match(name) else None


def _flow_key(edge) -> tuple | None:
    """What a link carries, as the spec's diagram names it: its style and the kind of node
    at its far end (a worker, the server, the shard group, the all-reduce bar), for a straight
    link from a worker; None for the others (the data fan, ring and tree routes, whose labels
    are chunks and phases)."""
    if edge.route != "line" or edge.style not in SENDING + ("wts",):
        return None
    src, dst = edge.src.node, edge.dst.node
    if _WORKER.match(src) and _WORKER.match(dst):
        return edge.style, "worker"
    end = dst if _WORKER.match(src) else src if _WORKER.match(dst) else None
    return (edge.style, end) if end in _SERVER_ENDS else None


def _flow_symbols(layout: Layout) -> dict:
    """Each flow's symbol (_flow_key -> TeX) as the spec's diagram labels it, on one link of the
    flow (sync_pairs: the first worker's gradients, the last one's weights; a pipeline's first
    stages): every measured link of the flow carries it. Links to a server or a bar whose
    diagram labels none take the template's gradient and weight macros."""
    symbols = {(style, end): macro for style, macro in FLOW_SYMBOLS.items() for end in _SERVER_ENDS}
    for edge in layout.edges:
        key = _flow_key(edge)
        if key is not None and str(edge.label):
            symbols[key] = str(edge.label)
    return symbols


def node_memory(metrics: dict, ranks: list | None) -> dict:
    """Node id (w1, ps, ps2) -> the measured bytes of its rank (figures.memory.total_bytes:
    parameters, gradients, optimizer state, activations); {} where the run measured none."""
    memory = metrics.get("memory") or {}
    ids = {r["rank"]: r["id"] for r in ranks or [] if isinstance(r, dict) and "rank" in r and r.get("id")}
    out = {}
    for rank, entry in memory.items():
        ident = ids.get(rank) or f"w{rank + 1}"  # without run.json's ranks: workers come first
        out[ident] = total_bytes(entry)
    return out


def _memory_own_line(spec, memory) -> bool:
    """Whether a memory line moves the step time onto a line of its own (annotate_layout)."""
    return bool(memory) and spec.topology.hosts < 2


def _server_name(spec, ident: str) -> str:
    """A server's (shard's) name as its box prints it: Shard 1; another rank: its id."""
    servers = spec.topology.servers
    return servers.label_of(ident) if ident in servers.ids else ident


def _memory_tex(spec, nbytes: int) -> Tex:
    return label_tex(spec, "rank_memory", bytes=human_bytes(nbytes))


def _time_on_own_line(spec, worker: str, ms: float, crowded: bool = False) -> bool:
    """True where a worker's step time goes on a line of its own under its label: where the
    figure's links would cut through labels holding it on one line (`crowded`), in a fitted
    figure (the label stays about as narrow as the icon), where the label is wider than
    the icon already (it would reach under the links leaving the icon, and its neighbours'),
    and, where the layout is not spaced for the labels as printed (no host boxes:
    _layout_for), where label and time on one line would reach further past the icon than
    the labels of the links leaving it stay clear of (the CPU icon is narrower than the GPU card)."""
    label = spec.topology.workers.label_of(worker)
    icon = icon_size(spec, "worker")[0]
    if crowded or fitted(spec) or printed_cm(spec, label, "worker") > icon:
        return True
    one_line = f"{label}: {label_text(spec, 'step_time', ms=f'{ms:.1f}')}"
    return spec.topology.hosts < 2 and printed_cm(spec, one_line, "worker") > icon + ONE_LINE_SPARE_CM


def _alike(traffic: list, steps: int) -> bool:
    """True when the workers (their ranks' traffic) all send the same bytes per step and all
    receive the same, as the figure prints them."""
    return all(len({human_bytes(t.get(d, 0) / steps) for t in traffic}) == 1 for d in ("sent", "recv"))


_HOST = re.compile(r"^h([1-9][0-9]*)$")
_BYTES = "888.8 kB"  # the widest bytes label, for spacing
_SERVER_ENDS = ("ps", "psgroup", "ar")  # what the links of a parameter server (an all-reduce bar) end at


def measured_hosts(spec, layout: Layout, ranks: list, wrap: bool = False) -> Layout:
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
            where = seen[0] if len(seen) == 1 else label_text(spec, "ran_on", n=len(seen))
            joint = "\\\\" if wrap else " "
            group = replace(group, label=Tex(f"{group.label}{joint}({escape_text(where)})"))
        groups.append(group)
    return replace(layout, groups=tuple(groups))


def _layout_for(spec, step_ms: dict, once: bool = False, crowded: bool = False, memory: dict | None = None) -> Layout:
    """The spec's layout; at a target width (compact gaps), in host boxes (where workers sit
    side by side, or links must clear the box's padding), or elided (a brace left of the
    labels, ring links right of them), placed as if each worker's label
    already held its step time and each link label its bytes, so the longer labels get their room.
    `memory` (node id -> bytes): each label holds a line more (the rank's memory), so a worker column's rows
    are a line further apart than the spacing its labels needed without it."""
    layout = build_layout(spec)
    plain = not fitted(spec) and spec.topology.hosts < 2 and not _column_elided(spec)
    converge = plain and _links_converge(spec)
    if plain and not memory and not converge:
        return layout
    # (a plain layout keeps the spec's labels: its drawers may show them elsewhere, a pipeline's stage boxes)
    spaced = spec if plain else _spaced_spec(spec, step_ms, once, crowded, memory)
    if memory and plain:  # (the other layouts' estimates count the label's lines: _label_with_time)
        # a line for the memory, and one for a step time that would have shared the name's line
        moved = _memory_own_line(spec, memory) and any(
            not _time_on_own_line(spec, w, ms, crowded) for w, ms in step_ms.items() if _WORKER.match(w))
        rowsep = effective_spacing(spaced, plugin_of(spec).spacing_needs).rowsep + LINE_H * (1 + moved)
        spaced = replace(spaced, figure=replace(spaced.figure, rowsep=round(rowsep, 2)))
    if converge:
        return replace(_converging_layout(spec, spaced), macros=layout.macros)
    return replace(build_layout(spaced), macros=layout.macros)


WIDEN_CM, WIDEN_STEPS = 0.25, 24  # how a server moves right until its links' labels clear each other, and how far


def _converging_layout(spec, spaced) -> Layout:
    """The layout of links converging on a server (_links_converge), every one labelled with
    its flow and its bytes: spaced for the labels with their bytes (_flows_with_bytes), then
    the server moved right, WIDEN_CM at a time, until no two labels, sloped along their links,
    run into each other or into another link (clearance.sloped_labels_cross: estimates, the
    geometry check judges); at most WIDEN_STEPS times, else as first spaced."""
    spaced = _flows_with_bytes(spaced)
    colsep = effective_spacing(spaced, plugin_of(spec).spacing_needs).colsep
    first = build_layout(spaced)
    widest = {k: {"sent": _WIDEST_BYTES, "recv": _WIDEST_BYTES} for k in range(spec.topology.workers.count)}
    for step in range(WIDEN_STEPS + 1):
        wide = replace(spaced, figure=replace(spaced.figure, colsep=round(colsep + step * WIDEN_CM, 2))) \
            if step else spaced
        layout = build_layout(wide) if step else first
        if not sloped_labels_cross(spec, layout, _link_labels(spec, layout, widest, 1, None, False)[0]):
            return layout
    return first


_WIDEST_BYTES = 888e3  # bytes printed with three digits and a unit: as wide as a link's bytes get


def _links_converge(spec) -> bool:
    """Whether every worker's links run to one server (or its shards), converging on it, their
    labels sloped beside them (a parameter server's, flow_labels_once)."""
    plugin = plugin_of(spec)
    return plugin.flow_run(spec) and plugin.flow_labels_once(spec)


def _flows_with_bytes(spec):
    """The spec with its flow labels as a measured link prints them, with their bytes ("888 kB",
    a little spare), for the layout's spacing."""
    flows = {k: f"{v}~{_BYTES}" for k, v in spec.figure.labels.items() if k in ("grad", "weight")}
    return replace(spec, figure=replace(spec.figure, labels={**spec.figure.labels, **flows}))


def _column_elided(spec) -> bool:
    """Whether the worker column is elided: its brace and ring links must clear the widened labels."""
    return spec.topology.workers.count > spec.figure.max_workers_drawn


def _spaced_spec(spec, step_ms: dict, once: bool = False, crowded: bool = False, memory: dict | None = None):
    """The spec with the labels the annotated figure prints (_layout_for): each worker's holds its
    step time (and, with `memory`, a line for its bytes), each link's its bytes per step."""
    memory = memory or {}
    workers = spec.topology.workers
    labels = {**workers.labels,
              **{w: _label_with_time(spec, w, ms, crowded, memory.get(w) if memory else None)
                 for w, ms in step_ms.items() if _WORKER.match(w)}}
    wide = replace(spec, topology=replace(spec.topology, workers=replace(workers, labels=labels)))
    if spec.topology.hosts > 1 or fitted(spec):  # a link label gains its bytes per step ("888 kB", a little spare)
        # (said once, under the flow label: as wide as the wider of the two)
        flows = {k: (max(v, _BYTES, key=text_cm) if once else f"{v}~{_BYTES}")
                 for k, v in spec.figure.labels.items() if k in ("grad", "weight")}
        wide = replace(wide, figure=replace(spec.figure, labels={**spec.figure.labels, **flows}))
    return wide


ONE_LINE_SPARE_CM = 1.5  # how far past its icon a worker's one-line label may reach (0.75 cm each side)
FOOTER_CHARS = 46  # a fitted figure's footer line, at most (a wide glyph counts twice): it must not widen the figure
NATURAL_FOOTER_CHARS = 96  # and a natural-width figure's: a list of totals stays about as wide as the drawing


def _label_with_time(spec, worker: str, ms: float, crowded: bool = False, memory: int | None = None) -> str:
    """A worker's label as annotate_layout prints it, for the layout's estimates: a fitted
    figure's step time on a line of its own, which it never breaks (a no-break space keeps
    spacing.printed_lines from splitting it); a natural-width figure's estimates see one line
    per label, so a time on a line of its own there counts by the wider of label and time."""
    label = spec.topology.workers.label_of(worker)
    time = label_text(spec, "step_time", ms=f"{ms:.1f}")
    mem = label_text(spec, "rank_memory", bytes=human_bytes(memory)) if memory is not None else ""
    if fitted(spec):
        return label + _fitted_lines(time, mem)
    own_line = _time_on_own_line(spec, worker, ms, crowded or _memory_own_line(spec, mem))
    if mem:  # the lines as printed (spacing.MEASURED_BREAK): the memory line adds to the label's height
        return MEASURED_BREAK.join([label, time, mem] if own_line else [f"{label}: {time}", mem])
    if own_line:
        return max(label, time, key=text_cm)
    return f"{label}: {time}"


def _fitted_lines(time: str, mem: str) -> str:
    """A fitted figure's estimate of the step time and memory lines under a worker's name: two
    lines (spacing.printed_lines counts them: rows, boxes and notes make room), each as wide
    as the wider of the two, written as the wider one and "{}" (which prints nothing), so a
    drawer that measures a label whole (a fitted pipeline spacing its stages) sees it no wider
    than one line of time or memory more would make it."""
    wider = max(time, mem, key=text_cm) if mem else time
    return "\n" + wider.replace(" ", "\u00a0") + ("\n{}" if mem else "")


def _who(spec, worker: str) -> str:
    """How the footer names a worker: as its lane (a pipeline's stage), else its label."""
    return lane_text(spec, worker)


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
    """The measured (or predicted) topology figure of a run as standalone TeX: titled by its
    source, its devices drawn as the ranks used them, the hardware or calibration in its footer."""
    spec = device_icons(run)
    annotation = annotate_layout(spec, run.metrics, seen=source(run), source_line=source_note(run),
                                 ranks=run.info.get("ranks"))
    layout = measured_hosts(spec, annotation.layout, run.info.get("ranks") or [], wrap=fitted(spec))
    layout = _built_model_shards(layout, run)
    layout = plugin_of(spec).annotate_measured(spec, layout, run)
    return render_topology(spec, body_only=body_only, layout=layout, note=_built_model_note(run))


def _built_model_note(run: Run) -> str | None:
    """The model note of what the run built (run.json's model, from the launcher's preflight:
    a python model's real size), in the spec's words; None (the spec's note) when run.json has none."""
    built = run.info.get("model") or {}
    if "params" not in built or "grad_bytes" not in built:
        return built.get("description")
    model = run.spec.training.model
    name = model.get("entry", built.get("kind")) if built.get("kind") == "python" else built.get("kind", "mlp")
    return sized_model_note(run.spec, name, built["params"], built["grad_bytes"])


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
