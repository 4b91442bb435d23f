"""TeX-level invariants of generated figures, as functions returning problems (empty = ok).

Used by the tests and by the edit-contract engine: a figure must compile, its named
nodes and labels must not overlap, and it may use palette colours only.
Must not import torch.
"""

from __future__ import annotations

import math
import re
from itertools import combinations

from ..errors import DtgenError
from ..invariants import tex_palette_only
from .bbox import TOLERANCE_PT, BBox, parse_bboxes, parse_paths, parse_quads


def check_figure_compiles(tex: str) -> list[str]:
    """Problems compiling `tex` with pdflatex under the safe settings (empty when it compiles).
    The compile is memoised (compile_cached): no-overlaps then reads the same run's log."""
    from .compile import compile_cached

    try:
        compile_cached(tex)
    except DtgenError as exc:
        return [str(exc)]
    return []


# Boxes drawn around other nodes on purpose: hosts (h3-2: a host's part in a mesh's second
# stage), the shard group, all workers, the all-reduce bar, timeline panels and lanes, and a
# mesh's group outlines (w5-tp: the tensor group whose first member is w5; -dp, -pp).
CONTAINERS = re.compile(r"^(h[1-9][0-9]*(-[1-9][0-9]*)?|psgroup|workers|[a-z]+-panel|[a-z]+-lanes"
                        r"|w[1-9][0-9]*-(tp|dp|pp))$")
# A mesh's outlines cross each other and the host boxes by design (rows against columns).
OUTLINES = re.compile(r"^w[1-9][0-9]*-(tp|dp|pp)$")


def check_no_overlaps(bboxes: list[BBox]) -> list[str]:
    """Pairs of named boxes that overlap. A node inside a container (a worker in its host box) is fine."""
    problems = []
    boxes = [b for b in bboxes if b.width > 0.5 and b.height > 0.5]
    for a, b in combinations(boxes, 2):
        if (CONTAINERS.match(a.name) and a.contains(b)) or (CONTAINERS.match(b.name) and b.contains(a)):
            continue
        if (OUTLINES.match(a.name) or OUTLINES.match(b.name)) and CONTAINERS.match(a.name) and CONTAINERS.match(b.name):
            continue
        area = a.overlap(b)
        if area:
            problems.append(f"'{a.name}' and '{b.name}' overlap ({area:.1f} pt^2)")
    return problems


def check_figure_geometry(log: str) -> list[str]:
    """Overlap problems from a compiled figure's log (the geometry probe's lines):
    boxes against boxes, every drawn edge against every text and icon it does not join, and
    every edge against its own sloped label (beside it, not on it)."""
    boxes = parse_bboxes(log)
    if not boxes:
        return ["no geometry probe lines (BBOX ...) in the log"]
    rects = {b.name: _Rect.of(b, quads) for quads in [parse_quads(log, boxes)] for b in boxes}
    # (a sloped label's south west corner may lie above its north east one: the pairs are found
    # on the boxes upright, then the rotated shapes decide)
    overlaps = [p for p in check_no_overlaps([_upright(b) for b in boxes]) if _still_overlapping(p, rects)]
    paths = parse_paths(log)
    return overlaps + check_paths_clear(boxes, paths, rects) + check_sloped_labels_off_links(paths, rects)


def _upright(box: BBox) -> BBox:
    """The box spanning a node's two probed corners, whichever way its text runs."""
    return BBox(box.name, min(box.x0, box.x1), min(box.y0, box.y1), max(box.x0, box.x1), max(box.y0, box.y1))


# Text nodes keep 2pt of inner sep around their glyphs, icons 1pt. A path (1pt wide) may
# run along a text's box but not into it: a line within a point of the glyphs reads as
# touching them (a ring link beside a worker's label). An icon's path may graze 1pt of it.
TEXT_MARGIN_PT = 0.5
ICON_MARGIN_PT = 1.0


class _Rect:
    """A node's box as centre, unit axes and half extents: upright, or rotated (a sloped label)."""

    def __init__(self, corners):
        (x0, y0), (x1, y1), _, (x3, y3) = corners
        self.cx, self.cy = (corners[0][0] + corners[2][0]) / 2, (corners[0][1] + corners[2][1]) / 2
        w, h = math.hypot(x1 - x0, y1 - y0), math.hypot(x3 - x0, y3 - y0)
        self.u = ((x1 - x0) / w, (y1 - y0) / w) if w else (1.0, 0.0)
        self.v = ((x3 - x0) / h, (y3 - y0) / h) if h else (0.0, 1.0)
        self.a, self.b = w / 2, h / 2
        self.rotated = abs(self.u[1]) > 1e-3  # its text does not run level (a sloped label)

    @classmethod
    def of(cls, box: BBox, quads: dict) -> "_Rect":
        return cls(quads.get(box.name) or [(box.x0, box.y0), (box.x1, box.y0), (box.x1, box.y1), (box.x0, box.y1)])

    def holds(self, x, y, mu, mv) -> bool:
        dx, dy = x - self.cx, y - self.cy
        return (abs(dx * self.u[0] + dy * self.u[1]) < self.a - mu
                and abs(dx * self.v[0] + dy * self.v[1]) < self.b - mv)

    def reach(self, axis) -> float:
        return self.a * abs(self.u[0] * axis[0] + self.u[1] * axis[1]) + self.b * abs(self.v[0] * axis[0] + self.v[1] * axis[1])

    def overlaps(self, other: "_Rect") -> bool:
        """Separating-axis test, counting only overlaps deeper than the probe's tolerance."""
        for axis in (self.u, self.v, other.u, other.v):
            gap = abs((other.cx - self.cx) * axis[0] + (other.cy - self.cy) * axis[1])
            if gap >= self.reach(axis) + other.reach(axis) - TOLERANCE_PT:
                return False
        return True


