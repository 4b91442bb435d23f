"""Spec -> topology Layout (model.py) for every strategy. Pure; no TeX text beyond labels.

Layouts, left to right as the seed template: the data source, the workers, then what
they synchronise through (a server, a collective, a ring, a tree, peers, hosts, or
the next pipeline stage). Past figure.max_workers_drawn the workers are elided to the
first few, an ellipsis and the last, and a brace with the true count stands for them,
so the number of drawn objects is bounded whatever the worker count is.
Must not import torch.
"""

from __future__ import annotations

import math

from ..shards import shard_assignment
from ..texsafe import render_label
from .model import Brace, Edge, Group, Layout, Node, Port, Tex, elide, stage_layers
from .names import ICON_MACROS, worker_label_macro

ICON_W = {"gpu": 1.9, "cpu": 1.25, "server": 1.5, "dataset": 1.3, "database": 1.2, "none": 1.4}
ELLIPSIS_GAP = 0.55  # fraction of rowsep between a worker and the ellipsis


def build_layout(spec) -> Layout:
    """The drawable topology of a spec's strategy."""
    builder = _BUILDERS[_layout_kind(spec)]
    return builder(spec)


def _layout_kind(spec) -> str:
    s = spec.strategy
    if s.kind == "allreduce":
        return {"native": "allreduce", "ring": "ring", "tree": "tree", "hierarchical": "hierarchical"}[s.algorithm]
    return s.kind


# ---------------------------------------------------------------- shared pieces

def _count(n: int) -> str:
    return f"{n:,}"


def _macros(spec, worker_ids) -> dict:
    f = spec.figure
    macros = {"datalabel": render_label(spec.topology.data_label)}
    for worker_id in worker_ids:
        macros[worker_label_macro(worker_id)] = render_label(spec.topology.workers.label_of(worker_id))
    if spec.topology.servers.count:
        macros["pslabel"] = render_label(spec.topology.servers.label)
    macros["batchlabel"] = render_label(f.labels["batch"])
    macros["gradlabel"] = render_label(f.labels["grad"])
    macros["weightlabel"] = render_label(f.labels["weight"])
    macros["titlelabel"] = render_label(spec.title)
    return {name: Tex(value) for name, value in macros.items()}


def _layout(spec, nodes, edges=(), groups=(), braces=()) -> Layout:
    worker_ids = [n.name for n in nodes if n.name.startswith("w") and n.name[1:].isdigit()]
    return Layout(title=Tex(r"\titlelabel"), colsep=spec.figure.colsep, rowsep=spec.figure.rowsep,
                  nodes=tuple(nodes), edges=tuple(edges), groups=tuple(groups), braces=tuple(braces),
                  macros=_macros(spec, worker_ids))


def _data_node(spec, x=0.0, y=0.0) -> Node:
    icon = spec.figure.icons["data"]
    return Node("data", x, y, icon=ICON_MACROS[icon], color=spec.figure.colors["worker"], label=Tex(r"\datalabel"))


def _worker_node(spec, index, x, y, label_side="below") -> Node:
    worker_id = f"w{index}"
    return Node(worker_id, x, y, icon=ICON_MACROS[spec.figure.icons["worker"]], color=spec.figure.colors["worker"],
                label=Tex("\\" + worker_label_macro(worker_id)), label_side=label_side)


def _server_node(spec, x, y) -> Node:
    return Node("ps", x, y, icon=ICON_MACROS[spec.figure.icons["server"]], color=spec.figure.colors["server"],
                label=Tex(r"\pslabel"))


def _ellipsis(name, x, y, vertical=True) -> Node:
    return Node(name, x, y, kind="ellipsis", text=Tex(r"$\vdots$" if vertical else r"$\cdots$"))


def _more(prefix: str, slots: list, k: int) -> str:
    """Name of the ellipsis at slots[k]: after the first hidden member (w4-more stands for w4..w(N-1))."""
    return f"{prefix}{slots[k - 1] + 1}-more"


