"""Topology layouts of all-reduce: native (a collective bar), ring, tree and hierarchical
(intra-host reduce, inter-host ring). Must not import torch.
"""

from __future__ import annotations

import dataclasses
import math

from ..texsafe import render_label
from .model import Brace, Edge, Group, Layout, Node, Port, Tex, elide
from .topology_fit import fitted, hosts_drawn
from .spacing import (GAP, HOST_PAD, LABEL_H, LINE_H, PSBOX_W, Spacing, fitted_flow_run, icon_size, printed_cm,
                      printed_lines)
from .texts import FLOW_MACROS, label_tex
from .topology_common import (column_ys, count_text, data_fan, data_node, ellipsis_node, host_groups, make_layout,
                              more_name, worker_column, worker_node)

def phase_tex(spec, phase: str) -> Tex:
    """A phase's name (figure.labels.phases) where the topology labels the links doing it."""
    return Tex(render_label(spec.figure.labels["phases"][phase]))


def allreduce_layout(spec, sp: Spacing) -> Layout:
    colsep = sp.colsep
    nodes, members, elided = worker_column(spec, sp, colsep)
    edges, braces = data_fan(spec, members, elided, spec.topology.workers.count)
    ys = [n.y for n in nodes if n.kind != "coord"]
    height = max(1.6, max(ys) - min(ys) + 1.2)
    # A fitted figure gives the bar its own gap, its links just long enough for their labels.
    run = fitted_flow_run(spec) if fitted(spec) else None
    x = colsep + run.end + PSBOX_W / 2 if run else 1.6 * colsep
    nodes.append(Node("ar", x, 0.0, kind="box", style="psbox", min_height=height,
                      text=Tex(f"\\textbf{{{label_tex(spec, 'allreduce_box')}}}\\\\[1pt]"
                               + label_tex(spec, "allreduce_mean", tex=FLOW_MACROS))))
    colors = spec.figure.colors
    for k, member in enumerate(members):
        edges.append(Edge(Port(member, "east"), Port("ar", "west", level=f"{member}.east"), "grad", both=True,
                          label=Tex(r"\gradlabel") if k == 0 else Tex(""), label_side="above",
                          label_pos=run.centre_pos() if run else 0.5, label_color=f"{colors['grad']}!85!otink"))
    return make_layout(spec, sp, [data_node(spec)] + nodes, edges, host_groups(spec, members, elided), braces)


def ring_layout(spec, sp: Spacing) -> Layout:
    colsep = sp.colsep
    count = spec.topology.workers.count
    nodes, members, elided = worker_column(spec, sp, colsep)
    edges, braces = data_fan(spec, members, elided, count)
    # the links turn right of the icons and of their labels, where a label is the wider (and
    # of the host boxes around them)
    widest = max(printed_cm(spec, spec.topology.workers.label_of(m), "worker") for m in members)
    boxed = HOST_PAD if spec.topology.hosts > 1 and not elided else 0.0
    inner = max(0.55, (widest - icon_size(spec, "worker")[0]) / 2 + 0.25 + boxed)
    outer = inner + 0.7
    for a, b in zip(members, members[1:]):
        skipped = int(b[1:]) - int(a[1:]) > 1
        edges.append(Edge(Port(a, "east", dy=-4), Port(b, "east", dy=4), "ring", route="ortho", dx=inner,
                          elided=skipped, label=Tex("" if skipped else f"$c_{{{a[1:]}}}$"),
                          label_side="right", label_pos=0.25))
    last, first = members[-1], members[0]
    edges.append(Edge(Port(last, "east", dy=-4), Port(first, "east", dy=4), "ring", route="ortho", dx=outer,
                      label=Tex(f"$c_{{{last[1:]}}}$"), label_side="right", label_pos=0.25))
    bottom = min(n.y for n in nodes)
    # under the last worker's label (its lines) and its host box
    lines = len(printed_lines(spec, spec.topology.workers.label_of(members[-1]), "worker"))
    below = 1.45 + LINE_H * (lines - 1) + (0.35 if spec.topology.hosts > 1 and not elided else 0.0)
    nodes.append(Node("note", colsep + 0.2, bottom - below, kind="text",
                      text=Tex(label_tex(spec, "ring_chunks", tex=FLOW_MACROS, n=count_text(count)) + "\\\\"
                               + label_tex(spec, "ring_steps", steps=count_text(2 * (count - 1))))))
    return make_layout(spec, sp, [data_node(spec)] + nodes, edges, host_groups(spec, members, elided), braces)


