"""The expected schedule: a Timeline built from the spec alone ("what to expect").

A small cost model (CostModel: compute rate, link bandwidth and latency) turns the
model size, batch and worker slowdowns into durations; each strategy's figures plugin
(strategies/<kind>/figures.py, `expected_timeline`) orders the spans as its runner will,
with the Sim below, and assembles its panels with `lanes` / `one_panel`. Absolute times
are illustrative; relative sizes, waits and bubbles are the point. The measured timeline (from trace.json) uses the same Timeline model,
so both figures share one template and one ms axis.
Must not import torch.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace

from ..workload import Workload, workload_of
from .model import elide
from .plugin import plugin_of
from .texts import label_tex, lane_text, more_lanes_text
from .timeline import Box, Lane, Panel, Timeline, limit_boxes

STEPS = 2


@dataclass(frozen=True)
class CostModel:
    flops_per_ms: float = 2.0e6  # 2 GFLOP/s per worker (a CPU core running the MLP)
    bytes_per_ms: float = 1.0e5  # 100 MB/s per link (gloo over a network)
    intra_host_factor: float = 10.0  # links inside a host are this much faster
    latency_ms: float = 0.3
    min_ms: float = 0.4  # shortest span (server update, optimizer step)
    # The defaults above are invented numbers, so their times mean nothing in ms: an
    # illustrative model's timeline is drawn in relative units. A cost model built from
    # measured or published numbers (a calibration, a hardware datasheet) sets False and
    # its timeline is drawn in ms.
    illustrative: bool = True


# A python model's size is known only once the runner builds it: the expected
# timeline then draws a nominal one (the measured timeline shows the real one).
NOMINAL_PARAMS = 100_000


def _model(spec) -> tuple[int, float, Workload | None]:
    """(parameters, forward FLOPs per sample, workload) of the spec's model."""
    workload = workload_of(spec)
    if workload is None:
        return NOMINAL_PARAMS, 2.0 * NOMINAL_PARAMS, None
    return workload.params, workload.flops_per_sample, workload


class Sim:
    """Boxes per lane id, plus helpers shared by the strategies."""

    def __init__(self, spec, cost: CostModel):
        self.spec, self.cost = spec, cost
        self.boxes: dict[str, list[Box]] = defaultdict(list)
        self.params, self.flops, self.workload = _model(spec)
        self.bytes = 4 * self.params

    def add(self, lane, start, end, kind, label="", phase=""):
        if end - start > 1e-9 * max(1.0, abs(end)):  # not float residue of equal times
            self.boxes[lane].append(Box(start, end, kind, label, phase))
        return end

    def compute(self, worker_id, start, samples=None, flops=None, pace=1.0) -> float:
        """forward, backward and the straggler delay of one step; returns the end time.
        Forward time follows the model's FLOPs per sample (workload.py), backward twice that;
        pace < 1 or > 1 is a worker's own speed (gossip peers do not run in lockstep)."""
        samples = samples or self.spec.training.batch_size
        flops = flops if flops is not None else self.flops
        fwd = samples * flops / self.cost.flops_per_ms * pace
        bwd = 2 * fwd
        t = self.add(worker_id, start, start + fwd, "forward", "fwd")
        t = self.add(worker_id, t, t + bwd, "backward", "bwd")
        extra = (self.spec.topology.workers.slowdown_of(worker_id) - 1.0) * (fwd + bwd)
        return self.add(worker_id, t, t + max(0.0, extra), "slowdown", "slow")

    def link(self, nbytes, share=1.0, factor=1.0) -> float:
        return self.cost.latency_ms + nbytes * share / (self.cost.bytes_per_ms * factor)


# ---------------------------------------------------------------- assembling lanes


def lanes(spec, sim: Sim, with_servers: bool) -> tuple:
    """The lanes of a panel: the servers (with_servers), then the drawn workers (the first
    ones, a row standing for the elided ones, the last)."""
    out = []
    if with_servers:
        for ps in spec.topology.servers.ids:
            out.append(Lane(ps, spec.topology.servers.label_of(ps), tuple(sim.boxes[ps]), role="server"))
    workers = spec.topology.workers
    drawn = elide(workers.count, spec.figure.max_workers_drawn)
    role = plugin_of(spec).LANE_ROLE
    for k, index in enumerate(drawn):
        if index is None:
            hidden = workers.count - (len(drawn) - 1)
            out.append(Lane(f"w{drawn[k - 1] + 1}-more", more_lanes_text(spec, hidden), (), role="gap", hidden=hidden))
            continue
        w = f"w{index}"
        out.append(Lane(w, lane_text(spec, w), tuple(sim.boxes[w]), role=role))
    return tuple(out)


def one_panel(spec, sim: Sim, end: float, title: str, panel_id: str = "main", with_servers: bool = False) -> Timeline:
    """A timeline of one panel from 0 to `end`, titled figure.labels.panel where the spec
    sets it, else `title`."""
    title = spec.figure.labels.get("panel") or title
    panel = Panel(panel_id, title, lanes(spec, sim, with_servers))
    return Timeline(spec.title, (panel,), 0.0, end, label_tex(spec, "timeline_note"), label_tex(spec, "time_axis"))


def expected_timeline(spec, cost: CostModel | None = None) -> Timeline:
    """What each worker (and server) is expected to do over the first steps, from the spec alone
    (the strategy's figures plugin simulates it). Panel titles, axis title and note are the
    spec's words (figure.labels; English by default)."""
    cost = cost or CostModel()
    timeline = plugin_of(spec).expected_timeline(spec, cost)
    return with_time_axis(spec, replace(limit_boxes(timeline), widen_events=True), cost)


def with_time_axis(spec, timeline: Timeline, cost: CostModel) -> Timeline:
    """The timeline with its time axis: an illustrative cost model's span is 1 relative unit
    (only ratios of the invented costs mean something); one from measured or published
    numbers is in ms. figure.labels.time_axis names its {unit}."""
    start, end = timeline.span()
    unit = (end - start) if cost.illustrative and end > start else None
    axis = label_tex(spec, "time_axis", unit=RELATIVE_UNITS if unit is not None else "ms")
    return replace(timeline, axis_unit_ms=unit, axis_label=axis)


RELATIVE_UNITS = "relative units"
