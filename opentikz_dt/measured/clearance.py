"""Whether a measured topology's worker labels may hold their step time on one line.

A worker's label with its step time on one line ("Worker 1: 75.8 ms/step") is wider than
its icon, and the links leaving the icon's sides (to the server, from the data icon) run
past the label's ends: steeply where the column is tall (the top and bottom workers of
four or more, or of an elided 64), so steeply that they cut through the label. This
estimates, from the Layout's own positions, whether every straight link keeps clear of
every such label; where one does not, annotate puts each time on a line of its own
(no wider than the icon). Estimates only, on the safe side (textwidth's widths are
conservative); the compiled figure's geometry check (figures.checks) is the judge.
Pure: must not import torch.
"""

from __future__ import annotations

import re
from dataclasses import replace

from ..figures.model import Layout, Port
from ..figures.spacing import HOST_PAD, ICON_SIZE, LABEL_H, LINE_H, PSBOX_W, icon_size
from ..figures.textwidth import text_cm
from ..figures.topology_fit import PT_PER_CM

_WORKER = re.compile(r"^w([1-9][0-9]*)$")
_ROLE = {"ps": "server", "data": "data"}  # icon nodes other than workers, by name
LABEL_GAP_CM = 2 / PT_PER_CM  # the label's box sits 2pt below its icon (topology.tex.j2)
ALLOWED_CM = 0.5 / PT_PER_CM  # how far a line may come into a text box (figures.checks.TEXT_MARGIN_PT)
LINE_HALF_CM = 0.5 / PT_PER_CM  # half a link's width (the checks measure its outline)


def links_cross_labels(spec, layout: Layout, one_line: dict) -> bool:
    """True when a straight link of the layout would run through a worker's label printed as
    `one_line[worker]` (text) below its icon."""
    nodes = {n.name: n for n in layout.nodes if not n.rel}
    boxes = [_label_box(spec, nodes[w], text) for w, text in one_line.items() if w in nodes]
    for edge in layout.edges:
        if edge.route != "line":
            continue
        a, b = _point(spec, layout, nodes, edge.src), _point(spec, layout, nodes, edge.dst)
        if a is None or b is None:
            continue
        if any(_segment_meets_box(a, b, box) for box in boxes):
            return True
    return False


def link_labels_cross_labels(spec, layout: Layout, one_line: dict, edges) -> bool:
    """True when the label of a straight link, sloped along it (`edges`: the layout's edges as
    annotate labels them, with their bytes), would run into a worker's label printed as
    `one_line[worker]` below its icon: a link leaving a worker steeply down (to a server
    group level with the column's middle) hangs its label below it, over the top worker's
    label where that reaches past the icon."""
    nodes = {n.name: n for n in layout.nodes if not n.rel}
    boxes = [_label_box(spec, nodes[w], text) for w, text in one_line.items() if w in nodes]
    for edge in edges:
        if edge.route != "line" or not edge.label or "sloped" not in edge.label_side:
            continue
        a, b = (_point(spec, layout, nodes, port, outline=True) for port in (edge.src, edge.dst))
        if a is None or b is None or a == b:
            continue
        corners = _sloped_box(a, b, edge.label_pos, link_label_size(spec, edge.label), "above" in edge.label_side)
        if any(_segment_meets_box(p, q, box) for box in boxes for p, q in zip(corners, corners[1:] + corners[:1])):
            return True
    return False


def sloped_labels_clear_of_labels(spec, layout: Layout, edges, printed: dict) -> list:
    """`edges` (as annotate labels them) with each label sloped along a link moved along it, away
    from the worker's end towards mid-link, until it keeps LABELS_GAP_CM clear of every worker's
    label printed as `printed[worker]` (its lines) below its icon. A worker's name wider than its
    icon (a Chinese name with its device: 处理器 1 (GPU1)) reaches under the links leaving the
    icon's side, where the label hung below the lower one, LINK_LABEL_OFF_PT off it, sits."""
    nodes = {n.name: n for n in layout.nodes if not n.rel}
    boxes = [_printed_box(spec, nodes[w], lines) for w, lines in printed.items()
             if w in nodes and nodes[w].label_side == "below"]
    out = []
    for edge in edges:
        if boxes and edge.route == "line" and edge.label and "sloped" in edge.label_side:
            a, b = (_point(spec, layout, nodes, port, outline=True) for port in (edge.src, edge.dst))
            if a is not None and b is not None and a != b:
                edge = replace(edge, label_pos=_pos_clear(a, b, edge, link_label_size(spec, edge.label), boxes))
        out.append(edge)
    return out


