"""Topology of tensor parallelism (the horizontal model split, issue 21): the worker column
as every strategy draws it, and right of each worker its row of slices: every split layer
of the model is drawn as a column cut horizontally into one slice per worker (each
worker's slices in its own palette colour), with the all-reduce points between the
columns: Σf after each row-parallel layer (the forward all-reduce of its output), Σb
before each column-parallel layer (the backward all-reduce of its input gradient), as
runner/strategies/tensor.py issues them.

Also the model-partitioning figure's two panels (figures/partitioning.py) use `split_items`.

Bounded like the other layouts: the worker rows are the (elided) worker column's, and
the blocks drawn are the first few, an ellipsis and the last. Must not import torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..palette import PALETTE_NAMES
from ..texsafe import render_label
from ..workload import model_section, workload_of
from .model import Edge, Node, Port, Tex, elide
from .spacing import LABEL_H, LINE_H, Sizes, Spacing, icon_size
from .texts import label_text
from .topology_common import count_text, data_fan, data_node, ellipsis_node, make_layout, worker_column

# The slices' colours, one per worker in turn (gray is kept for text and frames).
SLICE_COLORS = tuple(c for c in PALETTE_NAMES if c != "otgray")
SLICE_W, SLICE_FIT_W = 0.85, 0.5  # cm: a slice column (a fitted figure's narrower)
BAR_W, BAR_FIT_W = 0.75, 0.68  # an all-reduce bar: its "Σ F" (over "Σ B") and the psbox's 5pt inner sep
ITEM_GAP, ITEM_FIT_GAP = 0.2, 0.12  # between neighbouring columns
MORE_W = 0.45  # the ellipsis standing for blocks not drawn
ROW_GAP, ROW_FIT_GAP = 1.45, 1.3  # from a worker's icon to its first slice: a measured figure's bytes per step label the link


def slice_color(worker_index: int) -> str:
    """The palette colour of worker `worker_index`'s slices (1-based)."""
    return SLICE_COLORS[(worker_index - 1) % len(SLICE_COLORS)]


@dataclass(frozen=True)
class Item:
    """One column right of the workers: a split layer (its slices), a whole layer, an
    all-reduce bar (`forward`/`backward`: which passes all-reduce there) or an ellipsis."""

    name: str  # a node-name suffix: attn1, mlp1, l2, more2, ar3
    kind: str  # split | whole | sum (an all-reduce bar) | more
    label: str = ""  # plain text above the column (a layer's name)
    span: int = 1  # columns the label is centred over (an mlp's pair: its two layers)
    forward: bool = False
    backward: bool = False


