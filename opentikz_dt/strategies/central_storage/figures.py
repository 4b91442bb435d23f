"""Figures of central storage (TensorFlow's CentralStorageStrategy): the parameter server's
picture, with a note on where the variables live. Must not import torch."""

from __future__ import annotations

from ...figures.model import Node
from ...figures.spacing import parameter_server_needs
from ...figures.texts import FLOW_MACROS, label_lines_tex
from ...figures.topology_ps import parameter_server_layout
from ..parameter_server import figures as parameter_server

KIND = "central-storage"
TIMELINE_BOXES = parameter_server.TIMELINE_BOXES


def layout(spec, spacing):
    return parameter_server_layout(spec, spacing, _storage_note)


def spacing_needs(sizes):
    return parameter_server_needs(sizes)


def flow_run(spec) -> bool:
    return True


def flow_labels_once(spec) -> bool:
    return True


def _storage_note(spec, server_x, nodes, edges):
    # The variables live on one device (no server process), every replica's gradients are
    # reduced there in one synchronous step: the note under the storage says so.
    note = Node("note", kind="text", rel="below=1pt of ps-label.south west, anchor=north west",
                text=label_lines_tex(spec, "central_storage_note", tex=FLOW_MACROS))
    return nodes + [note], edges


def table_name(spec) -> str:
    return "central storage"
