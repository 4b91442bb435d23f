"""Topology layout of the parameter server and central storage: workers in a column,
gradients to the server (or the group box of its shards) and weights back. What differs
between the two (a sync barrier, the note under the server) their figures plugins add
(opentikz_dt/strategies/parameter_server/figures.py, central_storage/figures.py). Must not import torch.
"""

from __future__ import annotations

import re

from ..shards import shard_tensors
from ..texsafe import escape_text, render_label
from ..workload import abbreviate_tensors
from .model import Group, Layout, Node, Tex, elide
from .spacing import (PSBOX_FIT_W, SHARD_LINE_H, SHARD_LINE_TENSORS, Spacing, fitted_flow_run, fitted_server_gap,
                      printed_lines)
from .textwidth import split_in_two
from .texts import label_text, server_group_caption
from .topology_fit import fitted
from .topology_common import (data_fan, data_node, ellipsis_node, host_groups, make_layout, more_name,
                              server_node, sync_pairs, worker_column)


def parameter_server_layout(spec, sp: Spacing, server_extras) -> Layout:
    """The layout; `server_extras(spec, server_x, nodes, edges) -> (nodes, edges)` adds the
    strategy's own marks by the server (x = server_x) before the layout is made."""
    colsep = sp.colsep
    nodes, members, elided = worker_column(spec, sp, colsep)
    edges, braces = data_fan(spec, members, elided, spec.topology.workers.count)
    groups = host_groups(spec, members, elided)
    servers = spec.topology.servers
    # A fitted figure gives the server its own gap: the data fan and the flows need different room.
    server_x = colsep + (fitted_server_gap(spec) if fitted(spec) else colsep)
    if servers.count == 1:
        nodes.append(server_node(spec, server_x, 0.0))
        target = "ps"
    else:
        owned = shard_tensors(spec)
        slots = elide(servers.count, 4)
        texts = {slot: shard_text(spec, f"ps{slot}", owned[f"ps{slot}"]) for slot in slots if slot is not None}
        gap = _shard_gap(spec, texts.values())
        top = gap * (len(slots) - 1) / 2
        shard_names = []
        for k, slot in enumerate(slots):
            y = top - k * gap
            if slot is None:
                nodes.append(ellipsis_node(more_name("ps", slots, k), server_x, y))
                shard_names.append(more_name("ps", slots, k))
                continue
            nodes.append(Node(f"ps{slot}", server_x, y, kind="box", style="psbox", text=texts[slot],
                              min_width=PSBOX_FIT_W if fitted(spec) else 0.0))
            shard_names.append(f"ps{slot}")
        groups.append(Group("psgroup", tuple(shard_names), "hostbox",
                            label=server_group_caption(spec, _line_break(spec))))
        target = "psgroup"
    # a fitted figure's flow labels sit just right of the column, where its links start
    label_pos = fitted_flow_run(spec).label_start_pos() if fitted(spec) else 0.5
    edges += sync_pairs(spec, members, target, label_pos=label_pos)
    nodes, edges = server_extras(spec, server_x, nodes, edges)
    return make_layout(spec, sp, [data_node(spec)] + nodes, edges, groups, braces)


def _shard_gap(spec, texts) -> float:
    """Centre to centre, two shard boxes: a fitted figure lists the tensors on several lines,
    so its boxes stand as far apart as the tallest is high."""
    if not fitted(spec):
        return 1.25
    lines = max(text.count("\\\\") + 1 for text in texts)
    return max(1.25, SHARD_LINE_H * lines + 0.55)


def shard_text(spec, shard_id: str, tensors: list[str]) -> Tex:
    """A shard box: its label and number, then the tensors it owns."""
    if fitted(spec):  # the label on the lines it prints as, each line bold (a line of a box sets its own font)
        lines = printed_lines(spec, spec.topology.servers.label_of(shard_id), "server")
        title = "\\\\".join(f"\\textbf{{{render_label(line)}}}" for line in lines)
        return Tex(f"{title}\\\\[1pt]" + _tensor_math(spec, tensors, plain=True))
    # each shard keeps the spec's label (\pslabel{} 1 prints as servers.label_of("ps1"))
    return Tex(f"\\textbf{{\\pslabel{{}} {shard_id[2:]}}}\\\\[1pt]" + _tensor_math(spec, tensors))


def _line_break(spec) -> str:
    return "\\\\" if fitted(spec) else " "  # a fitted figure wraps the group label to the box's width


def _tensor_math(spec, tensors: list[str], plain: bool = False) -> str:
    """$W_1, b_1$ for ['layers.0.weight', 'layers.0.bias'] (TeX built from integers only);
    plain: W1, b1 in text, since a subscript would shrink below 6 pt in a fitted figure, and
    SHARD_LINE_TENSORS a line, so the box stays narrow;
    other models' names as abbreviated text ('blocks.0.*'), escaped; none (a python model
    before a run) as figure.labels.unknown_tensors, on two lines where it has a space."""
    if not tensors:
        return "\\\\".join(render_label(line) for line in split_in_two(label_text(spec, "unknown_tensors")))
    if not all(re.fullmatch(r"layers\.[0-9]+\.(weight|bias)", name) for name in tensors):
        shown = abbreviate_tensors(tensors, keep=3)
        count = f" ({len(tensors)})" if len(shown) < len(tensors) else ""  # how many the list stands for
        return ", ".join(escape_text(name) for name in shown) + count
    parts = []
    for name in tensors:
        _, index, kind = name.split(".")
        number = str(int(index) + 1)
        parts.append(("W" if kind == "weight" else "b") + (number if plain else "_{" + number + "}"))
    if len(parts) > 6:
        parts = parts[:3] + [r"\ldots"] + parts[-2:]
    if plain:
        lines = [parts[i:i + SHARD_LINE_TENSORS] for i in range(0, len(parts), SHARD_LINE_TENSORS)]
        return ",\\\\".join(", ".join(line) for line in lines)
    return "$" + ", ".join(parts) + "$"
