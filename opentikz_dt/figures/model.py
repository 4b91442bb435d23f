"""The drawable topology layout: named nodes, edges, groups and braces with positions.

topology.py builds a Layout from a Spec; templates/topology.tex.j2 draws any Layout.
Every text field is TeX already made safe (a `Tex` value: a label macro such as
`\\datalabel`, or the output of texsafe.render_label); styles are names from
names.STYLES; colours are palette names. Positions are centimetres; the template
writes them as multiples of \\colsep and \\rowsep so those parameters stay editable.
Must not import torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field


class Tex(str):
    """A string that is valid, safe TeX (built by code from validated values)."""


@dataclass(frozen=True)
class Node:
    """A named node: an icon (macro + colour), a box with text, an ellipsis or a bare coordinate."""

    name: str
    x: float = 0.0  # cm; ignored when `rel` places the node next to another
    y: float = 0.0
    kind: str = "icon"  # icon | box | ellipsis | coord | text
    icon: str = ""  # icon macro name (names.ICON_MACROS values)
    color: str = ""  # palette name of the icon or box
    text: Tex = Tex("")
    label: Tex = Tex("")  # drawn as node <name>-label beside the node
    label_side: str = "below"
    label_flush: str = ""  # "west": the label's west edge flush with the node's (arrows from the left clear it)
    style: str = ""  # box style (names.STYLES)
    rel: str = ""  # relative placement, e.g. "above=4pt of w1"
    min_height: float = 0.0  # cm, boxes only
    min_width: float = 0.0  # cm, boxes only


@dataclass(frozen=True)
class Port:
    """An end of an edge: a node anchor shifted by a few points (so arrows do not all meet)."""

    node: str
    anchor: str = "center"
    dx: float = 0.0  # pt
    dy: float = 0.0  # pt
    level: str = ""  # another node's anchor: the port is (level -| node.anchor), level with it


@dataclass(frozen=True)
class Edge:
    """A flow from one named node to another, in one of the flow styles."""

    src: Port
    dst: Port
    style: str  # data | grad | wts | act | ring | peer
    route: str = "line"  # line | bend | loop | ortho | arch
    bend: int = 0  # degrees for bend; out/in angle base for loop
    dx: float = 0.0  # cm: the side offset of an ortho route, the height of an arch
    both: bool = False  # arrow heads at both ends
    elided: bool = False  # dotted: stands for elided members
    label: Tex = Tex("")
    label_side: str = "above"
    label_pos: float = 0.5
    label_color: str = ""  # palette tint of the label text (the flow's colour)
    sloped: bool = False  # label follows the edge's slope (line and bend routes only)
    shorten: float = 0.0  # pt kept clear at both ends (edges ending at a label's text)

    @property
    def name(self) -> str:
        return f"{self.src.node}-{self.dst.node}-{self.style}"


@dataclass(frozen=True)
class Group:
    """A box fitted around nodes (a host, the shards of a server, all workers)."""

    name: str
    members: tuple
    style: str  # hostbox | psbox
    label: Tex = Tex("")
    label_side: str = "north west"  # corner of the box the label sits in; "west": beside the box, left of it
    label_dx: float = 0.0  # cm right of that corner (clear of a line that runs down the box's edge)


@dataclass(frozen=True)
class Brace:
    """A brace from one point to another with a count label; its tip is a named coordinate."""

    name: str
    start: Port
    end: Port
    label: Tex


@dataclass(frozen=True)
class Layout:
    title: Tex
    colsep: float
    rowsep: float
    nodes: tuple
    edges: tuple = ()
    groups: tuple = ()
    braces: tuple = ()
    # Groups drawn on the background before the edges (host boxes), or around all (workers).
    macros: dict = field(default_factory=dict)  # parameter macro name -> Tex value
    notes: tuple = ()  # Tex comment lines: gaps widened beyond the spec's colsep / rowsep
    styles: tuple = ()  # extra styles the picture defines (the mesh's outlines); none for the others

    def names(self) -> list[str]:
        """Every named node the picture defines (the geometry probe reports these)."""
        out = []
        for node in self.nodes:
            if node.kind != "coord":
                out.append(node.name)
            if node.label:
                out.append(f"{node.name}-label")
        for edge in self.edges:
            if edge.label:
                out.append(f"{edge.name}-label")
        for group in self.groups:
            out.append(group.name)
            if group.label:
                out.append(f"{group.name}-label")
        for brace in self.braces:
            out.append(f"{brace.name}-label")
        out += ["model", "title"]  # the model note under the picture (render_topology), the title above
        return out


def elide(count: int, max_drawn: int) -> list:
    """1-based indices to draw: all of them, or the first few, None (the ellipsis) and the last."""
    if count <= max_drawn:
        return list(range(1, count + 1))
    head = max(1, min(3, max_drawn - 2))
    return list(range(1, head + 1)) + [None, count]


def split_even(count: int, parts: int) -> list[tuple[int, int]]:
    """Split range(count) into `parts` contiguous (start, end) runs, the first ones longer."""
    base, extra = divmod(count, parts)
    runs, start = [], 0
    for index in range(parts):
        size = base + (index < extra)
        runs.append((start, start + size))
        start += size
    return runs


def stage_layers(layer_count: int, stages: int) -> list[tuple[int, int]]:
    """1-based inclusive (first, last) linear layer of each pipeline stage, contiguous and even."""
    return [(a + 1, b) for a, b in split_even(layer_count, stages)]
