"""Topology of a device mesh (kind: mesh, issue 23): the workers as one grid per pipeline
stage, the stages side by side (stage 1 left), each grid's columns the tensor index and its
rows the data index, as ranks fill the mesh (strategies/mesh.py: pipeline outermost,
tensor innermost). Every dimension's groups are outlined in their own palette colour and
line style (colour alone never carries the meaning): a tensor group (a row: consecutive
ranks, inside one host) solid orange, a data group (a column of one stage) dashed blue, a
pipeline group (the same place in every stage) dotted purple, drawn for worker 1's group
as an outline around each member and arches from stage to stage; the other pipeline
groups are the other places, which the legend says. Hosts are gray boxes behind their
rows (or whole stages).

Why side by side and not a cube of offset layers: a cube's layers would need gaps as
wide as a layer is deep for the outlines of one layer not to enclose another's workers,
and then its diagonals cross every outline; side by side, each stage reads as the 2-D
grid it is, and the pipeline (the outermost dimension, one contiguous block of ranks per
stage) reads left to right as the microbatches flow.

Bounded: at most MAX_DRAWN rows, columns and stages are drawn (model.elide: the first
ones, an ellipsis and the last; fewer at a narrow target width), so 1,024 workers
(8 x 8 x 16) draw 27 workers, and a note says how many are drawn. Must not import torch.
"""

from __future__ import annotations

from ..strategies.mesh.strategy import degrees, rank_of
from ..texsafe import render_label
from .memory import total_bytes
from .names import PHASED_BOX
from .model import Edge, Group, Layout, Node, Port, Tex, elide
from .topology_common import count_text, ellipsis_node, label_macros
from .topology_fit import BORDER_PT, MIN_SCALE, NARROW_CM, PT_PER_CM
from .fit import target_width_cm
from .textwidth import text_cm
from .texts import label_tex, label_text

MESH_STYLES = ("meshworker", "tpgroup", "dpgroup", "ppgroup", "ppflow", "legendkey")
# Each dimension's outline: (style, palette colour, line style in words) -- the legend's order.
OUTLINES = {"tensor": ("tpgroup", "otorange", "solid"), "data": ("dpgroup", "otblue", "dashed"),
            "pipeline": ("ppgroup", "otpurple", "dotted")}
MAX_DRAWN = 4  # rows, columns and stages drawn before eliding (first two, an ellipsis, the last)
NARROW_DRAWN = 3  # columns and stages below topology_fit.NARROW_CM (the first, an ellipsis, the last)
NODE_W, NODE_H = 0.8, 0.5  # cm: a worker's box (meshworker: minimum size, its number inside)
COL_GAP = 0.45  # between two workers of a row: two data outlines (4.5pt each) and a hairline
ROW_GAP = 0.35  # between two rows of one host: two tensor outlines (2.5pt each) and room
HOST_PAD = 0.25  # hostbox inner sep (7pt)
HOST_GAP = 2 * HOST_PAD + 0.2  # between rows of two hosts: both boxes' padding and a gap
ELLIPSIS_W = 0.55  # an elided column or stage slot (a \cdots)
ELLIPSIS_H = 0.45  # an elided row slot (a \vdots)
STAGE_GAP = 0.8  # between two stages' grids: both host boxes' padding and a gap (their labels aside)
ELLIPSIS_GAP = 0.4  # between a grid and the ellipsis standing for the stages left out
ARCH_H = 1.1  # cm: the pipeline arches' control height above the top row
TITLE_DROP = 0.75  # from the last row's centre to the stage title's centre


def max_drawn(spec) -> tuple[int, int]:
    """(rows and columns, stages) drawn at most: fewer columns and stages at a narrow target width."""
    width = target_width_cm(spec)
    narrow = width is not None and width < NARROW_CM
    return (NARROW_DRAWN, NARROW_DRAWN) if narrow else (MAX_DRAWN, MAX_DRAWN)