def _column(slots, rowsep) -> list[float]:
    """y (cm) of each slot of a column, top to bottom, centred on 0; the ellipsis sits closer."""
    ys = [0.0]
    for prev, cur in zip(slots, slots[1:]):
        gap = rowsep * (ELLIPSIS_GAP if prev is None or cur is None else 1.0)
        ys.append(ys[-1] - gap)
    mid = (ys[0] + ys[-1]) / 2
    return [y - mid for y in ys]


def _spread(count: int, half: float) -> list[float]:
    """`count` offsets (pt) evenly from +half to -half: distinct ports on one side of a node."""
    if count == 1:
        return [0.0]
    return [half - 2 * half * k / (count - 1) for k in range(count)]


def _worker_column(spec, x, prefix="w", count=None, node_for=None):
    """Nodes of an (elided) column of workers or hosts; returns (nodes, drawn member names)."""
    count = spec.topology.workers.count if count is None else count
    slots = elide(count, spec.figure.max_workers_drawn)
    ys = _column(slots, spec.figure.rowsep)
    nodes, names = [], []
    for k, (slot, y) in enumerate(zip(slots, ys)):
        if slot is None:
            nodes.append(_ellipsis(_more(prefix, slots, k), x, y))
        else:
            node = node_for(slot, x, y) if node_for else _worker_node(spec, slot, x, y)
            nodes.append(node)
            names.append(node.name)
    return nodes, names, len(slots) != count


def _data_fan(spec, members, elided, count, noun="workers"):
    """Data -> each drawn member, or data -> a brace standing for all of them when elided."""
    edges, braces = [], []
    batch = Tex(r"\batchlabel")
    if elided:
        first, last = members[0], members[-1]
        hosts = spec.topology.hosts
        where = f"\\\\on {_count(hosts)} hosts" if noun == "workers" and hosts > 1 else ""
        braces.append(Brace("workers", Port(f"{last}-label", "south west", dx=-6),
                            Port(first, "north west", dx=-6), Tex(f"{_count(count)} {noun}{where}")))
        edges.append(Edge(Port("data", "east"), Port("workers"), "data", label=batch))
        return edges, braces
    for k, (member, dy) in enumerate(zip(members, _spread(len(members), min(10.0, 4.0 * (len(members) - 1))))):
        edges.append(Edge(Port("data", "east", dy=dy), Port(member, "west"), "data",
                          label=batch if k == 0 else Tex(""), label_side="above", label_pos=0.45))
    return edges, braces


def _host_groups(spec, members, elided) -> list:
    """Boxes h1..hH around each host's workers in a column (only when every worker is drawn)."""
    t = spec.topology
    if t.hosts < 2 or elided:
        return []
    groups = []
    for host in range(1, t.hosts + 1):
        inside = [m for m in members if t.host_of(m) == host]
        fit = tuple(inside) + tuple(f"{m}-label" for m in inside)
        groups.append(Group(f"h{host}", fit, "hostbox", label=Tex(f"Host {host}")))
    return groups


def _sync_pairs(spec, members, target, half=12.0, back_style="wts", back_label=r"\weightlabel"):
    """Gradient to `target` and weights back, one offset pair per member, each on its own port."""
    colors = spec.figure.colors
    ports = _spread(len(members), min(half, 4.0 * (len(members) - 1)))
    step = abs(ports[0] - ports[1]) if len(ports) > 1 else 10.0
    off = 2.5 if step >= 7 else step * 0.3
    edges = []
    for k, (member, dy) in enumerate(zip(members, ports)):
        first, last = k == 0, k == len(members) - 1
        edges.append(Edge(Port(member, "east", dy=off), Port(target, "west", dy=dy + off), "grad",
                          label=Tex(r"\gradlabel") if first else Tex(""), label_side="above right",
                          label_color=f"{colors['grad']}!85!otink", sloped=False))
        edges.append(Edge(Port(target, "west", dy=dy - off), Port(member, "east", dy=-off), back_style,
                          label=Tex(back_label) if last else Tex(""), label_side="below right",
                          label_color=f"{colors['weight']}!70!otink", sloped=False))
    return edges


# ---------------------------------------------------------------- strategies

