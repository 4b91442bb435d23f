"""Effective spacing: figure.colsep / rowsep are the gaps asked for; the layout uses at least
what its icons and labels need, so a valid spec never gives an overlapping figure.

Each layout kind's minimum gap is estimated from the sizes of its icons (as drawn, with
the node's inner sep) and of its label texts (a conservative width per character of
\\footnotesize sans serif). The layout uses max(asked, needed); when that widens a gap,
the topology template says so in a TeX comment. Pure; must not import torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..shards import shard_tensors
from ..texsafe import is_cjk
from .topology_fit import fitted
from .model import elide

# Icon node sizes (cm, width x height) as drawn: the picture plus the node's 1pt inner sep.
ICON_SIZE = {"gpu": (2.0, 1.23), "cpu": (1.5, 1.5), "server": (1.6, 1.3), "dataset": (1.42, 1.32),
             "database": (1.3, 1.45), "none": (1.47, 0.87)}
# A fitted figure (topology_fit) draws the GPU without its text: the card is half as wide.
COMPACT_ICON_SIZE = {**ICON_SIZE, "gpu": (1.2, 1.23)}
CHAR_CM = 0.15  # upper estimate of one \footnotesize sans-serif character (measured 0.13-0.145)
MATH_CHAR_CM = 0.2  # and of one math glyph (italic, with its spacing)
LABEL_PAD = 0.14  # slbl inner sep, both sides
LABEL_H = 0.45  # a one-line label below its node: text, inner sep and the 2pt distance
HOST_PAD = 0.25  # hostbox inner sep (7pt)
PSBOX_W = 2.4  # psbox minimum width
GAP = 0.3  # clear space kept between neighbours
ELLIPSIS_GAP = 0.55  # fraction of rowsep between a worker and the ellipsis (topology_common)
ELLIPSIS_HALF = 0.31  # half the height of the \large \vdots node
_MACRO = re.compile(r"\\[A-Za-z]+")
_FONT = re.compile(r"\\(?:mathbf|mathrm|mathit|mathsf|mathcal|boldsymbol|text|textbf|textit)\b")
_MATH = re.compile(r"\$[^$]*\$")


@dataclass(frozen=True)
class Spacing:
    """The gaps a layout is drawn with (cm) and the ones the spec asked for."""

    colsep: float
    rowsep: float
    asked_colsep: float
    asked_rowsep: float

    def notes(self) -> list[str]:
        """TeX comment lines (numbers only) for every widened gap."""
        out = []
        for key, asked, used in (("colsep", self.asked_colsep, self.colsep), ("rowsep", self.asked_rowsep, self.rowsep)):
            if used > asked:
                out.append(f"figure.{key} {asked:g} cm is too tight for these labels and icons: "
                           f"dtgen draws it at {used:.2f} cm")
        return out


def icon_size(spec, role: str) -> tuple[float, float]:
    """(width, height) cm of a role's icon node as drawn (compact in a fitted figure)."""
    sizes = COMPACT_ICON_SIZE if fitted(spec) else ICON_SIZE
    return sizes[spec.figure.icons[role]]


def column_ys(slots, rowsep) -> list[float]:
    """y (cm) of each slot of a column, top to bottom, centred on 0; the ellipsis sits closer."""
    ys = [0.0]
    for prev, cur in zip(slots, slots[1:]):
        gap = rowsep * (ELLIPSIS_GAP if prev is None or cur is None else 1.0)
        ys.append(ys[-1] - gap)
    mid = (ys[0] + ys[-1]) / 2
    return [y - mid for y in ys]


def text_cm(label: str) -> float:
    """Estimated width (cm) of a label as printed: a TeX command counts as one character
    (a font switch as none); math glyphs are wider and math spaces do not print."""
    def visible(text: str, spaces: bool = True) -> int:
        shown = re.sub(r"[${}^_]", "", _MACRO.sub("x", _FONT.sub("", text)))
        return len(shown if spaces else shown.replace(" ", ""))

    math = "".join(_MATH.findall(label))
    wide = sum(1 for ch in label if is_cjk(ch))  # a Chinese or Japanese glyph is a full em: two characters
    return CHAR_CM * (visible(_MATH.sub("", label)) + wide) + MATH_CHAR_CM * visible(math, spaces=False) + LABEL_PAD


def effective_spacing(spec, kind: str) -> Spacing:
    """max(asked, needed) for both gaps of a layout kind (topology._layout_kind)."""
    f = spec.figure
    need_col, need_row = _NEEDS[kind](_Sizes(spec))
    return Spacing(round(max(f.colsep, need_col), 2), round(max(f.rowsep, need_row), 2), f.colsep, f.rowsep)


