"""Effective spacing: figure.colsep / rowsep are the gaps asked for; the layout uses at least
what its icons and labels need, so a valid spec never gives an overlapping figure.

Each layout's minimum gap (the *_needs functions, which the strategies' figures plugins
name as their spacing_needs) is estimated from the sizes of its icons (as drawn, with
the node's inner sep) and of its label texts (a conservative width per character of
\\footnotesize sans serif). The layout uses max(asked, needed); when that widens a gap,
the topology template says so in a TeX comment. Pure; must not import torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..shards import shard_tensors
from .topology_fit import PT_PER_CM, fitted, hosts_drawn
from .model import elide
from .plugin import plugin_of
from .texts import label_text
from .textwidth import split_in_two, text_cm

# Icon node sizes (cm, width x height) as drawn: the picture plus the node's 1pt inner sep.
ICON_SIZE = {"gpu": (2.0, 1.23), "cpu": (1.5, 1.5), "server": (1.6, 1.3), "dataset": (1.42, 1.32),
             "database": (1.3, 1.45), "none": (1.47, 0.87)}
# A fitted figure (topology_fit) draws the GPU without its text: the card is half as wide.
COMPACT_ICON_SIZE = {**ICON_SIZE, "gpu": (1.2, 1.23)}
LABEL_H = 0.45  # a one-line label below its node: text, inner sep and the 2pt distance
LINE_H = 0.36  # each further line of a label (\footnotesize baselineskip, 9.5pt, and room for descenders)
HOST_PAD = 0.25  # hostbox inner sep (7pt)
PSBOX_W = 2.4  # psbox minimum width
PSBOX_FIT_W = 1.6  # and a fitted figure's shard box (its tensors on several lines)
SHARD_LINE_TENSORS = 3  # tensors listed on one line of a fitted figure's shard box
SHARD_LINE_H = 0.34  # a line of a fitted shard box (\footnotesize)
GAP = 0.3  # clear space kept between neighbours
FAN_MIN_CM = 1.0  # the shortest data fan a fitted figure draws (its label above the data icon)
ELLIPSIS_GAP = 0.55  # fraction of rowsep between a worker and the ellipsis (topology_common)
ELLIPSIS_HALF = 0.31  # half the height of the \large \vdots node


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


def worker_ys(spec, slots, rowsep) -> list[float]:
    """y (cm) of each slot of a worker column (column_ys). In a fitted figure whose workers sit in
    host boxes, only the gap between two hosts holds the boxes' padding and the next host's label:
    workers of one host sit a worker's row apart."""
    hosts = spec.topology.hosts
    if not fitted(spec) or hosts < 2 or None in slots:
        return column_ys(slots, rowsep)
    inner = rowsep - host_extra(spec)
    ys = [0.0]
    for prev, cur in zip(slots, slots[1:]):
        same = spec.topology.host_of(f"w{prev}") == spec.topology.host_of(f"w{cur}")
        ys.append(ys[-1] - (inner if same else rowsep))
    mid = (ys[0] + ys[-1]) / 2
    return [y - mid for y in ys]


def host_extra(spec) -> float:
    """What the gap between two host boxes adds to a worker's row: both boxes' padding and the
    lower box's label (a fitted figure keeps a second line for it: a run's address)."""
    return 2 * HOST_PAD + LABEL_H + (LINE_H if fitted(spec) else 0.0)


WRAP_SLACK = 0.4  # cm a label of a fitted figure may reach past its icon on one line
# A line break only the measured figures' layout estimates hold (measured.annotate._label_with_time):
# at natural width their labels print on several lines (step time, memory) where a spec's print on one.
MEASURED_BREAK = "\u2028"


def printed_lines(spec, label: str, role: str) -> list[str]:
    """The lines a node's label prints as. A fitted figure breaks it where it holds a
    newline (a measured label puts its step time on a line of its own), and splits a line
    much wider than the node's icon in two, so the label takes no more room than the icon
    and arrows reaching the icon's side stay clear of it. A natural-width figure prints one line,
    except where an estimate's label holds MEASURED_BREAK (a measured label's memory line)."""
    if not fitted(spec):
        return label.split(MEASURED_BREAK)
    icon_w = icon_size(spec, role)[0]
    lines = []
    for line in label.split("\n"):
        lines += split_in_two(line) if text_cm(line) > icon_w + WRAP_SLACK else [line]
    return lines


def printed_cm(spec, label: str, role: str) -> float:
    """Estimated width (cm) of a node's label as printed (printed_lines)."""
    return max(text_cm(line) for line in printed_lines(spec, label, role))


def effective_spacing(spec, needs) -> Spacing:
    """max(asked, needed) for both gaps; `needs(Sizes(spec))` gives the needed ones (the
    strategy's figures plugin's spacing_needs: one of the *_needs functions below)."""
    f = spec.figure
    need_col, need_row = needs(Sizes(spec))
    return Spacing(round(max(f.colsep, need_col), 2), round(max(f.rowsep, need_row), 2), f.colsep, f.rowsep)