def mesh_layout(spec, sp) -> Layout:
    d = degrees(spec)
    cols_drawn, stages_drawn = max_drawn(spec)
    node_w = NODE_W  # holds "16,384" (0.64 cm of \footnotesize digits and its inner sep), the most workers a spec has
    rows, cols = elide(d["data"], MAX_DRAWN), elide(d["tensor"], cols_drawn)
    hosts = spec.topology.hosts

    def host(rank: int) -> int:
        return spec.topology.host_of(f"w{rank + 1}")

    # x of each drawn column inside a grid, and the grid's width
    col_x, x = [], 0.0
    for k, c in enumerate(cols):
        width = ELLIPSIS_W if c is None else node_w
        if k:
            x += COL_GAP + (ELLIPSIS_W if cols[k - 1] is None else node_w) / 2 + width / 2
        col_x.append(x)
    grid_w = col_x[-1] + node_w
    # y of each drawn row (the same in every stage: a wider gap where some stage changes host there)
    row_y, y = [], 0.0
    for k, r in enumerate(rows):
        h = ELLIPSIS_H if r is None else NODE_H
        if k:
            prev = rows[k - 1]
            boundary = hosts > 1 and (prev is None or r is None or any(
                host(_first(spec, s, prev, 1)) != host(_first(spec, s, r, 1)) for s in range(1, d["pipeline"] + 1)))
            y -= (HOST_GAP if boundary else ROW_GAP) + (ELLIPSIS_H if prev is None else NODE_H) / 2 + h / 2
        row_y.append(y)
    host_w = _host_label_cm(spec, hosts)
    stages = elide(d["pipeline"], stages_drawn)
    width = target_width_cm(spec)
    while width is not None and stages_drawn > NARROW_DRAWN and \
            _stage_xs(stages, grid_w, host_w)[-1] + grid_w + HOST_PAD > (width - 2 * BORDER_PT / PT_PER_CM) / MIN_SCALE:
        stages_drawn -= 1  # a target width the grids would not fit even at the smallest scale: fewer stages
        stages = elide(d["pipeline"], stages_drawn)
    stage_x = _stage_xs(stages, grid_w, host_w)

    nodes, groups, edges = [], [], []
    outline_members: dict[tuple, list] = {}  # (dimension, first rank) -> drawn member names
    host_members: dict[tuple, list] = {}  # (host, stage) -> drawn member names
    for s, sx in zip(stages, stage_x):
        if s is None:
            nodes.append(ellipsis_node(f"s{stages[stages.index(None) - 1] + 1}-more", round(sx + ELLIPSIS_W / 2, 3),
                                       round((row_y[0] + row_y[-1]) / 2, 3), vertical=False))
            continue
        for r, ry in zip(rows, row_y):
            for c, cx in zip(cols, col_x):
                at = (round(sx + cx + node_w / 2, 3), round(ry, 3))
                if r is None and c is None:
                    continue
                if r is None or c is None:  # an elided row (column): named after its first hidden worker
                    first = rank_of(spec, {"pipeline": s - 1,
                                           "data": (r if r is not None else rows[rows.index(None) - 1] + 1) - 1,
                                           "tensor": (c if c is not None else cols[cols.index(None) - 1] + 1) - 1})
                    name = f"w{first + 1}-more"
                    nodes.append(ellipsis_node(name, *at, vertical=r is None))
                    if r is not None:
                        outline_members.setdefault(("tensor", _first(spec, s, r, 1)), []).append(name)
                    else:
                        outline_members.setdefault(("data", _first(spec, s, 1, c)), []).append(name)
                    continue
                rank = _first(spec, s, r, c)
                name = f"w{rank + 1}"
                nodes.append(Node(name, *at, kind="box", style="meshworker", color=spec.figure.colors["worker"],
                                  text=Tex(count_text(rank + 1))))
                outline_members.setdefault(("tensor", _first(spec, s, r, 1)), []).append(name)
                outline_members.setdefault(("data", _first(spec, s, 1, c)), []).append(name)
                if hosts > 1:
                    host_members.setdefault((host(rank), s), []).append(name)
        if d["pipeline"] > 1:
            nodes.append(Node(f"s{s}", round(sx + grid_w / 2, 3), round(row_y[-1] - TITLE_DROP, 3), kind="text",
                              text=label_tex(spec, "stage_lane", i=count_text(s))))
    for (dim, first), members in outline_members.items():
        groups.append(Group(f"w{first + 1}-{OUTLINES[dim][0][:2]}", tuple(members), OUTLINES[dim][0]))
    groups = _hosts(spec, host_members, hosts) + groups
    if d["pipeline"] > 1:  # worker 1's pipeline group: an outline around each member, arches between them
        chain = [f"w{rank_of(spec, {'pipeline': s - 1}) + 1}" for s in stages if s is not None]
        groups += [Group(f"{w}-pp", (w,), "ppgroup") for w in chain]
        for a, b in zip(chain, chain[1:]):
            edges.append(Edge(Port(a, "north"), Port(b, "north"), "ppflow", route="arch", dx=ARCH_H))
    under = row_y[-1] - (TITLE_DROP + 0.55 if d["pipeline"] > 1 else NODE_H / 2 + HOST_PAD + 0.45)
    nodes += _legend(spec, d, stage_x[0], under, {"data": rows, "tensor": cols, "pipeline": stages})
    macros = label_macros(spec, [])
    return Layout(title=Tex(r"\titlelabel"), colsep=sp.colsep, rowsep=sp.rowsep, nodes=tuple(nodes),
                  edges=tuple(edges), groups=tuple(groups), macros=macros, notes=(), styles=MESH_STYLES)