def tree_layout(spec, sp: Spacing) -> Layout:
    colsep, rowsep = sp.colsep, sp.rowsep
    count = spec.topology.workers.count
    limit = spec.figure.max_workers_drawn
    if count <= limit:
        drawn = list(range(1, count + 1))
    else:
        depth = int(math.log2(limit))  # full levels 0..depth-1 fit in `limit - 1` nodes
        drawn = list(range(1, 2 ** depth))
    # Tidy layout: leaves left to right in order, parents centred over their children.
    xs: dict[int, float] = {}
    next_x = [0.0]

    def place(i):
        kids = [c for c in (2 * i, 2 * i + 1) if c in drawn_set]
        for c in kids:
            place(c)
        if kids:
            xs[i] = sum(xs[c] for c in kids) / len(kids)
        else:
            xs[i] = next_x[0]
            next_x[0] += 3.0

    drawn_set = set(drawn)
    place(1)
    # a level apart as far as its labels' lines need (a measured label holds its step time and
    # memory on lines of their own), and a line more: the links between a label and the icons
    # below it hold a sloped label of their own (a measured figure's bytes) clear of both
    lines = max(len(printed_lines(spec, spec.topology.workers.label_of(f"w{i}"), "worker")) for i in drawn)
    level_h = max(3.2, rowsep * 1.3 + LINE_H) + LINE_H * (lines - 1)
    offset = colsep - min(xs.values()) + 0.6
    nodes, edges = [], []
    colors = spec.figure.colors
    for i in drawn:
        level = int(math.log2(i))
        nodes.append(worker_node(spec, i, xs[i] + offset, -level * level_h))
    for i in drawn:
        if i == 1:
            continue
        parent, side = i // 2, (-7 if i % 2 == 0 else 7)
        # Edges end 2pt short of the parent's label text; each flow labelled on its clear side.
        edges.append(Edge(Port(f"w{i}", "north", dx=-3), Port(f"w{parent}-label", "south", dx=side - 3), "grad",
                          label=phase_tex(spec, "reduce") if i == 2 else Tex(""), label_side="above left", shorten=2.0,
                          label_color=f"{colors['grad']}!85!otink"))
        edges.append(Edge(Port(f"w{parent}-label", "south", dx=side + 3), Port(f"w{i}", "north", dx=3), "wts",
                          label=phase_tex(spec, "broadcast") if i == 3 else Tex(""), label_side="above right", shorten=2.0,
                          label_color=f"{colors['weight']}!70!otink"))
    members = [f"w{i}" for i in drawn]
    if count > len(drawn):
        deepest = int(math.log2(drawn[-1]))
        leaves = [i for i in drawn if int(math.log2(i)) == deepest]
        y = -(deepest + 1) * level_h + 0.4
        xmid = (xs[leaves[0]] + xs[leaves[-1]]) / 2 + offset
        more = f"w{len(drawn) + 1}-more"
        hidden = count_text(count - len(drawn) - 1)
        # A dotted box as wide as the deepest drawn level stands for the hidden levels: every
        # leaf's stub ends on it, and the last worker hangs below it, joined to it.
        nodes.append(Node(more, xmid, y, kind="box", style="morebox", min_width=xs[leaves[-1]] - xs[leaves[0]] + 2.0,
                          text=label_tex(spec, "tree_more", n=hidden, levels=math.ceil(math.log2(count + 1)))))
        nodes.append(worker_node(spec, count, xs[leaves[-1]] + offset, y - 1.6, label_side="below"))
        for leaf in leaves:
            edges.append(Edge(Port(f"w{leaf}-label", "south"), Port(f"w{leaf}-label", "south", level=f"{more}.north"),
                              "grad", both=True, elided=True, shorten=2.0))
        edges.append(Edge(Port(f"w{count}", "north", level=f"{more}.south"), Port(f"w{count}", "north"), "grad",
                          both=True, elided=True))
        members += [more, f"w{count}"]
    fit = tuple(members) + tuple(f"{m}-label" for m in members if m.startswith("w") and m[1:].isdigit())
    groups = [Group("workers", fit, "hostbox", label=label_tex(spec, "tree_box", n=count_text(count)))]
    all_y = [n.y for n in nodes]
    data = data_node(spec, 0.0, (max(all_y) + min(all_y)) / 2)
    edges.insert(0, Edge(Port("data", "east"), Port("workers", "west"), "data", label=Tex(r"\batchlabel")))
    return make_layout(spec, sp, [data] + nodes, edges, groups)


