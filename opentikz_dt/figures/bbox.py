"""The geometry probe: parse the `BBOX name x0 y0 x1 y1` lines a figure writes to its log.

Templates \\typeout one line per named node (nodes, their labels, edge labels, group
labels, the title) at the end of the picture; after a compile these boxes let tests
check that no two of them overlap. Must not import torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_LINE = re.compile(r"^BBOX (\S+) (-?[\d.]+)pt (-?[\d.]+)pt (-?[\d.]+)pt (-?[\d.]+)pt$", re.MULTILINE)
TOLERANCE_PT = 0.5


@dataclass(frozen=True)
class BBox:
    name: str
    x0: float
    y0: float
    x1: float
    y1: float

    @property
    def width(self) -> float:
        return self.x1 - self.x0

    @property
    def height(self) -> float:
        return self.y1 - self.y0

    def contains(self, other: "BBox") -> bool:
        t = TOLERANCE_PT
        return (self.x0 - t <= other.x0 and other.x1 <= self.x1 + t
                and self.y0 - t <= other.y0 and other.y1 <= self.y1 + t)

    def overlap(self, other: "BBox") -> float:
        """Area (pt^2) of the intersection, counting only overlaps deeper than the tolerance."""
        dx = min(self.x1, other.x1) - max(self.x0, other.x0)
        dy = min(self.y1, other.y1) - max(self.y0, other.y0)
        if dx <= TOLERANCE_PT or dy <= TOLERANCE_PT:
            return 0.0
        return dx * dy


def parse_bboxes(log: str) -> list[BBox]:
    """Every probe line of a TeX log, in order (compile.py sets max_print_line so none wrap)."""
    return [BBox(m.group(1), *(float(m.group(i)) for i in range(2, 6))) for m in _LINE.finditer(log)]


_PATH = re.compile(r"^PATH (\S+) (-?[\d.]+)pt (-?[\d.]+)pt$", re.MULTILINE)


def parse_paths(log: str) -> dict[str, list[tuple[float, float]]]:
    """Edge name -> the points (pt) the probe sampled along it, every 2pt, in drawing order."""
    paths: dict[str, list[tuple[float, float]]] = {}
    for m in _PATH.finditer(log):
        paths.setdefault(m.group(1), []).append((float(m.group(2)), float(m.group(3))))
    return paths


_QUAD = re.compile(r"^QUAD (\S+) (-?[\d.]+)pt (-?[\d.]+)pt (-?[\d.]+)pt (-?[\d.]+)pt$", re.MULTILINE)


def parse_quads(log: str, boxes: list[BBox]) -> dict[str, list[tuple[float, float]]]:
    """Name -> corners (south west, south east, north east, north west) of every node that is
    rotated (a sloped edge label): its BBOX corners alone do not say where its text is."""
    corners = {m.group(1): [float(m.group(i)) for i in range(2, 6)] for m in _QUAD.finditer(log)}
    out = {}
    for box in boxes:
        if box.name not in corners:
            continue
        sex, sey, nwx, nwy = corners[box.name]
        if abs(sey - box.y0) > TOLERANCE_PT or abs(nwx - box.x0) > TOLERANCE_PT:
            out[box.name] = [(box.x0, box.y0), (sex, sey), (box.x1, box.y1), (nwx, nwy)]
    return out
