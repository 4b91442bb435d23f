"""Topology layouts without a central party: gossip (a ring of peers), the pipeline (stages
left to right) and a single device. Must not import torch.
"""

from __future__ import annotations

import math

from ..texsafe import render_label
from ..workload import workload_of
from .model import Edge, Group, Layout, Node, Port, Tex, elide
from .spacing import LINE_H, Spacing, icon_size, printed_lines, text_cm
from .texts import FLOW_MACROS, label_tex, label_text
from .topology_fit import fitted, narrow
from .topology_common import count_text, data_node, ellipsis_node, make_layout, more_name, worker_node


def gossip_layout(spec, sp: Spacing) -> Layout:
    colsep = sp.colsep
    count = spec.topology.workers.count
    slots = elide(count, spec.figure.max_workers_drawn)
    compact = fitted(spec)  # a fitted figure: a tighter ring, every label above or below its worker
    rx = max(2.3, len(slots) * 2.9 / (2 * math.pi)) if compact else max(3.4, len(slots) * 3.9 / (2 * math.pi))
    ry = rx * 0.72
    cx = colsep + rx + (0.9 if compact else 1.6)  # room for the side labels left of the ring
    nodes, names = [], []
    for k, slot in enumerate(slots):
        angle = math.pi / 2 - 2 * math.pi * k / len(slots)
        x, y = cx + rx * math.cos(angle), ry * math.sin(angle)
        sin, cos = math.sin(angle), math.cos(angle)
        side = "above" if sin > 0.7 else "below" if sin < -0.7 else ("right" if cos > 0 else "left")
        if compact and side in ("left", "right"):
            side = "below"
        if slot is None:
            nodes.append(ellipsis_node(more_name("w", slots, k), x, y, vertical=False))
            names.append(more_name("w", slots, k))
        else:
            nodes.append(worker_node(spec, slot, x, y, label_side=side))
            names.append(f"w{slot}")
    edges = []
    hops = max(1, (spec.strategy.peers + 1) // 2)
    for k, a in enumerate(names):
        for hop in range(1, hops + 1):
            if hop == 1 and len(names) == 2 and k == 1:
                continue
            b = names[(k + hop) % len(names)]
            if hop > 1 and ("more" in a or "more" in b or len(names) <= 2 * hop):
                continue
            if hop > 1 and (k + hop) % len(names) < k:
                continue
            edges.append(Edge(Port(a), Port(b), "peer", elided="more" in a + b, route="line",
                              label=Tex(r"\weightlabel") if (k == 0 and hop == 1) else Tex(""),
                              label_side="above right", label_color=f"{spec.figure.colors['weight']}!70!otink"))
    # Peer lines run centre to centre but stop at the node borders (shorten by TikZ).
    fit = tuple(names) + tuple(f"{n}-label" for n in names if not n.endswith("-more"))
    groups = [Group("workers", fit, "hostbox",
                    label=label_tex(spec, "gossip_box", tex=FLOW_MACROS, n=count_text(count),
                                    peers=spec.strategy.peers))]
    edges.insert(0, Edge(Port("data", "east"), Port("workers", "west"), "data", label=Tex(r"\batchlabel")))
    return make_layout(spec, sp, [data_node(spec)] + nodes, edges, groups)


NARROW_STAGES = 3  # stages drawn side by side at a narrow target width (topology_fit.narrow)


def pipeline_layout(spec, sp: Spacing, schedule: str) -> Layout:
    """Stages left to right; `schedule` is the pipeline schedule's name as the note prints it (1F1B)."""
    colsep = sp.colsep
    stages = spec.strategy.stages
    slots = elide(stages, min(spec.figure.max_workers_drawn, 6))
    if narrow(spec) and len(slots) > NARROW_STAGES and None not in slots:
        # a column holds three stages side by side: the first two, the ellipsis and the last
        slots = [1, 2, None, stages]
    if fitted(spec):  # as close as the icons, the flow labels between them and the worker labels allow
        # (line by line: a measured label holds its step time, and memory, on lines of their own)
        widest = max(text_cm(line) for s in slots if s is not None
                     for line in spec.topology.workers.label_of(f"w{s}").split("\n"))
        step = max(icon_size(spec, "worker")[0] + 1.4, widest + 0.3)
    else:
        step = max(3.5, 0.78 * colsep)
    workload = workload_of(spec)  # None for a python model: its layers are known at run time
    layers = workload.stage_blocks(stages) if workload else [(0, 0)] * stages
    nodes, names = [], []
    x = step
    for k, slot in enumerate(slots):
        if slot is None:
            # (a fitted figure: midway between its neighbours, a stage's step apart, as the links
            # either side of it carry no label of the diagram's; the natural one spreads them a little)
            spare = 0.0 if fitted(spec) else 0.1 * step
            nodes.append(ellipsis_node(more_name("w", slots, k), x - (step - spare) / 2, 0.0, vertical=False))
            x += spare
            continue
        nodes.append(worker_node(spec, slot, x, 0.0))
        stage = label_text(spec, "stage_lane", i=slot)
        header = "" if spec.topology.workers.label_of(f"w{slot}") == stage else f"\\textbf{{{render_label(stage)}}}\\\\"
        nodes.append(Node(f"s{slot}", kind="box", style="stagebox", rel=f"above=6pt of w{slot}",
                          text=Tex(header + _stage_span(spec, workload, layers[slot - 1], slot))))
        names.append(f"w{slot}")
        x += step
    colors = spec.figure.colors
    edges = [Edge(Port("data", "east"), Port(names[0], "west"), "data", label=Tex(r"\batchlabel"), label_side="above")]
    for k, (a, b) in enumerate(zip(names, names[1:])):
        skipped = int(b[1:]) - int(a[1:]) > 1
        edges.append(Edge(Port(a, "east", dy=4), Port(b, "west", dy=4), "act", elided=skipped,
                          label=label_tex(spec, "activations") if k == 0 else Tex(""), label_side="above"))
        edges.append(Edge(Port(b, "west", dy=-4), Port(a, "east", dy=-4), "grad", elided=skipped,
                          label=label_tex(spec, "activation_grads") if k == 0 else Tex(""), label_side="below",
                          label_color=f"{colors['grad']}!85!otink"))
    mb = spec.strategy.microbatches
    # under the stages, and under the data label, which a fitted figure may print on two lines
    below = 1.45 + LINE_H * (len(printed_lines(spec, spec.topology.data_label, "data")) - 1)
    nodes.append(Node("note", step, -below, kind="text",
                      text=label_tex(spec, "pipeline_note", schedule=schedule,
                                     microbatches=count_text(mb), samples=count_text(spec.training.batch_size // mb),
                                     stages=count_text(stages))))
    return make_layout(spec, sp, [data_node(spec)] + nodes, edges)


def _stage_span(spec, workload, layers: tuple, stage: int) -> Tex:
    """What a stage's box says it holds: its layers (an mlp) or blocks, or for a python model,
    whose layers are known at run time, its part."""
    if workload is None:
        return label_tex(spec, "stage_part", i=stage)
    first, last = layers
    word = "layer" if workload.block_word == "layer" else "block"
    if first == last:
        return label_tex(spec, f"stage_{word}", i=first)
    return label_tex(spec, f"stage_{word}s", first=first, last=last)


def single_layout(spec, sp: Spacing) -> Layout:
    colsep = sp.colsep
    worker = worker_node(spec, 1, colsep * 0.8, 0.0)
    edges = [
        Edge(Port("data", "east"), Port("w1", "west"), "data", label=Tex(r"\batchlabel")),
        Edge(Port("w1", "north", dx=10), Port("w1", "north", dx=-10), "grad", route="loop", bend=60,
             label=Tex(r"\weightlabel{} $\gets$ \weightlabel{} $-\,\eta\,$\gradlabel"), label_side="above",
             label_color=f"{spec.figure.colors['grad']}!85!otink"),
    ]
    return make_layout(spec, sp, [data_node(spec), worker], edges)
