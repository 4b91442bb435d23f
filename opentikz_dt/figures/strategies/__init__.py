"""The figures side of the strategy plugins (opentikz_dt/plugins.py): one module per
strategy kind (parameter-server -> parameter_server.py, declaring KIND = "parameter-server")
answers every question the drawing code asks about a strategy, for the spec's own figures
(topology, expected schedule) and for a run's (measured/: timeline, annotated topology,
plots, comparison table). Drawing code asks `plugin_of(spec)`; it never compares a kind,
an algorithm, a sync mode or a schedule itself. A plugin module may compare its own.

What a plugin module writes (hooks marked `required` have no default; the others default
to `_defaults.py`, so a plugin writes only what differs). `spec` is the validated spec.

Topology figure (figures/topology.py, spacing.py, measured/annotate.py)
  layout(spec, spacing) -> model.Layout                                       required
      The topology drawing at the gaps `spacing` (spacing.Spacing). Helper modules build
      the usual pieces: topology_common (data fan, worker column, host boxes), and the
      drawers topology_ps, topology_allreduce, topology_peer.
  spacing_needs(sizes) -> (colsep, rowsep)                                    required
      The least gaps (cm) its icons and labels need; `sizes` is a spacing.Sizes (icon and
      label measures of the spec, `sizes.spec` the spec). The figure uses max(asked, needed).
  barrier(spec) -> bool                                           default False
      A sync barrier bar stands in front of the single server (spacing.fitted_flow_run
      leaves room for it).
  flow_run(spec) -> bool                                          default False
      A fitted figure draws the workers' links to something right of their column (a
      server, an all-reduce bar) as long as their labels need (spacing.fitted_flow_run);
      the measured figure then sizes its byte labels the same way.
  flow_labels_once(spec) -> bool                                  default False
      In a fitted measured figure whose workers' links all carry the same bytes, the flow
      labels may say them once (the links converge on one server, too close for a label
      each). True only where flow_run is True too.

Expected schedule (figures/schedule.py)
  expected_timeline(spec, cost) -> timeline.Timeline                          required
      What the workers (and servers) are expected to do over the first steps, from the spec
      and the schedule.CostModel `cost`: simulate with schedule.Sim (boxes per lane), then
      make the timeline with schedule.one_panel, or with schedule.lanes for panels of your
      own (parameter_server.py draws sync and async). schedule.expected_timeline then
      bounds the number of boxes.
  TIMELINE_BOXES: tuple of box kinds                              default every box kind
      The timeline box kinds that can share one of its figures (timeline_styles: the
      colour-vision check compares exactly these). List yours: every box kind at once is
      more than the default colours can keep apart, so the spec would be refused.

Lanes (expected and measured timelines, measured footer)
  LANE_ROLE: str                                                  default "worker"
      The role of a worker's lane (timeline.Lane.role): "worker", or "stage".
  lane_label(spec, worker_id) -> str                              default the worker's label
      The name of a worker's lane (a pipeline names its stage).
  more_lanes_text(spec, hidden) -> str                            default figure.labels.more_workers
      The text of the row standing for `hidden` lanes not drawn.

Measured figures (measured/)
  annotate_measured(spec, layout, run) -> model.Layout            default the layout as given
      A run's topology after measured/annotate.py's bytes and step times: what only this
      strategy shows of a run (a mesh: bytes per step of each dimension in its legend).
      `run` is measured.run.Run (its trace, metrics and info).
  PIPELINED: bool                                                 default False
      The workers are the stages of one model passing microbatches along: forward and
      backward boxes are labelled with their microbatch, idle time is drawn as the
      pipeline's bubble and measured (the panel's note), communication stays in the lane.
  WINDOW_STEPS: int                                               default 3
      How many steps a measured timeline shows when the user picks none.
  asynchronous(spec) -> bool                                      default False
      Workers push and fetch at their own pace through a server: the window is chosen on
      the first worker's steps, a server update is labelled U, a server's lane gets no
      idle boxes, and the figures count each worker's updates.
  run_name(spec) -> str                                           default the kind, spaced
      Its English name in measured titles ("synchronous parameter server").
  table_name(spec) -> str                                         default the kind
      Its short name in the comparison table ("PS sync").
  bubble_reference(spec, p, m) -> (fraction, TeX formula, numbers) default GPipe's (p-1)/(m+p-1)
      The bubble a measured pipelined run's is compared with (a pipeline: its schedule's).
  schedules_timeline(spec, cost) -> timeline.Timeline             default refused
      The `--kind schedules` figure: the pipeline schedules side by side.

A new strategy's smallest plugin (gossip.py and single.py are short ones to copy):

  KIND = "my-kind"
  TIMELINE_BOXES = ("forward", "backward", "slowdown", "optimizer", "skipped")
  def layout(spec, spacing): return single_layout(spec, spacing)       # topology_peer
  def spacing_needs(sizes): return single_needs(sizes)                 # spacing
  def expected_timeline(spec, cost):
      sim = Sim(spec, cost)                                            # schedule
      end = sim.compute("w1", 0.0)
      return one_panel(spec, sim, end, "my strategy: one step")

A strategy from outside dtgen puts such a module at `<package>.figures` (DTGEN_PLUGINS).
Must not import torch.
"""

from __future__ import annotations

from ...plugins import SideRegistry

REGISTRY = SideRegistry("figures", __name__, defaults=f"{__name__}._defaults")


def plugin(kind: str):
    """The figures plugin of `kind`, with the defaults for what it leaves out."""
    return REGISTRY.get(kind)


def plugin_of(spec):
    """The figures plugin of a spec's strategy."""
    return REGISTRY.get(spec.strategy.kind)
