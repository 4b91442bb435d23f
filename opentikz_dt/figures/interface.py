"""The figures side's plugin interface: `FiguresPlugin` lists every question the drawing
code asks about a strategy, for the spec's own figures (topology, expected schedule) and
for a run's (measured/: timeline, annotated topology, plots, comparison table). A plugin
module (opentikz_dt/strategies/<kind>/figures.py, or an outside package's `figures.py`)
defines the required hooks and, where the default below does not fit, the others; the
registry (opentikz_dt/plugins.py) builds a `FiguresPlugin` from the module's names, the
defaults for the rest. mypy checks every plugin module against it
(tests/test_plugin_types.py). Drawing code asks `plugin_of(spec)`; it never compares a
kind, an algorithm, a sync mode or a schedule itself. A plugin module may compare its own.

A new strategy's smallest plugin (the `single` kind's is a short one to copy):

  KIND = "my-kind"
  TIMELINE_BOXES = ("forward", "backward", "slowdown", "optimizer", "skipped")
  def layout(spec, spacing): return single_layout(spec, spacing)       # topology_peer
  def spacing_needs(sizes): return single_needs(sizes)                 # spacing

Its expected timeline needs no hook here: it is the predictor's simulation of the spec
(its predict plugin's `simulate_steps`, predict/expected.py), drawn as a run.

Must not import torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from .texts import label_text
from .timeline_styles import BOX_STYLES

Spec = Any  # the validated spec (spec_types.Spec)
Layout = Any  # model.Layout (drawing types, typed loosely: plugins build them from helpers)
Timeline = Any  # timeline.Timeline


# --- the defaults ----------------------------------------------------------------------------

def default_false(spec: Spec) -> bool:
    return False


def default_annotate_measured(spec: Spec, layout: Layout, run: Any) -> Layout:
    return layout  # the measured annotation (bytes on links, step times) is all


def default_lane_label(spec: Spec, worker_id: str) -> str:
    return spec.topology.workers.label_of(worker_id)


def default_stage_lanes(spec: Spec) -> int:
    return 0  # every worker is its own lane


def default_more_lanes_text(spec: Spec, hidden: int) -> str:
    return label_text(spec, "more_workers", n=f"{hidden:,}")


def default_run_name(spec: Spec) -> str:
    return spec.strategy.kind.replace("-", " ")


def default_table_name(spec: Spec) -> str:
    return spec.strategy.kind


def default_bubble_reference(spec: Spec, stages: int, microbatches: int) -> tuple[float, str, str]:
    """GPipe's (p-1)/(m+p-1)."""
    return (stages - 1) / (microbatches + stages - 1), "$(p-1)/(m+p-1)$", ""


def default_expected_panels(spec: Spec) -> tuple[tuple[str, Spec, str, str], ...]:
    """One panel: the spec itself, titled by figure.labels.panel or dtgen."""
    return (("main", spec, "", ""),)


def default_compared_schedules(spec: Spec) -> tuple[tuple[Spec, ...], tuple[str, ...], str]:
    """Refused: only a pipeline has schedules to put side by side."""
    from ..errors import DtgenError

    raise DtgenError(f"strategy.kind: --kind schedules draws the pipeline schedules of a kind: pipeline spec, "
                     f"not {spec.strategy.kind}")