def sloped_labels_cross(spec, layout: Layout, edges) -> bool:
    """True when two labels sloped along straight links (`edges`, as annotate labels them) would
    run into each other, or one into a link it does not name: links converging on a server
    carry their labels, each on its own side, closer together the nearer the server they sit."""
    nodes = {n.name: n for n in layout.nodes if not n.rel}
    quads, links = [], []
    for edge in edges:
        if edge.route != "line":
            continue
        a, b = (_point(spec, layout, nodes, port, outline=True) for port in (edge.src, edge.dst))
        if a is None or b is None or a == b:
            continue
        links.append((edge.name, a, b))
        if edge.label and "sloped" in edge.label_side:
            size = link_label_size(spec, edge.label)
            grown = (size[0] + 2 * LABELS_GAP_CM, size[1] + LABELS_GAP_CM)
            quads.append((edge.name, _sloped_box(a, b, edge.label_pos, grown, "above" in edge.label_side)))
    for k, (name, quad) in enumerate(quads):
        if any(_quads_meet(quad, other) for _, other in quads[k + 1:]):
            return True
        sides = list(zip(quad, quad[1:] + quad[:1]))
        if any(_segments_meet(a, b, p, q) for link, a, b in links if link != name for p, q in sides):
            return True
    return False


def link_length(spec, layout: Layout, edge) -> float | None:
    """A straight link's length (cm) between the outlines of the nodes it joins, estimated
    (_point); None where an end cannot be placed."""
    nodes = {n.name: n for n in layout.nodes if not n.rel}
    a, b = (_point(spec, layout, nodes, port, outline=True) for port in (edge.src, edge.dst))
    if a is None or b is None:
        return None
    length = ((b[0] - a[0]) ** 2 + (b[1] - a[1]) ** 2) ** 0.5
    if length and edge.src.anchor == "center" and edge.dst.anchor == "center":
        # centre to centre, drawn from border to border: less each icon's reach along the link
        width, height = icon_size(spec, "worker")
        cos, sin = abs(b[0] - a[0]) / length, abs(b[1] - a[1]) / length
        reach = min(width / 2 / cos if cos else float("inf"), height / 2 / sin if sin else float("inf"))
        return max(0.0, length - 2 * reach)
    return length


def _quads_meet(one: list, two: list) -> bool:
    """Whether two convex quadrilaterals (corner lists) overlap: no side of either separates them."""
    for quad in (one, two):
        for (x0, y0), (x1, y1) in zip(quad, quad[1:] + quad[:1]):
            axis = (y0 - y1, x1 - x0)
            a = [x * axis[0] + y * axis[1] for x, y in one]
            b = [x * axis[0] + y * axis[1] for x, y in two]
            if max(a) <= min(b) or max(b) <= min(a):
                return False
    return True


def _segments_meet(a: tuple, b: tuple, p: tuple, q: tuple) -> bool:
    """Whether the segments a-b and p-q cross."""
    def turn(o, s, t):
        return (s[0] - o[0]) * (t[1] - o[1]) - (s[1] - o[1]) * (t[0] - o[0])
    return turn(a, b, p) * turn(a, b, q) < 0 and turn(p, q, a) * turn(p, q, b) < 0


LABELS_GAP_CM = 1.5 / PT_PER_CM  # kept between a sloped link label and a worker's label (text_cm is conservative)
POS_STEP = 0.01  # how far along its link a label moves at a time (of the link's length)


def _pos_clear(a: tuple, b: tuple, edge, size: tuple, boxes: list) -> float:
    """The label position nearest edge.label_pos, towards mid-link, whose sloped label meets none of
    `boxes` (edge.label_pos where none does)."""
    pos = edge.label_pos
    step = POS_STEP if pos < 0.5 else -POS_STEP
    above = "above" in edge.label_side
    while True:
        corners = _sloped_box(a, b, pos, size, above)
        if not any(_segment_meets_box(p, q, box) for box in boxes for p, q in zip(corners, corners[1:] + corners[:1])):
            return pos
        if abs(pos - 0.5) < POS_STEP / 2:  # not clear even mid-link: left where it was (the geometry check judges)
            return edge.label_pos
        pos = round(pos + step, 3)


def _printed_box(spec, node, lines: list) -> tuple:
    """(left, bottom, right, top) cm of a worker's label as printed (`lines`, centred, or flush with
    the icon's west edge) below its icon, grown by LABELS_GAP_CM."""
    width, height = icon_size(spec, "worker")
    wide = max(text_cm(line) for line in lines)
    left = node.x - width / 2 if node.label_flush == "west" else node.x - wide / 2
    top = node.y - height / 2 - LABEL_GAP_CM
    bottom = top - (LABEL_H - LABEL_GAP_CM) - LINE_H * (len(lines) - 1)
    return (left - LABELS_GAP_CM, bottom - LABELS_GAP_CM, left + wide + LABELS_GAP_CM, top + LABELS_GAP_CM)


LINK_LABEL_OFF_PT = 1.0  # a sloped link label sits this far off its link (annotate: above=1pt), clear of its stroke
LINK_LABEL_LINE_CM = 0.44  # a \footnotesize line of a link's label and its 2pt inner sep, each side