_PAIR = re.compile(r"^'(.+)' and '(.+)' overlap")


def _still_overlapping(problem: str, rects: dict) -> bool:
    a, b = _PAIR.match(problem).groups()
    return rects[a].overlaps(rects[b])


def _is_text(name: str) -> bool:
    return name.endswith("-label") or name == "title" or name.startswith("note") or name.endswith("-more")


def check_paths_clear(bboxes: list[BBox], paths: dict, rects: dict | None = None) -> list[str]:
    """Edges that run through a text (a label, the title, a note) or through an icon or box
    other than the ones they join; a brace (<name>-brace) counts as an edge joining nothing,
    so it may not run through a worker's label. An edge is named <src>-<dst>-<style>; the nodes it
    starts or ends at may touch it; its own label only its outer half (labels sit beside it)."""
    rects = rects or {b.name: _Rect.of(b, {}) for b in bboxes}
    problems = []
    solid = [b for b in bboxes if not CONTAINERS.match(b.name) and abs(b.width) > 0.5 and abs(b.height) > 0.5]
    names = {b.name for b in bboxes}
    for edge, points in paths.items():
        ends = _edge_ends(edge, names)
        for box in solid:
            if box.name in ends:
                continue
            rect = rects[box.name]
            if box.name == f"{edge}-label":
                mu, mv = rect.a / 2, rect.b / 2
            else:
                mu = mv = TEXT_MARGIN_PT if _is_text(box.name) else ICON_MARGIN_PT
            hits = sum(1 for x, y in points if rect.holds(x, y, mu, mv))
            if hits:
                problems.append(f"edge '{edge}' runs through '{box.name}' ({2 * hits} pt of path)")
    return problems


# A label sloped along its link sits beside it, not on it: the link's centre line stays this far
# outside the label's (rotated) box, so the 1pt stroke keeps the box's 2pt inner sep clear of
# the glyphs (a label anchored on its link has the stroke 1.5pt from them: at 300 dpi a dashed
# weight arrow reads as running through the text).
OWN_LINK_CLEAR_PT = 0.5


def check_sloped_labels_off_links(paths: dict, rects: dict) -> list[str]:
    """Sloped (rotated) labels of edges (<edge>-label) that their own edge comes within
    OWN_LINK_CLEAR_PT of. check_paths_clear lets an edge into its own label's outer half
    (a label hung off a point of its link); along a sloped label the link must stay outside."""
    problems = []
    for edge, points in paths.items():
        rect = rects.get(f"{edge}-label")
        if rect is None or not rect.rotated:
            continue
        hits = sum(1 for x, y in points if rect.holds(x, y, -OWN_LINK_CLEAR_PT, -OWN_LINK_CLEAR_PT))
        if hits:
            problems.append(f"edge '{edge}' runs along its sloped label '{edge}-label' closer than "
                            f"{OWN_LINK_CLEAR_PT:g} pt ({2 * hits} pt of path)")
    return problems


def _edge_ends(edge: str, names: set) -> set:
    """The probed node names an edge <src>-<dst>-<style> joins (names contain dashes too)."""
    stem = edge.rsplit("-", 1)[0]
    return {n for n in names if stem.startswith(n + "-") or stem.endswith("-" + n)}


def check_palette_only(tex: str) -> list[str]:
    """Colours only through palette names after the palette block (the contract's TeX invariant)."""
    return tex_palette_only(tex)


_NODE_DEF = re.compile(r"\\(?:node|coordinate)\b[^;]*?\(([A-Za-z][\w-]*)\)\s*(?:at\b|\{|;)")


def check_node_ids(tex: str) -> list[str]:
    """Every named node is defined once and follows the naming scheme (names.is_node_name)."""
    from .names import is_node_name

    problems, seen = [], set()
    for name in _NODE_DEF.findall(tex):
        if name in seen:
            problems.append(f"node ({name}) is defined twice")
        seen.add(name)
        if not is_node_name(name):
            problems.append(f"node ({name}) does not follow the node naming scheme")
    return problems
