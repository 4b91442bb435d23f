"""The words dtgen itself writes into figures, in the spec's language.

The legend's box and phase names, the timeline's panel titles, axis title and notes,
its lane names (stages, elided workers, narrow abbreviations), the topologies' notes,
captions, braces and stage boxes, the model note and the caption over a parameter
server's shards come from `figure.labels` (the schema holds their English defaults; a
few, such as `panel`, have none and dtgen describes the strategy when they are unset), so
a spec whose labels are Chinese gets a figure that reads in Chinese throughout. Every one
goes through texsafe.render_label like the other labels (the labels-safe invariant checks
them on load), and spec_needs_cjk sees them in the spec's data. Templates name their
numbers in braces ({n}, {i}, {steps}, ...); a few name TeX that code supplies, such as
{grad} for the gradient label's macro, put in after the text is made safe. Must not
import torch.
"""

from __future__ import annotations

import re

from ..texsafe import render_label
from ..workload import human_bytes, human_count, model_section, workload_of
from .model import Tex
from .plugin import plugin_of
from .timeline import Words

# The TeX a template's {grad} and {weight} stand for: the flow labels' macros (topology.tex.j2).
FLOW_MACROS = {"grad": Tex(r"\gradlabel"), "weight": Tex(r"\weightlabel")}
# A phase's name in the schedules and traces -> its key under figure.labels.phases.
PHASE_KEYS = {
    "reduce-scatter": "reduce_scatter", "all-gather": "all_gather", "reduce": "reduce", "broadcast": "broadcast",
    "intra-host reduce": "intra_host_reduce", "inter-host all-reduce": "inter_host_allreduce",
    "intra-host broadcast": "intra_host_broadcast",
}


def fill(template: str, **values) -> str:
    """A template with its {name} placeholders replaced by the values (plain text, escaped when drawn)."""
    for name, value in values.items():
        template = template.replace("{" + name + "}", str(value))
    return template


def label_text(spec, key: str, **values) -> str:
    """One of figure.labels as plain text, its placeholders filled."""
    return fill(spec.figure.labels[key], **values)


def label_tex(spec, key: str, tex: dict | None = None, **values) -> Tex:
    """One of figure.labels as safe TeX (escaped text, allow-listed math), its placeholders
    filled: `values` as text, `tex` (name -> Tex) as TeX."""
    return with_tex(render_label(label_text(spec, key, **values)), tex)


def label_lines_tex(spec, key: str, tex: dict | None = None, **values) -> Tex:
    """As label_tex, for a note whose line breaks are the spec's: each line made safe on its
    own (render_label would turn a newline into a space), the lines joined with \\\\."""
    lines = label_text(spec, key, **values).split("\n")
    return with_tex("\\\\".join(render_label(line) for line in lines), tex)


def with_tex(safe: str, tex: dict | None) -> Tex:
    """Safe TeX of a template with its TeX placeholders put in: escaping turned {grad} into
    \\{grad\\}, which only {grad} as written becomes (a backslash of the user's is escaped
    too). A placeholder inside math is left as written. A macro followed by a letter or a
    space gets an empty group, which ends its name and keeps the space."""
    for name, value in (tex or {}).items():
        def put(match, value=value):
            follows = match.string[match.end():match.end() + 1]
            ends_macro = re.search(r"\\[A-Za-z]+$", value) is not None
            return value + ("{}" if ends_macro and (follows.isascii() and follows.isalpha() or follows == " ") else "")

        safe = re.sub(re.escape("\\{" + name + "\\}"), put, safe)
    return Tex(safe)


def model_note(spec) -> str:
    """The line a topology prints under the drawing (plain text), e.g. 'transformer: 109.6 k
    parameters, 438 kB per gradient': figure.labels.model_note, or python_model_note for a
    python model, whose size only a run knows."""
    model = model_section(spec)
    if model.get("kind") == "python":
        return label_text(spec, "python_model_note", entry=model["entry"])
    workload = workload_of(spec)
    return sized_model_note(spec, workload.kind, workload.params, workload.grad_bytes)


def sized_model_note(spec, model: str, params: int, grad_bytes: int) -> str:
    """figure.labels.model_note for a model of this name and size (a run passes what it built);
    a precision other than fp32 is added, with what a gradient sent is (fp32 in every
    precision: runner/precision.py), so the bytes are not read as bf16's."""
    note = label_text(spec, "model_note", model=model, params=human_count(params), bytes=human_bytes(grad_bytes))
    precision = spec.training.precision
    return note if precision == "fp32" else f"{note} ({precision} compute, fp32 gradients)"


def legend_names(spec) -> dict:
    """Box kind -> the name the timeline's legend gives it."""
    return dict(spec.figure.labels["legend"])


def timeline_words(spec) -> Words:
    """The words draw_timeline writes itself, from the spec."""
    labels = spec.figure.labels
    phases = {phase: labels["phases"][key] for phase, key in PHASE_KEYS.items()}
    return Words(legend_names(spec), phases, labels["more_workers"], labels["more_stages"],
                 labels["worker_short"], labels["server_short"], labels["comm_lane"])


def more_lanes_text(spec, hidden: int) -> str:
    """The text of the row standing for `hidden` workers (or pipeline stages) not drawn."""
    return plugin_of(spec).more_lanes_text(spec, hidden)


def lane_text(spec, worker_id: str) -> str:
    """A worker's lane name: its label, or what its strategy names it (a pipeline's stage)."""
    return plugin_of(spec).lane_label(spec, worker_id)


def server_group_caption(spec, line_break: str = " ") -> Tex:
    """TeX of the caption over the box of the shards: figure.labels.server_group with {n}
    the shard count. A fitted figure passes a line break: the caption then wraps before its
    parenthesis ("Parameter server" over "(2 shards)"), as long as no math spans the break."""
    text = label_text(spec, "server_group", n=f"{spec.topology.servers.count:,}")
    head, paren, tail = text.partition(" (")
    if line_break != " " and paren and "$" not in head:
        return Tex(render_label(head) + line_break + render_label("(" + tail))
    return Tex(render_label(text))