def link_label_size(spec, label: str) -> tuple:
    """(width, height) cm of a link's label: its flow macros as the spec's labels print them, a line each."""
    flows = {"\\gradlabel": spec.figure.labels.get("grad", ""), "\\weightlabel": spec.figure.labels.get("weight", "")}
    lines = str(label).split("\\\\")
    for macro, text in flows.items():
        lines = [line.replace(macro, text) for line in lines]
    return max(text_cm(line.replace("~", " ")) for line in lines), LINK_LABEL_LINE_CM * len(lines)


def _sloped_box(a: tuple, b: tuple, pos: float, size: tuple, above: bool) -> list:
    """The corners (cm) of a label sloped along the link a-b at `pos`, above or below it (TikZ
    keeps a sloped label upright: its baseline runs left to right), LINK_LABEL_OFF_PT off the link."""
    (x0, y0), (x1, y1) = a, b
    length = ((x1 - x0) ** 2 + (y1 - y0) ** 2) ** 0.5
    ux, uy = (x1 - x0) / length, (y1 - y0) / length
    if ux < 0 or (ux == 0 and uy < 0):
        ux, uy = -ux, -uy
    nx, ny = (-uy, ux) if above else (uy, -ux)  # towards the label's top (above) or its bottom (below)
    off = LINK_LABEL_OFF_PT / PT_PER_CM
    cx, cy = x0 + pos * (x1 - x0) + nx * off, y0 + pos * (y1 - y0) + ny * off
    (width, height), half = size, size[0] / 2
    near = [(cx - ux * half, cy - uy * half), (cx + ux * half, cy + uy * half)]
    far = [(x + nx * height, y + ny * height) for x, y in reversed(near)]
    return near + far


def _label_box(spec, node, text: str) -> tuple:
    """(left, bottom, right, top) cm of a one-line label's box (text_cm counts its inner sep)
    under a worker icon, less what a line may enter."""
    height = icon_size(spec, "worker")[1]
    half = text_cm(text) / 2 - ALLOWED_CM + LINE_HALF_CM
    top = node.y - height / 2 - LABEL_GAP_CM - ALLOWED_CM + LINE_HALF_CM
    return (node.x - half, top - LABEL_H, node.x + half, top)


def _point(spec, layout: Layout, nodes: dict, port: Port, outline: bool = False):
    """Where an edge's end is, in cm: an icon's anchor shifted by the port's offset; a box's or a
    group's centre (near enough for a line's slope; `outline`: a west or east port on the box's
    side, at least as wide as a server box, and its group's padding, for where along the link a
    label sits); None for ends it cannot place (braces)."""
    node = nodes.get(port.node)
    side = ("east" in port.anchor) - ("west" in port.anchor) if outline else 0
    if node is None:
        group = next((g for g in layout.groups if g.name == port.node), None)
        members = [nodes[m] for m in (group.members if group else ()) if m in nodes]
        if not members:
            return None
        x = min(m.x for m in members) + side * (box_half(members[0]) + HOST_PAD)
        return (x, sum(m.y for m in members) / len(members) + port.dy / PT_PER_CM)
    x, y = node.x, node.y
    if node.kind == "box":
        x += side * box_half(node)
    if node.kind == "icon":
        role = "worker" if _WORKER.match(node.name) else _ROLE.get(node.name)
        w, h = icon_size(spec, role) if role else ICON_SIZE["none"]
        x += w / 2 * (("east" in port.anchor) - ("west" in port.anchor))
        y += h / 2 * (("north" in port.anchor) - ("south" in port.anchor))
    return (x + port.dx / PT_PER_CM, y + port.dy / PT_PER_CM)


def box_half(node) -> float:
    """Half a box's width (cm): at least a server box's (psbox), or its widest line of text."""
    if node.kind != "box":
        return 0.0
    lines = [re.sub(r"^\[[^\]]*\]", "", line) for line in str(node.text).split("\\\\")]  # (a line's [1pt] skip)
    return max(node.min_width, PSBOX_W, *(text_cm(line) for line in lines)) / 2


def _segment_meets_box(a: tuple, b: tuple, box: tuple) -> bool:
    """Whether the segment a-b passes through the box (Liang-Barsky clipping)."""
    left, bottom, right, top = box
    (x0, y0), (x1, y1) = a, b
    dx, dy = x1 - x0, y1 - y0
    lo, hi = 0.0, 1.0
    for p, q in ((-dx, x0 - left), (dx, right - x0), (-dy, y0 - bottom), (dy, top - y0)):
        if p == 0:
            if q < 0:
                return False
            continue
        t = q / p
        if p < 0:
            lo = max(lo, t)
        else:
            hi = min(hi, t)
        if lo > hi:
            return False
    return True