# --- the interface ---------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True, repr=False)
class FiguresPlugin:
    """How one strategy is drawn. Hooks without a default are required."""

    KIND: str  # the spec's strategy.kind it serves

    # Topology figure (figures/topology.py, spacing.py, measured/annotate.py)
    # layout(spec, spacing) -> model.Layout: the topology drawing at the gaps `spacing`
    # (spacing.Spacing); topology_common, topology_ps, topology_allreduce and
    # topology_peer build the usual pieces.
    layout: Callable[[Spec, Any], Layout]
    # spacing_needs(sizes) -> (colsep, rowsep): the least gaps (cm) its icons and labels
    # need; `sizes` is a spacing.Sizes. The figure uses max(asked, needed).
    spacing_needs: Callable[[Any], tuple[float, float]]
    # barrier(spec): a sync barrier bar stands in front of the single server
    barrier: Callable[[Spec], bool] = default_false
    # flow_run(spec): a fitted figure draws the workers' links to something right of their
    # column as long as their labels need (spacing.fitted_flow_run); the measured figure
    # then sizes its byte labels the same way
    flow_run: Callable[[Spec], bool] = default_false
    # flow_labels_once(spec): in a fitted measured figure whose workers' links all carry the
    # same bytes, the flow labels may say them once (True only where flow_run is True too)
    flow_labels_once: Callable[[Spec], bool] = default_false

    # Expected schedule (predict/expected.py: the simulator's, under the illustrative calibration)
    # expected_panels(spec) -> ((panel id, spec to simulate, title or "", note or ""), ...): the
    # panels of the expected timeline, each a spec simulated on one shared axis (a parameter
    # server compares sync with async, its own mode noted); the default is the spec alone
    expected_panels: Callable[[Spec], tuple[tuple[str, Spec, str, str], ...]] = default_expected_panels
    # TIMELINE_BOXES: the timeline box kinds that can share one of its figures (the
    # colour-vision check compares exactly these); every box kind at once is more than the
    # default colours keep apart, so list yours
    TIMELINE_BOXES: tuple[str, ...] = tuple(BOX_STYLES)

    # Lanes (expected and measured timelines, measured footer)
    LANE_ROLE: str = "worker"  # the role of a worker's lane (timeline.Lane.role): worker or stage
    # lane_label(spec, worker_id): the name of a worker's lane (a pipeline names its stage)
    lane_label: Callable[[Spec, str], str] = default_lane_label
    # stage_lanes(spec): the workers of a pipeline stage, which run alike, when one of them stands
    # for its stage once the workers outnumber figure.max_workers_drawn (a mesh: data x
    # tensor); 0: every worker has its own lane
    stage_lanes: Callable[[Spec], int] = default_stage_lanes
    # more_lanes_text(spec, hidden): the text of the row standing for `hidden` lanes not drawn
    more_lanes_text: Callable[[Spec, int], str] = default_more_lanes_text

    # Measured figures (measured/)
    # annotate_measured(spec, layout, run) -> model.Layout: a run's topology after
    # measured/annotate.py's bytes and step times, with what only this strategy shows
    annotate_measured: Callable[[Spec, Layout, Any], Layout] = default_annotate_measured
    # PIPELINED: the workers are the stages of one model passing microbatches along
    # (boxes labelled with their microbatch, idle time drawn and measured as the bubble)
    PIPELINED: bool = False
    WINDOW_STEPS: int = 3  # how many steps a measured timeline shows when the user picks none
    # asynchronous(spec): workers push and fetch at their own pace through a server (the
    # window follows the first worker, a server update is labelled U, no idle boxes on a
    # server's lane, the figures count each worker's updates)
    asynchronous: Callable[[Spec], bool] = default_false
    # run_name(spec): its English name in measured titles ("synchronous parameter server")
    run_name: Callable[[Spec], str] = default_run_name
    # table_name(spec): its short name in the comparison table ("PS sync")
    table_name: Callable[[Spec], str] = default_table_name
    # bubble_reference(spec, p, m) -> (fraction, TeX formula, its numbers or ""): the bubble a
    # measured pipelined run's is compared with (a pipeline: its schedule's)
    bubble_reference: Callable[[Spec, int, int], tuple[float, str, str]] = default_bubble_reference
    # compared_schedules(spec) -> (specs, left out, title): the `--kind schedules` figure, the
    # spec under each schedule it compares (simulated side by side on one axis), the
    # schedules its shape cannot take (named in the note) and the figure's title
    compared_schedules: Callable[[Spec], tuple[tuple[Spec, ...], tuple[str, ...], str]] = default_compared_schedules

    def __repr__(self) -> str:
        return f"<{self.KIND} figures plugin>"