class Sizes:
    """The measures the minimum gaps are made of, for one spec."""

    def __init__(self, spec):
        t, f = spec.topology, spec.figure
        self.spec = spec
        data_w, self.data_h = icon_size(spec, "data")
        self.data_icon_half = data_w / 2
        self.worker_w, self.worker_h = icon_size(spec, "worker")
        self.server_w, _ = icon_size(spec, "server")
        drawn = [i for i in elide(t.workers.count, f.max_workers_drawn) if i is not None]
        self.worker_label = max(printed_cm(spec, t.workers.label_of(f"w{i}"), "worker") for i in drawn)
        self.worker_lines = max(len(printed_lines(spec, t.workers.label_of(f"w{i}"), "worker")) for i in drawn)
        self.data_half = max(data_w, printed_cm(spec, t.data_label, "data")) / 2
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
        if self.elided:  # the brace label sits level with the data icon, above its label (one line);
            # the brace stands left of the widest label (topology_common.data_fan), not just the icons
            t = self.spec.topology
            count = label_text(self.spec, "workers_brace", n=f"{t.workers.count:,}") + (
                "\n" + label_text(self.spec, "on_hosts", n=f"{t.hosts:,}") if t.hosts > 1 else "")
            data = self.data_half if t.hosts > 1 else self.data_icon_half
            return data + self.brace(count) + self.worker_half + GAP / 2
        if fitted(self.spec) and self.steep_fan():  # the label sits above the icon: short arrows will do
            return self.data_half + FAN_MIN_CM + self.column_half
        # The batch label sits in the gap, clear of the data icon by as much as a one-line data
        # label reaches past it (a fitted figure may print that label on two lines, narrower).
        data_half = max(self.data_half, text_cm(self.spec.topology.data_label) / 2)
        return data_half + self.batch + 2 * GAP + self.column_half

    def steep_fan(self) -> bool:
        """True when the batch label, above the fan's top arrow (45% along it, from its port on
        the data icon's east side), clears the data icon's top: the top worker sits high enough."""
        slots = elide(self.spec.topology.workers.count, self.spec.figure.max_workers_drawn)
        top = worker_ys(self.spec, slots, max(self.spec.figure.rowsep, self.column_rowsep()))[0]
        start = min(10.0, 4.0 * (len(slots) - 1)) / PT_PER_CM  # topology_common.data_fan's top port
        return start + 0.45 * (top - start) >= self.data_h / 2 + 0.1

    def column_rowsep(self) -> float:
        """A worker, its label and a gap (a host box's padding and label between hosts)."""
        row = self.worker_h + LABEL_H + LINE_H * (self.worker_lines - 1) + GAP
        if self.hosts:
            row += host_extra(self.spec)
        if self.elided:  # the ellipsis sits ELLIPSIS_GAP * rowsep below the last worker above it
            label = LABEL_H + LINE_H * (self.worker_lines - 1)
            row = max(row, (self.worker_h / 2 + label + ELLIPSIS_HALF) / ELLIPSIS_GAP)
        return row


def _server_half(s: Sizes) -> float:
    """Half the width of the server: its icon and label, or the padded group box of its shard
    boxes (label over tensors)."""
    servers = s.spec.topology.servers
    if servers.count == 1:
        return max(s.server_w, text_cm(servers.label)) / 2
    tensors = max(len(names) for names in shard_tensors(s.spec).values())
    if fitted(s.spec):  # \footnotesize, its label on the lines it prints as, SHARD_LINE_TENSORS a line
        title = printed_cm(s.spec, servers.label_of(f"ps{servers.count}"), "server") * 1.1  # bold
        shard = max(title, 0.45 * min(tensors, SHARD_LINE_TENSORS))
        return max(PSBOX_FIT_W, shard + 0.35) / 2 + HOST_PAD
    shard = max(0.9 * text_cm(servers.label_of(f"ps{servers.count}")), 0.45 * min(tensors, 6)) + 0.35
    return max(PSBOX_W + 0.1, shard) / 2 + HOST_PAD


def parameter_server_needs(s: Sizes) -> tuple[float, float]:
    if fitted(s.spec):  # the server sits its own gap right of the workers (fitted_server_gap)
        return s.data_to_column(), s.column_rowsep()
    servers = s.spec.topology.servers
    if servers.count == 1:
        box_top = 1.3 / 2 + LABEL_H  # the server icon, and its label below (the same by symmetry)
    else:  # the shard boxes and the group's label above them
        box_top = 1.25 * (len(elide(servers.count, 4)) - 1) / 2 + 0.5 + HOST_PAD + LABEL_H
    rowsep = max(s.spec.figure.rowsep, s.column_rowsep())
    # The flow labels sit above (below) right of the first (last) edge's midpoint. When that
    # midpoint is level with the server, half the gap must hold a label; above it, any gap will do.
    top = worker_ys(s.spec, elide(s.spec.topology.workers.count, s.spec.figure.max_workers_drawn), rowsep)[0]
    level = (top + 0.4) / 2 < box_top + 0.1
    to_server = s.column_half + _server_half(s) + (2 * s.flow + 0.3 if level else s.flow + GAP)
    return max(s.data_to_column(), to_server), s.column_rowsep()