def _parameter_server(spec) -> Layout:
    colsep = spec.figure.colsep
    nodes, members, elided = _worker_column(spec, colsep)
    edges, braces = _data_fan(spec, members, elided, spec.topology.workers.count)
    groups = _host_groups(spec, members, elided)
    servers = spec.topology.servers
    if servers.count == 1:
        nodes.append(_server_node(spec, 2 * colsep, 0.0))
        target = "ps"
    else:
        owned = shard_assignment(spec)
        slots = elide(servers.count, 4)
        gap = 1.25
        top = gap * (len(slots) - 1) / 2
        shard_names = []
        for k, slot in enumerate(slots):
            y = top - k * gap
            if slot is None:
                nodes.append(_ellipsis(_more("ps", slots, k), 2 * colsep, y))
                shard_names.append(_more("ps", slots, k))
                continue
            text = f"\\textbf{{Shard {slot}}}\\\\[1pt]" + _tensor_math(owned[f"ps{slot}"])
            nodes.append(Node(f"ps{slot}", 2 * colsep, y, kind="box", style="psbox", text=Tex(text)))
            shard_names.append(f"ps{slot}")
        groups.append(Group("psgroup", tuple(shard_names), "hostbox", label=Tex(r"\pslabel")))
        target = "psgroup"
    edges += _sync_pairs(spec, members, target)
    return _layout(spec, [_data_node(spec)] + nodes, edges, groups, braces)


def _tensor_math(tensors: list[str]) -> str:
    """$W_1, b_1$ for ['layers.0.weight', 'layers.0.bias'] (TeX built from integers only)."""
    parts = []
    for name in tensors:
        _, index, kind = name.split(".")
        parts.append(("W" if kind == "weight" else "b") + "_{" + str(int(index) + 1) + "}")
    if len(parts) > 6:
        parts = parts[:3] + [r"\ldots"] + parts[-2:]
    return "$" + ", ".join(parts) + "$"


def _allreduce_native(spec) -> Layout:
    colsep = spec.figure.colsep
    nodes, members, elided = _worker_column(spec, colsep)
    edges, braces = _data_fan(spec, members, elided, spec.topology.workers.count)
    ys = [n.y for n in nodes if n.kind != "coord"]
    height = max(1.6, max(ys) - min(ys) + 1.2)
    nodes.append(Node("ar", 1.6 * colsep, 0.0, kind="box", style="psbox", min_height=height,
                      text=Tex(r"\textbf{all-reduce}\\[1pt]mean of \gradlabel")))
    colors = spec.figure.colors
    for k, member in enumerate(members):
        edges.append(Edge(Port(member, "east"), Port("ar", "west", level=f"{member}.east"), "grad", both=True,
                          label=Tex(r"\gradlabel") if k == 0 else Tex(""), label_side="above",
                          label_color=f"{colors['grad']}!85!otink"))
    return _layout(spec, [_data_node(spec)] + nodes, edges, _host_groups(spec, members, elided), braces)


def _ring(spec) -> Layout:
    colsep = spec.figure.colsep
    count = spec.topology.workers.count
    nodes, members, elided = _worker_column(spec, colsep)
    edges, braces = _data_fan(spec, members, elided, count)
    inner, outer = 0.55, 1.25
    for a, b in zip(members, members[1:]):
        skipped = int(b[1:]) - int(a[1:]) > 1
        edges.append(Edge(Port(a, "east", dy=-4), Port(b, "east", dy=4), "ring", route="ortho", dx=inner,
                          elided=skipped, label=Tex("" if skipped else f"$c_{{{a[1:]}}}$"),
                          label_side="right", label_pos=0.25))
    last, first = members[-1], members[0]
    edges.append(Edge(Port(last, "east", dy=-4), Port(first, "east", dy=4), "ring", route="ortho", dx=outer,
                      label=Tex(f"$c_{{{last[1:]}}}$"), label_side="right", label_pos=0.25))
    bottom = min(n.y for n in nodes)
    below = 1.45 + (0.35 if spec.topology.hosts > 1 and not elided else 0.0)  # clear the host box
    nodes.append(Node("note", colsep + 0.2, bottom - below, kind="text",
                      text=Tex(r"ring all-reduce of \gradlabel: " + _count(count) + r" chunks\\"
                               + f"reduce-scatter, then all-gather: {_count(2 * (count - 1))} steps")))
    return _layout(spec, [_data_node(spec)] + nodes, edges, _host_groups(spec, members, elided), braces)


