"""Pieces every topology layout shares: label macros, the data, worker and server nodes,
elided worker columns, the data fan, host boxes and gradient/weight edge pairs.

Positions are centimetres computed from a Spacing (spacing.py: the gaps asked for,
widened to what the content needs). Must not import torch.
"""

from __future__ import annotations

import dataclasses

from ..texsafe import render_label
from .model import Brace, Edge, Group, Layout, Node, Port, Tex, elide
from .names import ICON_MACROS, worker_label_macro
from .spacing import ICON_SIZE, LABEL_H, LINE_H, Spacing, column_ys, icon_size, printed_cm, printed_lines, worker_ys

PT_PER_CM = 72.27 / 2.54
from .texts import label_tex


def count_text(n: int) -> str:
    return f"{n:,}"


def label_macros(spec, worker_ids) -> dict:
    f = spec.figure
    macros = {"datalabel": node_label(spec, spec.topology.data_label, "data")}
    for worker_id in worker_ids:
        macros[worker_label_macro(worker_id)] = node_label(spec, spec.topology.workers.label_of(worker_id), "worker")
    if spec.topology.servers.count:
        macros["pslabel"] = render_label(spec.topology.servers.label)
    macros["batchlabel"] = render_label(f.labels["batch"])
    macros["gradlabel"] = render_label(f.labels["grad"])
    macros["weightlabel"] = render_label(f.labels["weight"])
    macros["titlelabel"] = render_label(spec.title)
    return {name: Tex(value) for name, value in macros.items()}


def node_label(spec, label: str, role: str) -> str:
    """TeX of a node's label, on the lines it prints as (spacing.printed_lines)."""
    return "\\\\".join(render_label(line) for line in printed_lines(spec, label, role))


def make_layout(spec, sp: Spacing, nodes, edges=(), groups=(), braces=()) -> Layout:
    nodes = _data_label_clear_of_fan(spec, list(nodes), edges)
    worker_ids = [n.name for n in nodes if n.name.startswith("w") and n.name[1:].isdigit()]
    return Layout(title=Tex(r"\titlelabel"), colsep=sp.colsep, rowsep=sp.rowsep,
                  nodes=tuple(nodes), edges=tuple(edges), groups=tuple(groups), braces=tuple(braces),
                  macros=label_macros(spec, worker_ids), notes=tuple(Tex(note) for note in sp.notes()))


def _data_label_clear_of_fan(spec, nodes: list, edges) -> list:
    """A centred "Training data" label reaches past the icon's east edge, where the data
    fan leaves: with many workers the steepest arrow cuts through it. Then the label hangs
    flush with the icon's east edge instead (the fan leaves from there, above it)."""
    data = next((n for n in nodes if n.name == "data" and n.kind == "icon" and not n.label_flush), None)
    if data is None:
        return nodes
    width, height = ICON_SIZE[spec.figure.icons["data"]]
    overhang = printed_cm(spec, spec.topology.data_label, "data") / 2 - width / 2
    by_name = {n.name: n for n in nodes}
    slopes = [abs(by_name[e.dst.node].y - data.y) / max(by_name[e.dst.node].x - data.x - width / 2, 0.1)
              for e in edges if e.src.node == "data" and e.dst.node in by_name and not by_name[e.dst.node].rel]
    if overhang > 0 and slopes and max(slopes) * overhang > height / 2 - 0.1:  # 0.1 cm: the arrow's width and a margin
        nodes = [dataclasses.replace(n, label_flush="east") if n is data else n for n in nodes]
    return nodes


def data_node(spec, x=0.0, y=0.0) -> Node:
    icon = spec.figure.icons["data"]
    return Node("data", x, y, icon=ICON_MACROS[icon], color=spec.figure.colors["worker"], label=Tex(r"\datalabel"))


def worker_node(spec, index, x, y, label_side="below") -> Node:
    worker_id = f"w{index}"
    return Node(worker_id, x, y, icon=ICON_MACROS[spec.figure.icons["worker"]], color=spec.figure.colors["worker"],
                label=Tex("\\" + worker_label_macro(worker_id)), label_side=label_side)


def server_node(spec, x, y) -> Node:
    # The label hangs right from the icon's west edge: arrows arriving from the lower left stay clear of it.
    return Node("ps", x, y, icon=ICON_MACROS[spec.figure.icons["server"]], color=spec.figure.colors["server"],
                label=Tex(r"\pslabel"), label_flush="west")


def ellipsis_node(name, x, y, vertical=True) -> Node:
    return Node(name, x, y, kind="ellipsis", text=Tex(r"$\vdots$" if vertical else r"$\cdots$"))


def more_name(prefix: str, slots: list, k: int) -> str:
    """Name of the ellipsis at slots[k]: after the first hidden member (w4-more stands for w4..w(N-1))."""
    return f"{prefix}{slots[k - 1] + 1}-more"