# How far a host box reaches below its workers' centre, before the broadcast arch: the icon,
# the label (with room for descenders, as "ms/step" has) and the arch's own label.
BOX_BELOW = 1.3
# The bus label hangs this far below a host box (label_y below): its text and a margin.
BUS_LABEL_H = 0.55
# Nested intra-host arcs (control points, cm): far enough apart that a label on an inner
# arc (a measured figure's bytes per step) stays clear of the arc around it.
ARC_STEP = 0.9


def hierarchical_layout(spec, sp: Spacing) -> Layout:
    colsep, rowsep = sp.colsep, sp.rowsep
    t = spec.topology
    hosts, per_host = t.hosts, t.workers.count // t.hosts
    host_slots = elide(hosts, hosts_drawn(spec))
    drawn_per_host = len([w for w in elide(per_host, 4) if w is not None])
    arch = 0.75 * (0.55 + ARC_STEP * (drawn_per_host - 2)) + 0.1 if drawn_per_host > 1 else 0.2
    # Workers side by side: a pitch of the wider of icon and label (a measured figure's
    # labels carry step times and are much wider than the icons).
    worker_w = icon_size(spec, "worker")[0]
    labels = [t.workers.label_of(f"w{i}") for i in range(1, t.workers.count + 1)]
    half = max([worker_w] + [printed_cm(spec, label, "worker") for label in labels]) / 2
    # A box reaches above its workers' centre past the reduce arch, and below them past their
    # labels (lower for labels printed on several lines) and the broadcast arch.
    lines = max(len(printed_lines(spec, label, "worker")) for label in labels)
    above, below = 0.8 + arch, BOX_BELOW + LINE_H * (lines - 1) + arch
    # The gap between host boxes holds the bus label and a host label. A fitted figure's boxes
    # stand just that far apart (its host label keeps a second line, for a run's address).
    host_label = LABEL_H + LINE_H
    if fitted(spec):
        host_gap = above + below + 2 * HOST_PAD + BUS_LABEL_H + host_label + GAP
    else:
        host_gap = max(4.3 + 2 * arch, rowsep)
    ys = column_ys([s for s in host_slots], host_gap)
    nodes, groups, edges, members, leaders = [], [], [], [], []
    colors = spec.figure.colors
    x0 = colsep
    for k, (slot, y) in enumerate(zip(host_slots, ys)):
        if slot is None:
            if fitted(spec):  # the boxes stand close: between the bus label and the next host's label
                y = (ys[k - 1] - below - HOST_PAD - BUS_LABEL_H + ys[k + 1] + above + HOST_PAD + host_label) / 2
            nodes.append(ellipsis_node(more_name("h", host_slots, k), x0 + 1.3, y))
            continue
        worker_slots = elide(per_host, 4)
        inside = []
        x = x0
        first_id = (slot - 1) * per_host + 1
        for j, ws in enumerate(worker_slots):
            if ws is None:
                nodes.append(ellipsis_node(f"w{first_id + worker_slots[j - 1]}-more", x - 0.75, y, vertical=False))
                x += 0.9
                continue
            node = worker_node(spec, first_id + ws - 1, x, y)
            nodes.append(node)
            inside += [node.name, f"{node.name}-label"]
            x += 2 * half + 0.45
        leader = f"w{first_id}"
        real = [n for n in inside if not n.endswith("-label")]
        for k, other in enumerate(real[1:]):
            first = slot == 1 and k == len(real) - 2  # label the outermost arcs
            edges.append(Edge(Port(other, "north", dx=-4), Port(leader, "north", dx=4 + 5 * k), "grad",
                              route="arch", dx=0.55 + ARC_STEP * k,
                              label=phase_tex(spec, "intra_host_reduce") if first else Tex(""), label_side="above",
                              label_color=f"{colors['grad']}!85!otink"))
            edges.append(Edge(Port(f"{leader}-label", "south", dx=4 + 5 * k), Port(f"{other}-label", "south", dx=-4),
                              "wts", route="arch", dx=-(0.55 + ARC_STEP * k),
                              label=phase_tex(spec, "broadcast") if first else Tex(""), label_side="below",
                              label_color=f"{colors['weight']}!70!otink"))
        # The leaders' bus runs inside each box, left of its leader and its label: the box reaches past it.
        bus_x = x0 - half - 0.4
        nodes.append(Node(f"h{slot}-bus", bus_x, y, kind="coord"))
        nodes.append(Node(f"h{slot}-top", bus_x - 0.15, y + above, kind="coord"))
        nodes.append(Node(f"h{slot}-bottom", bus_x - 0.15, y - below, kind="coord"))
        leaders.append((f"h{slot}", leader, y))
        groups.append(Group(f"h{slot}", tuple(inside) + (f"h{slot}-top", f"h{slot}-bottom"), "hostbox",
                            label=label_tex(spec, "host_workers", i=slot, n=count_text(per_host)), label_dx=0.55))
        members.append(f"h{slot}")
    elided = len(host_slots) != hosts
    # Host boxes exist only after the groups are drawn, so data -> host edges reference them by name.
    fan, braces = data_fan(spec, members, False, hosts)
    if elided:
        fan, braces = [Edge(Port("data", "east"), Port("workers"), "data", label=Tex(r"\batchlabel"))], [
            Brace("workers", Port(members[-1], "south west", dx=-6), Port(members[0], "north west", dx=-6),
                  label_tex(spec, "hosts_brace", n=count_text(hosts)))]
    edges = fan + edges
    # Inter-host all-reduce among the host leaders (the first worker of each host): a bus
    # inside the boxes' left edges, one arrow into each leader, so no two heads meet.
    for (ha, _, ya), (hb, _, yb) in zip(leaders, leaders[1:]):
        skipped = int(hb[1:]) - int(ha[1:]) > 1
        label_y = ya - below - 0.25 - 0.28  # in the gap, above the next host's label
        edges.append(Edge(Port(f"{ha}-bus"), Port(f"{hb}-bus"), "bus", elided=skipped,
                          label=label_tex(spec, "leader_allreduce") if ha == leaders[0][0] else Tex(""),
                          label_side="right", label_pos=round((ya - label_y) / (ya - yb), 3)))
    for host, leader, _ in leaders:
        edges.append(Edge(Port(f"{host}-bus"), Port(leader, "west"), "ring"))
    data = data_node(spec, 0.0, 0.0)
    if not elided and len(members) > 2:
        # The fan to the outer hosts leaves steeply (the host boxes are tall): a centred label
        # under the icon would be crossed where it reaches past the icon's east edge.
        data = dataclasses.replace(data, label_flush="east")
    return make_layout(spec, sp, [data] + nodes, edges, groups, braces)