def _tree(spec) -> Layout:
    colsep, rowsep = spec.figure.colsep, spec.figure.rowsep
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
    level_h = max(3.2, rowsep * 1.3)
    offset = colsep - min(xs.values()) + 0.6
    nodes, edges = [], []
    colors = spec.figure.colors
    for i in drawn:
        level = int(math.log2(i))
        nodes.append(_worker_node(spec, i, xs[i] + offset, -level * level_h))
    for i in drawn:
        if i == 1:
            continue
        parent, side = i // 2, (-7 if i % 2 == 0 else 7)
        first = i == 2
        edges.append(Edge(Port(f"w{i}", "north", dx=-3), Port(f"w{parent}-label", "south", dx=side - 3), "grad",
                          label=Tex("reduce") if first else Tex(""), label_side="above",
                          label_color=f"{colors['grad']}!85!otink"))
        edges.append(Edge(Port(f"w{parent}-label", "south", dx=side + 3), Port(f"w{i}", "north", dx=3), "wts",
                          label=Tex("broadcast") if i == 3 else Tex(""), label_side="above",
                          label_color=f"{colors['weight']}!70!otink"))
    members = [f"w{i}" for i in drawn]
    if count > len(drawn):
        deepest = int(math.log2(drawn[-1]))
        y = -(deepest + 1) * level_h + 0.4
        xmid = (min(xs.values()) + max(xs.values())) / 2 + offset
        more = f"w{len(drawn) + 1}-more"
        hidden = _count(count - len(drawn) - 1)
        nodes.append(Node(more, xmid, y, kind="text",
                          text=Tex(f"$\\cdots$ {hidden} more workers, {math.ceil(math.log2(count + 1))} levels $\\cdots$")))
        nodes.append(_worker_node(spec, count, max(xs.values()) + offset, y - 1.6, label_side="below"))
        for leaf in [i for i in drawn if int(math.log2(i)) == deepest]:
            # each leaf drops straight down onto the ellipsis: the stubs do not meet in one point
            edges.append(Edge(Port(f"w{leaf}-label", "south"), Port(f"w{leaf}-label", "south", level=f"{more}.north"),
                              "grad", both=True, elided=True))
        members += [more, f"w{count}"]
    fit = tuple(members) + tuple(f"{m}-label" for m in members if m.startswith("w") and m[1:].isdigit())
    groups = [Group("workers", fit, "hostbox", label=Tex(f"tree all-reduce, {_count(count)} workers"))]
    all_y = [n.y for n in nodes]
    data = _data_node(spec, 0.0, (max(all_y) + min(all_y)) / 2)
    edges.insert(0, Edge(Port("data", "east"), Port("workers", "west"), "data", label=Tex(r"\batchlabel")))
    return _layout(spec, [data] + nodes, edges, groups)