def spread(count: int, half: float) -> list[float]:
    """`count` offsets (pt) evenly from +half to -half: distinct ports on one side of a node."""
    if count == 1:
        return [0.0]
    return [half - 2 * half * k / (count - 1) for k in range(count)]


def worker_column(spec, sp: Spacing, x, prefix="w", count=None, node_for=None):
    """Nodes of an (elided) column of workers or hosts; returns (nodes, drawn member names)."""
    count = spec.topology.workers.count if count is None else count
    slots = elide(count, spec.figure.max_workers_drawn)
    ys = worker_ys(spec, slots, sp.rowsep)
    nodes, names = [], []
    for k, (slot, y) in enumerate(zip(slots, ys)):
        if slot is None:
            # midway between the label hanging under the member above (its lines) and the next member's top
            above = spec.topology.workers.label_of(f"w{slots[k - 1]}") if prefix == "w" else ""
            lines = len(printed_lines(spec, above, "worker")) if above else 1
            drop = (LABEL_H + LINE_H * (lines - 1)) / 2
            nodes.append(ellipsis_node(more_name(prefix, slots, k), x, round(y - drop, 3)))
        else:
            node = node_for(slot, x, y) if node_for else worker_node(spec, slot, x, y)
            nodes.append(node)
            names.append(node.name)
    return nodes, names, len(slots) != count


def data_fan(spec, members, elided, count):
    """Data -> each drawn member, or data -> a brace standing for all the workers when elided."""
    edges, braces = [], []
    batch = Tex(r"\batchlabel")
    if elided:
        first, last = members[0], members[-1]
        # both ends on the column's west edge (level with the last label's bottom): the brace stands
        # upright, left of the icons and of any label wider than them (a step time makes them wider)
        widest = max(printed_cm(spec, spec.topology.workers.label_of(m), "worker") for m in members)
        dx = -6 - round(max(0.0, (widest - icon_size(spec, "worker")[0]) / 2) * PT_PER_CM, 1)
        braces.append(Brace("workers", Port(first, "north west", dx=dx, level=f"{last}-label.south"),
                            Port(first, "north west", dx=dx), workers_brace(spec, count)))
        edges.append(Edge(Port("data", "east"), Port("workers"), "data", label=batch))
        return edges, braces
    for k, (member, dy) in enumerate(zip(members, spread(len(members), min(10.0, 4.0 * (len(members) - 1))))):
        edges.append(Edge(Port("data", "east", dy=dy), Port(member, "west"), "data",
                          label=batch if k == 0 else Tex(""), label_side="above left" if dy > 0 else "above",
                          label_pos=0.45))
    return edges, braces


def workers_brace(spec, count: int) -> Tex:
    """The brace's label for `count` workers: figure.labels.workers_brace, and on_hosts on a
    second line when they sit on several hosts."""
    text = label_tex(spec, "workers_brace", n=count_text(count))
    hosts = spec.topology.hosts
    return Tex(text + "\\\\" + label_tex(spec, "on_hosts", n=count_text(hosts)) if hosts > 1 else text)


def host_groups(spec, members, elided) -> list:
    """Boxes h1..hH around each host's workers in a column (only when every worker is drawn)."""
    t = spec.topology
    if t.hosts < 2 or elided:
        return []
    groups = []
    for host in range(1, t.hosts + 1):
        inside = [m for m in members if t.host_of(m) == host]
        fit = tuple(inside) + tuple(f"{m}-label" for m in inside)
        groups.append(Group(f"h{host}", fit, "hostbox", label=label_tex(spec, "host_box", i=host)))
    return groups


def sync_pairs(spec, members, target, half=15.0, back_style="wts", back_label=r"\weightlabel", label_pos=0.5):
    """Gradient to `target` and weights back, one offset pair per member, each on its own port;
    the flow labels sit `label_pos` along the links from the members."""
    colors = spec.figure.colors
    ports = spread(len(members), min(half, 5.0 * (len(members) - 1)))  # along the target's side, not one point
    step = abs(ports[0] - ports[1]) if len(ports) > 1 else 10.0
    off = 2.5 if step >= 7 else step * 0.3
    edges = []
    for k, (member, dy) in enumerate(zip(members, ports)):
        first, last = k == 0, k == len(members) - 1
        edges.append(Edge(Port(member, "east", dy=off), Port(target, "west", dy=dy + off), "grad",
                          label=Tex(r"\gradlabel") if first else Tex(""), label_side="above right",
                          label_pos=label_pos, label_color=f"{colors['grad']}!85!otink", sloped=False))
        edges.append(Edge(Port(target, "west", dy=dy - off), Port(member, "east", dy=-off), back_style,
                          label=Tex(back_label) if last else Tex(""), label_side="below right",
                          label_pos=round(1 - label_pos, 3), label_color=f"{colors['weight']}!70!otink",
                          sloped=False))
    return edges