def _stage_xs(stages: list, grid_w: float, host_w: float) -> list:
    """x (cm) of each stage slot's left edge: grids side by side, each with its hosts' labels
    in the gap left of it (the ellipsis standing for elided stages has none)."""
    out, x = [], host_w
    for k, s in enumerate(stages):
        if k:
            gap = ELLIPSIS_GAP if s is None or stages[k - 1] is None else STAGE_GAP
            x += gap + (ELLIPSIS_W if stages[k - 1] is None else grid_w) + (0.0 if s is None else host_w)
        out.append(x)
    return out


def _host_label_cm(spec, hosts: int) -> float:
    """Room left of a grid for its hosts' labels (they sit west of their boxes): none for one host."""
    if hosts < 2:
        return 0.0
    return round(text_cm(label_text(spec, "host_box", i=count_text(hosts))) + 0.1, 3)


def _first(spec, stage: int, row: int, col: int) -> int:
    """The rank of the (1-based) stage, row and column: a row's (column's) first member."""
    return rank_of(spec, {"pipeline": stage - 1, "data": row - 1, "tensor": col - 1})


def _hosts(spec, members: dict, hosts: int) -> list:
    """One box per host and stage it has drawn workers in (h3, and h3-2 for its part in
    stage 2 when a host spans stages); its label on the first part."""
    out, seen = [], set()
    for (host, stage), names in members.items():
        first = host not in seen
        seen.add(host)
        out.append(Group(f"h{host}" if first else f"h{host}-{stage}", tuple(names), "hostbox",
                         label=label_tex(spec, "host_box", i=count_text(host)) if first else Tex(""),
                         label_side="west"))
    return out


def _legend(spec, d: dict, x: float, y: float, drawn: dict) -> list:
    """The outline styles, one per line under the grids (the dimensions that are > 1), and
    what is drawn when some are left out."""
    inside = ", inside a host" if spec.topology.hosts > 1 else ""
    texts = {"tensor": f"tensor group: a row ({d['tensor']} workers{inside})",
             "data": f"data group: a column ({d['data']} workers)",
             "pipeline": f"pipeline group: same place in each stage ({d['pipeline']} workers)"}
    nodes, above = [], None
    for dim in ("tensor", "data", "pipeline"):
        if d[dim] < 2:
            continue
        style = OUTLINES[dim][0]
        name = f"legend-{style[:2]}"
        rel = f"below=0.22cm of {above}" if above else ""
        nodes.append(Node(name, round(x + 0.35, 3), round(y, 3), kind="box", style=f"{style}, legendkey", rel=rel))
        nodes.append(Node(f"{name}-label", kind="text", text=Tex(render_label(texts[dim])),
                          rel=f"right=0.15cm of {name}"))
        above = name
    note = _drawn_note(spec, d, drawn)
    if note and above:
        nodes.append(Node("note", kind="text", text=note,
                          rel=f"below=0.2cm of {above}.south west, anchor=north west"))
    return nodes