def split_items(spec, max_blocks: int) -> list[Item]:
    """The columns of the split model, left to right, at most `max_blocks` blocks (or layer
    pairs) drawn: the first ones, an ellipsis and the last (model.elide); with
    `max_blocks` 1, the first block and an ellipsis for the others."""
    m = model_section(spec)
    kind = m.get("kind", "mlp")
    layers: list[tuple[str, str, str, int]] = []  # (name, label, col|row|whole, block)
    if kind == "transformer":
        for b in range(1, int(m["layers"]) + 1):
            layers += [(f"attn{b}", f"attn {b}", "pair", b), (f"mlp{b}", f"MLP {b}", "pair", b)]
    elif kind == "mlp":
        count = len(m["layers"]) - 1
        for i in range(1, count + 1):
            paired = i <= 2 * (count // 2)
            role = ("col" if i % 2 else "row") if paired else "whole"
            # a pair's two layers are named once, over both (two labels would not fit)
            label = label_text(spec, "stage_layers", first=i, last=i + 1) if role == "col" else \
                "" if role == "row" else label_text(spec, "stage_layer", i=i)
            layers.append((f"l{i}", label, role, (i + 1) // 2))
    else:  # a python model: its plan is known at run time; one column-/row-parallel pair stands for it
        layers = [("col", "colwise", "col", 1), ("row", "rowwise", "row", 1)]
    blocks = sorted({b for *_, b in layers})
    shown = elide(len(blocks), max_blocks) if max_blocks > 1 else [1] + ([None] if len(blocks) > 1 else [])
    items: list[Item] = []
    for slot_index, slot in enumerate(shown):
        if slot is None:
            items.append(Item(f"more{shown[slot_index - 1] + 1}", "more"))
            continue
        for name, label, role, block in layers:
            if block != blocks[slot - 1]:
                continue
            # a pair (attention, MLP) is column- then row-parallel inside one drawn column
            col, row = role in ("col", "pair"), role in ("row", "pair")
            if col and not (kind == "mlp" and name == "l1"):  # the data needs no input gradient
                _ar(items, backward=True)
            items.append(Item(name, "whole" if role == "whole" else "split", label,
                              span=2 if kind == "mlp" and role == "col" else 1))
            if row:
                _ar(items, forward=True)
    return items


def _ar(items: list[Item], forward: bool = False, backward: bool = False) -> None:
    """An all-reduce point after the last column: merged with a bar already there."""
    if items and items[-1].kind == "sum":
        last = items[-1]
        items[-1] = Item(last.name, "sum", forward=last.forward or forward, backward=last.backward or backward)
        return
    count = sum(1 for i in items if i.kind == "sum")
    items.append(Item(f"ar{count + 1}", "sum", forward=forward, backward=backward))


def bar_tex(item: Item) -> Tex:
    """The Σ of an all-reduce bar and its pass (F, B: one above the other for both). No
    subscript: a fitted figure could not be scaled down at all (topology_fit.smallest_text_pt)."""
    return Tex(r"\\".join(f"$\\Sigma$\\,{p}" for p, on in (("F", item.forward), ("B", item.backward)) if on))


def tensor_layout(spec, sp: Spacing, fitted: bool = False):
    colsep = sp.colsep
    count = spec.topology.workers.count
    nodes, members, elided = worker_column(spec, sp, colsep)
    edges, braces = data_fan(spec, members, elided, count)
    rows = [(n.name, n.y) for n in nodes if n.kind == "icon"]
    gaps = [n for n in nodes if n.kind == "ellipsis"]
    ys = [n.y for n in nodes]
    top, bottom = max(ys), min(ys)
    worker_w, worker_h = icon_size(spec, "worker")
    slice_h = round(worker_h * 0.9, 3)
    slice_w = SLICE_FIT_W if fitted else SLICE_W
    gap = ITEM_FIT_GAP if fitted else ITEM_GAP
    items = split_items(spec, 1 if fitted else 3)  # a column's width holds one block
    x = colsep + Sizes(spec).worker_half + (ROW_FIT_GAP if fitted else ROW_GAP)
    height = round(top - bottom + slice_h, 3)
    first_slice = {}
    for item in items:
        bar_w = BAR_FIT_W if fitted else BAR_W
        width = {"split": slice_w, "whole": slice_w, "sum": bar_w, "more": MORE_W}[item.kind]
        cx = round(x + width / 2, 3)
        if item.kind == "sum":
            nodes.append(Node(f"ar-{item.name[2:]}", cx, round((top + bottom) / 2, 3), kind="box", style="psbox",
                              min_height=height, min_width=bar_w, text=bar_tex(item)))
        elif item.kind == "more":
            nodes.append(ellipsis_node(f"note-{item.name}", cx, round((top + bottom) / 2, 3), vertical=False))
        else:
            for worker, y in rows:
                color = slice_color(int(worker[1:])) if item.kind == "split" else "otgray"
                nodes.append(Node(f"{worker}-{item.name}", cx, y, kind="box", style="stagebox", color=color,
                                  min_width=slice_w, min_height=slice_h))
                first_slice.setdefault(worker, f"{worker}-{item.name}")
            for more in gaps:
                nodes.append(ellipsis_node(f"{more.name}-{item.name}", cx, more.y))
            if item.label:
                centre = cx + (item.span - 1) * (width + gap) / 2
                nodes.append(Node(f"note-{item.name}", round(centre, 3), round(top + slice_h / 2 + 0.25, 3),
                                  kind="text", text=Tex(render_label(item.label))))
        x += width + gap
    first = f"ar-{items[0].name[2:]}" if items[0].kind == "sum" else None
    for worker, _ in rows:  # each worker's row starts at its first slice (or the bar before it)
        end = Port(first, "west", level=f"{worker}.east") if first else Port(first_slice[worker], "west")
        edges.append(Edge(Port(worker, "east"), end, "act"))
    # under the last worker's label, centred under the picture
    lines = _note_lines(spec, count, items)
    label_lines = Sizes(spec).worker_lines  # the last worker's label may print on two lines
    below = bottom - worker_h / 2 - LABEL_H - LINE_H * (label_lines - 1) - 0.35 - len(lines) / 2 * LINE_H
    nodes.append(Node("note", round(x / 2, 3), round(below, 3), kind="text", text=Tex(r"\\".join(lines))))
    return make_layout(spec, sp, [data_node(spec)] + nodes, edges, (), braces)


def _note_lines(spec, count: int, items: list[Item]) -> list[str]:
    """What the picture shows, as TeX lines under it: which layers are cut into slices and
    which stay whole on every worker (an mlp's odd last layer, drawn grey: the runner keeps
    it whole, runner/strategies/tensor.py; a transformer's embeddings, norms and head), and
    the all-reduce bars drawn (ΣF, ΣB: only those the picture has)."""
    slices = f"cut into {count_text(count)} slices, one per worker"
    model = model_section(spec)
    kind = model.get("kind", "mlp")
    lines = []
    if kind == "mlp":
        layers = len(model["layers"]) - 1
        split = 2 * (layers // 2)  # column/row pairs; an odd last layer stays whole
        whole = label_text(spec, "stage_layer", i=layers)
        grey = " (grey)" if any(item.kind == "whole" for item in items) else ""
        if split == layers:
            lines.append(render_label(f"every layer {slices}"))
        elif split:
            lines.append(render_label(f"{label_text(spec, 'stage_layers', first=1, last=split)} {slices};"))
            lines.append(render_label(f"{whole}{grey} whole on every worker, not split"))
        else:
            lines.append(render_label(f"{whole}{grey} whole on every worker: one layer has no pair to split"))
    elif kind == "transformer":
        lines.append(render_label(f"every layer {slices}"))
    else:  # a python model: strategy.plan (or its own tp_plan) says which modules are cut
        lines.append(render_label(f"the plan's colwise and rowwise layers {slices}"))
    forward, backward = any(item.forward for item in items), any(item.backward for item in items)
    if forward:
        lines.append(r"$\Sigma$\,F: " + render_label("all-reduce of a layer's output (forward)" + ("," if backward else "")))
    if backward:
        lines.append(r"$\Sigma$\,B: " + render_label(("of its" if forward else "all-reduce of a layer's")
                                                     + " input gradient (backward)"))
    if kind == "transformer":
        lines.append(render_label("embeddings, norms and head whole on every worker"))
    elif kind != "mlp":
        lines.append(render_label("the other modules whole on every worker"))
    return lines