def _hierarchical(spec) -> Layout:
    colsep, rowsep = spec.figure.colsep, spec.figure.rowsep
    t = spec.topology
    hosts, per_host = t.hosts, t.workers.count // t.hosts
    host_slots = elide(hosts, 4)
    drawn_per_host = len([w for w in elide(per_host, 4) if w is not None])
    arch = 0.75 * (0.55 + 0.3 * (drawn_per_host - 2)) + 0.1 if drawn_per_host > 1 else 0.2
    host_gap = max(3.75 + 2 * arch, rowsep)
    ys = _column([s for s in host_slots], host_gap)
    nodes, groups, edges, members = [], [], [], []
    colors = spec.figure.colors
    x0 = colsep
    for k, (slot, y) in enumerate(zip(host_slots, ys)):
        if slot is None:
            nodes.append(_ellipsis(_more("h", host_slots, k), x0 + 1.3, y))
            continue
        worker_slots = elide(per_host, 4)
        inside = []
        x = x0
        first_id = (slot - 1) * per_host + 1
        for j, ws in enumerate(worker_slots):
            if ws is None:
                nodes.append(_ellipsis(f"w{first_id + worker_slots[j - 1]}-more", x - 0.75, y, vertical=False))
                x += 0.9
                continue
            node = _worker_node(spec, first_id + ws - 1, x, y)
            nodes.append(node)
            inside += [node.name, f"{node.name}-label"]
            x += 2.45
        leader = f"w{first_id}"
        real = [n for n in inside if not n.endswith("-label")]
        for k, other in enumerate(real[1:]):
            first = slot == 1 and k == len(real) - 2  # label the outermost arcs
            edges.append(Edge(Port(other, "north", dx=-4), Port(leader, "north", dx=4 + 5 * k), "grad",
                              route="arch", dx=0.55 + 0.3 * k,
                              label=Tex("intra-host reduce") if first else Tex(""), label_side="above",
                              label_color=f"{colors['grad']}!85!otink"))
            edges.append(Edge(Port(f"{leader}-label", "south", dx=4 + 5 * k), Port(f"{other}-label", "south", dx=-4),
                              "wts", route="arch", dx=-(0.55 + 0.3 * k),
                              label=Tex("broadcast") if first else Tex(""), label_side="below",
                              label_color=f"{colors['weight']}!70!otink"))
        nodes.append(Node(f"h{slot}-top", x0, y + 0.8 + arch, kind="coord"))
        nodes.append(Node(f"h{slot}-bottom", x0, y - 1.1 - arch, kind="coord"))
        groups.append(Group(f"h{slot}", tuple(inside) + (f"h{slot}-top", f"h{slot}-bottom"), "hostbox",
                            label=Tex(f"Host {slot}: {_count(per_host)} workers")))
        members.append(f"h{slot}")
    elided = len(host_slots) != hosts
    # Host boxes exist only after the groups are drawn, so data -> host edges reference them by name.
    fan, braces = _data_fan(spec, members, False, hosts, noun="hosts")
    if elided:
        fan, braces = [Edge(Port("data", "east"), Port("workers"), "data", label=Tex(r"\batchlabel"))], [
            Brace("workers", Port(members[-1], "south west", dx=-6), Port(members[0], "north west", dx=-6),
                  Tex(f"{_count(hosts)} hosts"))]
    edges = fan + edges
    for a, b in zip(members, members[1:]):
        skipped = int(b[1:]) - int(a[1:]) > 1
        edges.append(Edge(Port(a, "east", dy=-6), Port(b, "east", dy=6), "ring", route="ortho", dx=0.6, both=True,
                          elided=skipped, label=Tex("" if skipped else r"inter-host\\all-reduce"),
                          label_side="right, align=left", label_pos=0.25))
    data = _data_node(spec, 0.0, 0.0)
    return _layout(spec, [data] + nodes, edges, groups, braces)


