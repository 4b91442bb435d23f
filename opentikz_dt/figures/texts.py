"""The words dtgen itself writes into figures, in the spec's language.

The legend's box and phase names, the timeline's panel titles, axis title and notes,
its lane names (stages, elided workers, narrow abbreviations) and the caption over a
parameter server's shards come from `figure.labels` (the schema holds their English
defaults; a few, such as `panel`, have none and dtgen describes the strategy when they
are unset), so a spec whose labels are Chinese gets a figure that reads in Chinese
throughout. Every one goes through texsafe.render_label like the other labels (the
labels-safe invariant checks them on load), and spec_needs_cjk sees them in the spec's
data. Templates name their numbers in braces ({n}, {i}, {steps}, ...). Must not import torch.
"""

from __future__ import annotations

from ..texsafe import render_label
from .model import Tex
from .timeline import Words

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


def label_tex(spec, key: str, **values) -> Tex:
    """One of figure.labels as safe TeX (escaped text, allow-listed math), its placeholders filled."""
    return Tex(render_label(label_text(spec, key, **values)))


def legend_names(spec) -> dict:
    """Box kind -> the name the timeline's legend gives it."""
    return dict(spec.figure.labels["legend"])


def timeline_words(spec) -> Words:
    """The words draw_timeline writes itself, from the spec."""
    labels = spec.figure.labels
    phases = {phase: labels["phases"][key] for phase, key in PHASE_KEYS.items()}
    return Words(legend_names(spec), phases, labels["more_workers"], labels["more_stages"],
                 labels["worker_short"], labels["server_short"])


def more_lanes_text(spec, hidden: int) -> str:
    """The text of the row standing for `hidden` workers (or pipeline stages) not drawn."""
    key = "more_stages" if spec.strategy.kind == "pipeline" else "more_workers"
    return label_text(spec, key, n=f"{hidden:,}")


def lane_text(spec, worker_id: str) -> str:
    """A worker's lane name: its label, or for a pipeline its stage (figure.labels.stage_lane)."""
    if spec.strategy.kind == "pipeline":
        return label_text(spec, "stage_lane", i=worker_id[1:])
    return spec.topology.workers.label_of(worker_id)


def server_group_caption(spec, line_break: str = " ") -> Tex:
    """TeX of the caption over the box of the shards: figure.labels.server_group with {n}
    the shard count. A fitted figure passes a line break: the caption then wraps before its
    parenthesis ("Parameter server" over "(2 shards)"), as long as no math spans the break."""
    text = label_text(spec, "server_group", n=f"{spec.topology.servers.count:,}")
    head, paren, tail = text.partition(" (")
    if line_break != " " and paren and "$" not in head:
        return Tex(render_label(head) + line_break + render_label("(" + tail))
    return Tex(render_label(text))