BARRIER_ROOM = 0.75  # the sync barrier bar stands this far in front of the server icon, and a margin
FLOW_MARGIN = 0.25  # clear space between a flow label and the worker column (or its host box)
SERVER_MARGIN = 0.2  # and between it and the server (or the barrier bar)


@dataclass(frozen=True)
class FlowRun:
    """The stretch a fitted figure's worker -> server links run, in cm right of the workers'
    centre: the links leave the worker icons at `start`, clear the column (its labels, its host
    box) at `free` and meet the server at `end`; the stretch ends `barrier` earlier (the sync
    barrier bar stands there). Flow labels sit on [free, end - barrier], never over the column."""

    start: float
    free: float
    end: float
    barrier: float

    def pos_of(self, x: float) -> float:
        """The fraction of a link's length at which it is x right of the workers' centre."""
        return round((x - self.start) / (self.end - self.start), 3)

    def label_start_pos(self) -> float:
        """Where a label hung right of its link (above right, below right) starts."""
        return self.pos_of(self.free + FLOW_MARGIN)

    def centre_pos(self) -> float:
        """Where a label centred on its link has the free stretch's middle."""
        return self.pos_of((self.free + self.end - self.barrier) / 2)


def fitted_flow_run(spec) -> FlowRun:
    """A fitted figure's worker -> server links (or -> all-reduce bar): just long enough that a
    flow label (the widest of the spec's flow labels) fits between the column and the server,
    whatever the server's height; the server sits right of `end` by the half of its west side."""
    s = Sizes(spec)
    barrier = BARRIER_ROOM if plugin_of(spec).barrier(spec) else 0.0
    free = s.column_half
    end = free + max(FAN_MIN_CM, FLOW_MARGIN + s.flow + SERVER_MARGIN + barrier)
    return FlowRun(round(s.worker_w / 2, 3), round(free, 3), round(end, 3), barrier)


def fitted_server_gap(spec) -> float:
    """Centre to centre, the worker column to the server in a fitted figure (fitted_flow_run)."""
    s = Sizes(spec)
    single = spec.topology.servers.count == 1
    west = s.server_w / 2 if single else _server_half(s)  # a single server's label hangs right of its west edge
    return round(fitted_flow_run(spec).end + west, 2)


def allreduce_needs(s: Sizes) -> tuple[float, float]:
    if fitted(s.spec):  # the bar sits its own gap right of the workers (fitted_flow_run)
        return s.data_to_column(), s.column_rowsep()
    # The collective's bar sits at 1.6 colsep: 0.6 colsep holds a worker half, the bar half and the label.
    to_bar = (s.column_half + PSBOX_W / 2 + s.flow + GAP) / 0.6  # its label sits above the edge's middle
    return max(s.data_to_column(), to_bar), s.column_rowsep()


def ring_needs(s: Sizes) -> tuple[float, float]:
    return s.data_to_column(), s.column_rowsep()


def tree_needs(s: Sizes) -> tuple[float, float]:
    # The leftmost worker sits 0.6 cm right of colsep, inside the padded workers box.
    return s.data_half + s.batch + 2 * GAP + HOST_PAD + s.worker_half - 0.6, 1.2


def hierarchical_needs(s: Sizes) -> tuple[float, float]:
    t = s.spec.topology
    box = s.worker_half + 0.55 + HOST_PAD  # the leaders' bus runs inside the box, left of the first worker
    if len(elide(t.hosts, hosts_drawn(s.spec))) < t.hosts:
        return s.data_icon_half + s.brace(label_text(s.spec, "hosts_brace", n=f"{t.hosts:,}")) + box + GAP / 2, 1.2
    return s.data_half + s.batch + 2 * GAP + box, 1.2


def gossip_needs(s: Sizes) -> tuple[float, float]:
    # The ring's leftmost worker sits 1.6 cm right of colsep with its label on its left.
    left = s.worker_w / 2 + 0.07 + s.worker_label + HOST_PAD
    return s.data_half + s.batch + 2 * GAP + left - 1.6, 1.2


def pipeline_needs(s: Sizes) -> tuple[float, float]:
    return 1.0, 1.2  # stages sit max(3.5, 0.78 colsep) apart whatever colsep is


def single_needs(s: Sizes) -> tuple[float, float]:
    return (s.data_half + s.batch + 2 * GAP + s.worker_half) / 0.8, 1.2  # the worker sits at 0.8 colsep