def _gossip(spec) -> Layout:
    colsep = spec.figure.colsep
    count = spec.topology.workers.count
    slots = elide(count, spec.figure.max_workers_drawn)
    rx = max(3.4, len(slots) * 3.9 / (2 * math.pi))
    ry = rx * 0.72
    cx = colsep + rx + 1.6  # room for the side labels left of the ring
    nodes, names = [], []
    for k, slot in enumerate(slots):
        angle = math.pi / 2 - 2 * math.pi * k / len(slots)
        x, y = cx + rx * math.cos(angle), ry * math.sin(angle)
        sin, cos = math.sin(angle), math.cos(angle)
        side = "above" if sin > 0.7 else "below" if sin < -0.7 else ("right" if cos > 0 else "left")
        if slot is None:
            nodes.append(_ellipsis(_more("w", slots, k), x, y, vertical=False))
            names.append(_more("w", slots, k))
        else:
            nodes.append(_worker_node(spec, slot, x, y, label_side=side))
            names.append(f"w{slot}")
    edges = []
    hops = max(1, (spec.strategy.peers + 1) // 2)
    for k, a in enumerate(names):
        for hop in range(1, hops + 1):
            if hop == 1 and len(names) == 2 and k == 1:
                continue
            b = names[(k + hop) % len(names)]
            if hop > 1 and ("more" in a or "more" in b or len(names) <= 2 * hop):
                continue
            if hop > 1 and (k + hop) % len(names) < k:
                continue
            edges.append(Edge(Port(a), Port(b), "peer", elided="more" in a + b, route="line",
                              label=Tex(r"\weightlabel") if (k == 0 and hop == 1) else Tex(""),
                              label_side="above right", label_color=f"{spec.figure.colors['weight']}!70!otink"))
    # Peer lines run centre to centre but stop at the node borders (shorten by TikZ).
    fit = tuple(names) + tuple(f"{n}-label" for n in names if not n.endswith("-more"))
    groups = [Group("workers", fit, "hostbox",
                    label=Tex(f"gossip: each of {_count(count)} workers averages \\weightlabel{{}} with {spec.strategy.peers} peers"))]
    edges.insert(0, Edge(Port("data", "east"), Port("workers", "west"), "data", label=Tex(r"\batchlabel")))
    return _layout(spec, [_data_node(spec)] + nodes, edges, groups)


def _pipeline(spec) -> Layout:
    colsep = spec.figure.colsep
    stages = spec.strategy.stages
    slots = elide(stages, min(spec.figure.max_workers_drawn, 6))
    step = max(3.5, 0.78 * colsep)
    layers = stage_layers(len(spec.training.layers) - 1, stages)
    nodes, names = [], []
    x = step
    for k, slot in enumerate(slots):
        if slot is None:
            nodes.append(_ellipsis(_more("w", slots, k), x - 0.45 * step, 0.0, vertical=False))
            x += 0.1 * step
            continue
        nodes.append(_worker_node(spec, slot, x, 0.0))
        first, last = layers[slot - 1]
        span = f"layer {first}" if first == last else f"layers {first}--{last}"
        header = "" if spec.topology.workers.label_of(f"w{slot}") == f"Stage {slot}" else f"\\textbf{{Stage {slot}}}\\\\"
        nodes.append(Node(f"s{slot}", kind="box", style="stagebox", rel=f"above=6pt of w{slot}",
                          text=Tex(header + span)))
        names.append(f"w{slot}")
        x += step
    colors = spec.figure.colors
    edges = [Edge(Port("data", "east"), Port(names[0], "west"), "data", label=Tex(r"\batchlabel"), label_side="above")]
    for k, (a, b) in enumerate(zip(names, names[1:])):
        skipped = int(b[1:]) - int(a[1:]) > 1
        edges.append(Edge(Port(a, "east", dy=4), Port(b, "west", dy=4), "act", elided=skipped,
                          label=Tex("act.") if k == 0 else Tex(""), label_side="above"))
        edges.append(Edge(Port(b, "west", dy=-4), Port(a, "east", dy=-4), "grad", elided=skipped,
                          label=Tex(r"$\nabla$act.") if k == 0 else Tex(""), label_side="below",
                          label_color=f"{colors['grad']}!85!otink"))
    mb = spec.strategy.microbatches
    nodes.append(Node("note", step, -1.45, kind="text",
                      text=Tex(f"{spec.strategy.schedule.upper() if spec.strategy.schedule == 'gpipe' else '1F1B'} schedule, "
                               f"{_count(mb)} microbatches of {_count(spec.training.batch_size // mb)} samples, "
                               f"{_count(stages)} stages")))
    return _layout(spec, [_data_node(spec)] + nodes, edges)


def _single(spec) -> Layout:
    colsep = spec.figure.colsep
    worker = _worker_node(spec, 1, colsep * 0.8, 0.0)
    edges = [
        Edge(Port("data", "east"), Port("w1", "west"), "data", label=Tex(r"\batchlabel")),
        Edge(Port("w1", "north", dx=10), Port("w1", "north", dx=-10), "grad", route="loop", bend=60,
             label=Tex(r"\weightlabel{} $\gets$ \weightlabel{} $-\,\eta\,$\gradlabel"), label_side="above",
             label_color=f"{spec.figure.colors['grad']}!85!otink"),
    ]
    return _layout(spec, [_data_node(spec), worker], edges)


_BUILDERS = {
    "parameter-server": _parameter_server,
    "central-storage": _parameter_server,
    "allreduce": _allreduce_native,
    "ring": _ring,
    "tree": _tree,
    "hierarchical": _hierarchical,
    "gossip": _gossip,
    "pipeline": _pipeline,
    "single": _single,
}
