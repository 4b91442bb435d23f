"""Figures of the parameter server: the server (or its shards) right of the worker column,
a note under a single server (a sync one is a barrier), and the expected timeline of both
modes side by side (sync and async, each as the simulator runs it), the spec's own marked.
Must not import torch."""

from __future__ import annotations

from dataclasses import replace

from ...figures.model import Node, Tex
from ...figures.spacing import parameter_server_needs
from ...figures.texts import FLOW_MACROS, label_lines_tex
from ...figures.topology_common import count_text
from ...figures.topology_fit import fitted
from ...figures.topology_ps import parameter_server_layout

KIND = "parameter-server"
TIMELINE_BOXES = ("fetch", "forward", "backward", "slowdown", "push", "update", "skipped", "wait")


# ---------------------------------------------------------------- topology


def layout(spec, spacing):
    return parameter_server_layout(spec, spacing, _sync_or_async)


def spacing_needs(sizes):
    return parameter_server_needs(sizes)


def flow_run(spec) -> bool:
    return True


def flow_labels_once(spec) -> bool:
    return True


def _sync_note(spec, count: str) -> Tex:
    """The note under a single server: figure.labels.sync_note or async_note on the lines the
    spec breaks it into; unset, dtgen's English on lines about as wide as the server's label
    (narrower in a fitted figure)."""
    key = f"{spec.strategy.sync}_note"
    if spec.figure.labels.get(key):
        return label_lines_tex(spec, key, tex=FLOW_MACROS, n=count)
    if spec.strategy.sync == "sync":
        lines = [f"sync: a barrier waits for all {count}", "\\gradlabel{}, then one update"]
        if fitted(spec):
            lines = ["sync: a barrier waits", f"for all {count} \\gradlabel{{}}, then", "one update"]
    else:
        lines = ["async: each worker pushes and", "pulls at its own pace, no barrier"]
        if fitted(spec):
            lines = ["async: each worker", "pushes and pulls at its", "own pace, no barrier"]
    return Tex("\\\\".join(lines))


def _sync_or_async(spec, server_x, nodes, edges):
    """A single server. Sync: the note says it is a barrier, waiting for every worker's
    gradient; async: each worker pushes and pulls at its own pace (the seed's distinction).
    The barrier is said, not drawn: a bar in front of the server crossed every arrow into
    it and no legend said what it was. Sharded servers: nothing more."""
    if spec.topology.servers.count != 1:
        return nodes, edges
    count = count_text(spec.topology.workers.count)
    return nodes + [Node("note", kind="text", rel="below=1pt of ps-label.south west, anchor=north west",
                         text=_sync_note(spec, count))], edges


# ---------------------------------------------------------------- expected schedule


def expected_panels(spec) -> tuple:
    """Both modes on one axis, sync above async; the spec's own mode says so."""
    words, mine = spec.figure.labels, spec.strategy.sync
    return tuple((mode, replace(spec, strategy=replace(spec.strategy, sync=mode)), words[f"{mode}_panel"],
                  words["this_spec"] if mine == mode else "") for mode in ("sync", "async"))


# ---------------------------------------------------------------- measured figures


def asynchronous(spec) -> bool:
    return spec.strategy.sync == "async"


def run_name(spec) -> str:
    return f"{spec.strategy.sync}hronous parameter server"


def table_name(spec) -> str:
    return f"PS {spec.strategy.sync}"