class _Sizes:
    """The measures the minimum gaps are made of, for one spec."""

    def __init__(self, spec):
        t, f = spec.topology, spec.figure
        self.spec = spec
        data_w, self.data_h = icon_size(spec, "data")
        self.data_icon_half = data_w / 2
        self.worker_w, self.worker_h = icon_size(spec, "worker")
        self.server_w, _ = icon_size(spec, "server")
        drawn = [i for i in elide(t.workers.count, f.max_workers_drawn) if i is not None]
        self.worker_label = max(text_cm(t.workers.label_of(f"w{i}")) for i in drawn)
        self.data_half = max(data_w, text_cm(t.data_label)) / 2
        self.worker_half = max(self.worker_w, self.worker_label) / 2
        self.batch = text_cm(f.labels["batch"])
        self.flow = max(text_cm(f.labels["grad"]), text_cm(f.labels["weight"]))
        self.elided = len(drawn) < t.workers.count
        self.hosts = t.hosts > 1 and not self.elided
        self.column_half = self.worker_half + (HOST_PAD if self.hosts else 0.0)  # in its host box

    def brace(self, count_text: str) -> float:
        """Room left of a column for the brace (6pt out, tip 8pt, label 4pt) and its count label."""
        return 0.65 + max(text_cm(line) for line in count_text.split("\n"))

    def data_to_column(self) -> float:
        """Gap from the data icon to a column of workers (centre to centre)."""
        if self.elided:  # the brace label sits level with the data icon, above its label (one line)
            t = self.spec.topology
            count = f"{t.workers.count:,} workers" + (f"\non {t.hosts:,} hosts" if t.hosts > 1 else "")
            data = self.data_half if t.hosts > 1 else self.data_icon_half
            return data + self.brace(count) + self.worker_w / 2 + GAP / 2
        return self.data_half + self.batch + 2 * GAP + self.column_half

    def column_rowsep(self) -> float:
        """A worker, its label and a gap (a host box's padding and label between hosts)."""
        row = self.worker_h + LABEL_H + GAP
        if self.hosts:
            row += 2 * HOST_PAD + LABEL_H
        if self.elided:  # the ellipsis sits ELLIPSIS_GAP * rowsep below the last worker above it
            row = max(row, (self.worker_h / 2 + LABEL_H + ELLIPSIS_HALF) / ELLIPSIS_GAP)
        return row


def _parameter_server(s: _Sizes) -> tuple[float, float]:
    servers = s.spec.topology.servers
    if servers.count == 1:
        server_half = max(s.server_w, text_cm(servers.label)) / 2
        box_top = 1.3 / 2 + LABEL_H  # the server icon, and its label below (the same by symmetry)
    else:  # shard boxes (label over tensors, \scriptsize) in the padded group box, its label above
        tensors = max(len(names) for names in shard_tensors(s.spec).values())
        shard = max(0.9 * text_cm(servers.label_of(f"ps{servers.count}")), 0.45 * min(tensors, 6)) + 0.35
        server_half = max(PSBOX_W + 0.1, shard) / 2 + HOST_PAD
        box_top = 1.25 * (len(elide(servers.count, 4)) - 1) / 2 + 0.5 + HOST_PAD + LABEL_H
    rowsep = max(s.spec.figure.rowsep, s.column_rowsep())
    # The flow labels sit above (below) right of the first (last) edge's midpoint. When that
    # midpoint is level with the server, half the gap must hold a label; above it, any gap will do.
    top = column_ys(elide(s.spec.topology.workers.count, s.spec.figure.max_workers_drawn), rowsep)[0]
    level = (top + 0.4) / 2 < box_top + 0.1
    to_server = s.column_half + server_half + (2 * s.flow + 0.3 if level else s.flow + GAP)
    return max(s.data_to_column(), to_server), s.column_rowsep()


def _allreduce(s: _Sizes) -> tuple[float, float]:
    # The collective's bar sits at 1.6 colsep: 0.6 colsep holds a worker half, the bar half and the label.
    to_bar = (s.column_half + PSBOX_W / 2 + s.flow + GAP) / 0.6  # its label sits above the edge's middle
    return max(s.data_to_column(), to_bar), s.column_rowsep()


def _ring(s: _Sizes) -> tuple[float, float]:
    return s.data_to_column(), s.column_rowsep()


def _tree(s: _Sizes) -> tuple[float, float]:
    # The leftmost worker sits 0.6 cm right of colsep, inside the padded workers box.
    return s.data_half + s.batch + 2 * GAP + HOST_PAD + s.worker_half - 0.6, 1.2


def _hierarchical(s: _Sizes) -> tuple[float, float]:
    t = s.spec.topology
    box = s.worker_half + 0.55 + HOST_PAD  # the leaders' bus runs inside the box, left of the first worker
    if len(elide(t.hosts, 4)) < t.hosts:
        return s.data_icon_half + s.brace(f"{t.hosts:,} hosts") + box + GAP / 2, 1.2
    return s.data_half + s.batch + 2 * GAP + box, 1.2


def _gossip(s: _Sizes) -> tuple[float, float]:
    # The ring's leftmost worker sits 1.6 cm right of colsep with its label on its left.
    left = s.worker_w / 2 + 0.07 + s.worker_label + HOST_PAD
    return s.data_half + s.batch + 2 * GAP + left - 1.6, 1.2


def _pipeline(s: _Sizes) -> tuple[float, float]:
    return 1.0, 1.2  # stages sit max(3.5, 0.78 colsep) apart whatever colsep is


def _single(s: _Sizes) -> tuple[float, float]:
    return (s.data_half + s.batch + 2 * GAP + s.worker_half) / 0.8, 1.2  # the worker sits at 0.8 colsep


_NEEDS = {
    "parameter-server": _parameter_server,
    "central-storage": _parameter_server,
    "allreduce": _allreduce,
    "ring": _ring,
    "tree": _tree,
    "hierarchical": _hierarchical,
    "gossip": _gossip,
    "pipeline": _pipeline,
    "single": _single,
}
