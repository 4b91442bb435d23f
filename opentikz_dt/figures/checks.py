"""TeX-level invariants of generated figures, as functions returning problems (empty = ok).

Used by the tests and by the edit-contract engine: a figure must compile, its named
nodes and labels must not overlap, and it may use palette colours only.
Must not import torch.
"""

from __future__ import annotations

import re
from itertools import combinations

from ..errors import DtgenError
from ..invariants import tex_palette_only
from .bbox import BBox, parse_bboxes, parse_paths


def check_figure_compiles(tex: str) -> list[str]:
    """Problems compiling `tex` with pdflatex under the safe settings (empty when it compiles).
    The compile is memoised (compile_cached): no-overlaps then reads the same run's log."""
    from .compile import compile_cached

    try:
        compile_cached(tex)
    except DtgenError as exc:
        return [str(exc)]
    return []


# Boxes drawn around other nodes on purpose: hosts, the shard group, all workers, the
# all-reduce bar, timeline panels and lanes.
CONTAINERS = re.compile(r"^(h[1-9][0-9]*|psgroup|workers|[a-z]+-panel|[a-z]+-lanes)$")


def check_no_overlaps(bboxes: list[BBox]) -> list[str]:
    """Pairs of named boxes that overlap. A node inside a container (a worker in its host box) is fine."""
    problems = []
    boxes = [b for b in bboxes if b.width > 0.5 and b.height > 0.5]
    for a, b in combinations(boxes, 2):
        if (CONTAINERS.match(a.name) and a.contains(b)) or (CONTAINERS.match(b.name) and b.contains(a)):
            continue
        area = a.overlap(b)
        if area:
            problems.append(f"'{a.name}' and '{b.name}' overlap ({area:.1f} pt^2)")
    return problems


def check_figure_geometry(log: str) -> list[str]:
    """Overlap problems from a compiled figure's log (the geometry probe's lines):
    boxes against boxes, and every drawn edge against every text and icon it does not join."""
    boxes = parse_bboxes(log)
    if not boxes:
        return ["no geometry probe lines (BBOX ...) in the log"]
    return check_no_overlaps(boxes) + check_paths_clear(boxes, parse_paths(log))


# Text nodes keep 2pt of inner sep around their glyphs, icons 1pt: a path may graze 1pt of it.
TEXT_MARGIN_PT = 1.0
ICON_MARGIN_PT = 1.0


def _is_text(name: str) -> bool:
    return name.endswith("-label") or name == "title" or name.startswith("note") or name.endswith("-more")


def check_paths_clear(bboxes: list[BBox], paths: dict) -> list[str]:
    """Edges that run through a text (a label, the title, a note) or through an icon or box
    other than the ones they join. An edge is named <src>-<dst>-<style>;
    the nodes it starts or ends at may touch it; its own label only at the border."""
    problems = []
    # A sloped label's probe corners are rotated: keep the box they span.
    upright = [BBox(b.name, min(b.x0, b.x1), min(b.y0, b.y1), max(b.x0, b.x1), max(b.y0, b.y1)) for b in bboxes]
    solid = [b for b in upright if not CONTAINERS.match(b.name) and b.width > 0.5 and b.height > 0.5]
    for edge, points in paths.items():
        ends = _edge_ends(edge, {b.name for b in bboxes})
        for box in solid:
            if box.name in ends:
                continue
            if box.name == f"{edge}-label":  # beside its own edge (maybe sloped: corners not axis-aligned)
                mx, my = abs(box.width) / 4, abs(box.height) / 4
            else:
                mx = my = TEXT_MARGIN_PT if _is_text(box.name) else ICON_MARGIN_PT
            hits = sum(1 for x, y in points if box.x0 + mx < x < box.x1 - mx and box.y0 + my < y < box.y1 - my)
            if hits:
                problems.append(f"edge '{edge}' runs through '{box.name}' ({2 * hits} pt of path)")
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
