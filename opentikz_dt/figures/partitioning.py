"""The model-partitioning figure (`dtgen figure SPEC --kind partitioning`, seed 002's
Figure 3): the spec's model split over its workers two ways, side by side.

(a) vertically, as a pipeline splits it: whole layers (blocks) per worker, contiguous and
    even (workload.stage_bounds, what the pipeline strategy runs);
(b) horizontally, as tensor parallelism splits it: every layer cut into one slice per worker.

Each worker has its palette colour (topology_tensor.slice_color) in both panels. It is
illustrative of the split, not measured: the note under it says so. Bounded: at most
MAX_LAYERS layers and MAX_ROWS workers are drawn (the first few, an ellipsis, the last).
Drawn by the topology template (a Layout). Must not import torch.
"""

from __future__ import annotations

from ..errors import DtgenError
from ..texsafe import render_label
from ..workload import stage_bounds, workload_of
from .model import Layout, Node, Tex, elide
from .texts import label_text
from .topology_common import count_text, label_macros
from .topology_fit import fitted
from .topology_tensor import slice_color

MAX_LAYERS, MAX_FIT_LAYERS = 6, 3  # layer columns drawn per panel (natural, fitted)
MAX_ROWS = 4  # worker rows of the horizontal panel
COL_W, PITCH = 0.95, 1.2  # cm: a layer's column and the distance between columns
HEIGHT = 2.6  # cm: a layer's column
PANEL_GAP = 1.0  # cm between the two panels
NAME_W = 1.1  # cm left of the horizontal panel's slices: its rows' worker names (W1024)
SLICE_GAP = 0.1  # cm between a layer's slices


def partitioning_layout(spec) -> Layout:
    workload = workload_of(spec)
    if workload is None:
        raise DtgenError(f"{spec.source}: training.model: the partitioning figure needs the model's layers; "
                         "a python model's are known only at run time")
    layers = len(workload.blocks)
    workers = spec.topology.workers.count
    shown = elide(layers, MAX_FIT_LAYERS if fitted(spec) else MAX_LAYERS)
    word = workload.block_word  # layer | block
    owner = _owners(layers, workers)
    nodes = []
    # (a) vertical: a whole column per layer, in its owner's colour
    x = 0.0
    for slot in shown:
        if slot is None:
            nodes.append(Node(f"panel-a-more{_after(shown, slot)}", x + COL_W / 2, 0.0, kind="ellipsis",
                              text=Tex(r"$\cdots$")))
        else:
            w = owner[slot - 1]
            nodes.append(Node(f"panel-a-l{slot}", x + COL_W / 2, 0.0, kind="box", style="stagebox",
                              color=slice_color(w), min_width=COL_W, min_height=HEIGHT,
                              text=Tex(render_label(label_text(spec, "worker_short", i=w)))))
            nodes.append(_layer_label(spec, f"panel-a-l{slot}", x + COL_W / 2, word, slot))
        x += PITCH
    left_end = x - (PITCH - COL_W)
    # (b) horizontal: every layer cut into one slice per (drawn) worker
    rows = elide(workers, MAX_ROWS)
    slice_h = (HEIGHT - SLICE_GAP * (len(rows) - 1)) / len(rows)
    ys = [round(HEIGHT / 2 - slice_h / 2 - k * (slice_h + SLICE_GAP), 3) for k in range(len(rows))]
    x0 = left_end + PANEL_GAP
    x = x0 + NAME_W  # room for the rows' worker names
    for row, y in zip(rows, ys):
        if row is not None:
            nodes.append(Node(f"panel-b-w{row}", x0 + NAME_W / 2 - 0.1, y, kind="text",
                              text=Tex(render_label(label_text(spec, "worker_short", i=row)))))
    for slot in shown:
        if slot is None:
            nodes.append(Node(f"panel-b-more{_after(shown, slot)}", x + COL_W / 2, 0.0, kind="ellipsis",
                              text=Tex(r"$\cdots$")))
            x += PITCH
            continue
        for row, y in zip(rows, ys):
            name = f"panel-b-l{slot}-w{row}" if row is not None else f"panel-b-l{slot}-more"
            if row is None:
                nodes.append(Node(name, x + COL_W / 2, y, kind="ellipsis", text=Tex(r"$\vdots$")))
            else:
                nodes.append(Node(name, x + COL_W / 2, y, kind="box", style="stagebox", color=slice_color(row),
                                  min_width=COL_W, min_height=round(slice_h, 3)))
        nodes.append(_layer_label(spec, f"panel-b-l{slot}", x + COL_W / 2, word, slot))
        x += PITCH
    right_end = x - (PITCH - COL_W)
    top = HEIGHT / 2 + 0.75  # two lines each: the panels may be as narrow as two columns
    nodes.append(Node("panel-a", left_end / 2, top, kind="text",
                      text=Tex(render_label("(a) vertical (pipeline):") + r"\\"
                               + render_label(f"whole {word}s per worker"))))
    nodes.append(Node("panel-b", (x0 + right_end) / 2, top, kind="text",
                      text=Tex(render_label("(b) horizontal (tensor):") + r"\\"
                               + render_label(f"each {word} cut into {count_text(workers)} slices"))))
    nodes.append(Node("note", right_end / 2, round(-HEIGHT / 2 - 0.85, 3), kind="text",
                      text=Tex(render_label(ILLUSTRATIVE))))
    return Layout(title=Tex(r"\titlelabel"), colsep=1.0, rowsep=1.0, nodes=tuple(nodes),
                  macros=label_macros(spec, []))


def _after(shown: list, slot) -> int:
    """The first hidden index after the ellipsis at `slot` (its node's name)."""
    return shown[shown.index(slot) - 1] + 1


def _owners(layers: int, workers: int) -> list[int]:
    """The worker (1-based) holding each layer in the vertical split: contiguous, even; with
    more workers than layers, the first `layers` workers hold one each."""
    parts = min(layers, workers)
    bounds = stage_bounds(layers, parts)
    return [k + 1 for k in range(parts) for _ in range(bounds[k], bounds[k + 1])]


def _layer_label(spec, name: str, x: float, word: str, index: int) -> Node:
    return Node(f"{name}-name", x, round(-HEIGHT / 2 - 0.3, 3), kind="text",
                text=Tex(render_label(label_text(spec, f"stage_{word}", i=index))))


ILLUSTRATIVE = "illustrative of the split, not measured"