def _drawn_note(spec, d: dict, drawn: dict) -> Tex:
    """What the numbers are and, at scale, how much is drawn (two parts a line)."""
    parts = []
    for dim, noun in (("data", "rows"), ("tensor", "columns"), ("pipeline", "stages")):
        shown = len([k for k in drawn[dim] if k is not None])
        if shown < d[dim]:
            parts.append(f"{shown} of {count_text(d[dim])} {noun}")
    lines = ["box k: worker k (rank k-1), as the spec places it"]
    if parts:  # at most two parts a line: the note stays narrower than a column's grids
        parts[-1] += f" ({count_text(spec.topology.workers.count)} workers)"
        lines += [("drawn: " if k == 0 else "") + ", ".join(parts[k:k + 2]) + ("," if k + 2 < len(parts) else "")
                  for k in range(0, len(parts), 2)]
    return Tex(r"\\".join(render_label(line) for line in lines))


# ---------------------------------------------------------------- measured


DIM_OF_LEGEND = {"legend-tp-label": "tensor", "legend-dp-label": "data", "legend-pp-label": "pipeline"}


def bytes_per_dimension(spans, ranks: int) -> dict:
    """{dimension: mean bytes per worker and step}: the payload of the trace's collectives
    (allreduce spans, by their `dim`) and of the pipeline's sends (send spans; their `dim`
    where they carry one, else pipeline), over the steps the trace holds."""
    totals: dict = {}
    steps = set()
    for span in spans:
        if span.name not in (PHASED_BOX, "send") or "bytes" not in span.args:  # the collectives, the sends
            continue
        dim = span.args.get("dim") or ("pipeline" if span.name == "send" else None)
        if dim is None:
            continue
        totals[dim] = totals.get(dim, 0) + span.args["bytes"]
        steps.add(span.step)
    per = max(1, len(steps)) * max(1, ranks)
    return {dim: total / per for dim, total in totals.items()}


def measured_legend(spec, layout: Layout, per_dim: dict, metrics: dict | None = None) -> Layout:
    """The legend's line of each dimension says the bytes per step its groups moved (measured
    or predicted, per worker), and the note says what they are and the range of the workers'
    step times and memory (metrics.json's; a grid has no room for a label per worker)."""
    from dataclasses import replace

    from ..workload import human_bytes

    extra = ["bytes: a worker's mean payload per step in that dimension"]
    times = sorted(t * 1000 for t in ((metrics or {}).get("step_time_s") or {}).values())
    memory = sorted(total_bytes(m) for m in ((metrics or {}).get("memory") or {}).values() if isinstance(m, dict))
    ranges = []
    if times:
        ranges.append(f"step time per worker {_span(times, lambda t: f'{t:.1f} ms')}")
    if memory:
        ranges.append(f"memory per rank {_span(memory, human_bytes)}")
    if ranges:
        extra.append("; ".join(ranges))

    nodes = []
    for node in layout.nodes:
        dim = DIM_OF_LEGEND.get(node.name)
        if dim is not None:
            node = replace(node, text=Tex(node.text + render_label(f": {human_bytes(per_dim.get(dim, 0))} per step")))
        elif node.name == "note":
            node = replace(node, text=Tex(node.text + "".join(r"\\" + render_label(line) for line in extra)))
        nodes.append(node)
    return replace(layout, nodes=tuple(nodes))


def _span(values: list, show) -> str:
    """'124.0-158.4 ms' (or one value where all are alike as printed)."""
    low, high = show(values[0]), show(values[-1])
    return low if low == high else f"{low.rsplit(' ', 1)[0]}-{high}" if low.split(" ")[-1] == high.split(" ")[-1] \
        else f"{low}-{high}"
