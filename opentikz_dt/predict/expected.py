"""The expected timeline of a spec: the simulator's schedule, drawn as a run.

One schedule model: every expected timeline is the predictor's simulation
(simulate.py, each strategy's `simulate_steps`) of the spec's first steps, its events
read as a run's trace (rundir.result_trace, in memory) and drawn through the measured
timeline (same template, lanes, waits, microbatch labels and bubble). The costs differ
by source:

- no calibration and no `hardware:` (`illustrative_timeline`): the illustrative
  calibration's invented round numbers (costs.illustrative_calibration), so the figure
  is drawn in relative units and its note says the cost model is illustrative;
- `--calibration FILE` (`predicted_timeline`): that calibration, titled "predicted", the
  file named in the note;
- `hardware:` (`datasheet_timeline`): the device's datasheet (cluster.py).

Must not import torch.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..errors import DtgenError
from ..figures.plugin import plugin_of
from ..figures.texts import label_tex, label_text
from ..figures.timeline import Timeline
from ..measured.texts import bubble_title_note, panel_title
from ..measured.timeline import measured_timeline
from ..strategies.pipeline_schedules import ScheduleOrderError
from .calibration import illustrative_calibration
from .costs import Costs
from .predict import costs_for
from .rundir import result_trace
from .simulate import simulate

STEPS = 12  # a prediction's steps: enough for a window after warm-up
EXPECTED_STEPS = 2  # the illustrative timeline draws the first steps, from the start
RELATIVE_UNITS = "relative units"


def _drawn(spec, costs, steps: int, predicted: dict, window: tuple | None = None):
    """The measured-timeline drawing (measured.timeline.Measured) of `steps` simulated steps;
    with `window` (first, last) those steps whole, from the start."""
    try:
        result = simulate(spec, costs, steps)
    except ScheduleOrderError as e:
        raise DtgenError(f"strategy.schedule: {e}") from None
    return measured_timeline(spec, result_trace(spec, result, predicted), window, whole_steps=window is not None)


def predicted_timeline(spec, calibration) -> tuple[object, list]:
    """(Timeline, warnings) of the spec's first STEPS steps as the calibration predicts them."""
    steps = min(STEPS, max(3, spec.training.steps))
    costs, assumed, warnings = costs_for(spec, calibration)
    timeline = _drawn(spec, costs, steps, assumed).timeline
    note = f"{label_text(spec, 'calibration_note', file=Path(str(calibration)).name)}; {timeline.note}"
    return dataclasses.replace(timeline, note=note), warnings


def _illustrative_panel(spec, panel_id: str, title: str, note: str, steps: int, free_messages: bool = False):
    """(Panel, end ms) of `spec`'s first `steps` steps under the illustrative calibration
    (with `free_messages`, its messages cost nothing: the schedule papers' own assumption).
    Titled `title` (else figure.labels.panel, else "expected: <strategy>, steps 0–1"); a
    pipeline's note gives its bubble beside the schedule's paper form."""
    costs, assumed, _ = costs_for(spec, None)
    if free_messages:
        costs = Costs(illustrative_calibration(spec, latency_s=0.0, bytes_per_s=1e18), spec)
    # asynchronous workers run at their own pace: a fast one's further iterations, done while
    # the slowest finishes its `steps`, are drawn too, so it simulates enough of them
    ahead = 3 if plugin_of(spec).asynchronous(spec) else 1
    drawn = _drawn(spec, costs, steps * ahead, assumed, (0, steps - 1))
    (panel,) = drawn.timeline.panels
    if not title:
        title = spec.figure.labels.get("panel") or panel_title(spec, "expected", drawn.window)
    if not note and drawn.bubble is not None:
        note = bubble_title_note(spec, "expected", drawn.bubble)
    # (a predicted run's own panel note, an async run's updates per worker, counts the
    # spec's whole run: the first steps drawn here are not it)
    return (dataclasses.replace(panel, id=panel_id, title=title, note=note, lanes=_gap_ids(panel.lanes)),
            drawn.timeline.span())


def _gap_ids(lanes: tuple) -> tuple:
    """The row standing for elided workers named after the first it hides (w4-more; w193-more
    where each lane stands for a stage of 64), as the node naming scheme has it (a run's
    figure names it `more`)."""
    drawn = [int(lane.id[1:]) for lane in lanes if lane.id[:1] == "w" and lane.id[1:].isdigit()]
    stride = drawn[1] - drawn[0] if len(drawn) > 1 else 1
    out, last = [], 0
    for lane in lanes:
        if lane.role == "gap":
            lane = dataclasses.replace(lane, id=f"w{last + stride}-more")
        elif lane.id[:1] == "w" and lane.id[1:].isdigit():
            last = int(lane.id[1:])
        out.append(lane)
    return tuple(out)


def _relative(spec, title: str, panels: list, spans: list, note) -> Timeline:
    """One time axis from the earliest start to the latest end, in relative units: the costs
    are invented, so only their ratios mean something (1 = the drawn span)."""
    start, end = min(s for s, _ in spans), max(e for _, e in spans)
    return Timeline(title, tuple(panels), start, end, note, label_tex(spec, "time_axis", unit=RELATIVE_UNITS),
                    axis_unit_ms=(end - start) if end > start else None, widen_events=True)


def illustrative_timeline(spec) -> Timeline:
    """The expected timeline of a spec without calibration or hardware: its first steps as
    the simulator runs them under the illustrative calibration, one panel per variant its
    figures plugin compares (expected_panels: a parameter server draws sync above async,
    its own mode marked), on one axis in relative units, noted as illustrative
    (figure.labels.timeline_note)."""
    # a pipeline's one step is its picture (fill, steady state, drain, flush); others show two
    steps = 1 if plugin_of(spec).PIPELINED else max(1, min(EXPECTED_STEPS, spec.training.steps))
    panels, spans = [], []
    for panel_id, variant, title, note in plugin_of(spec).expected_panels(spec):
        panel, span = _illustrative_panel(variant, panel_id, title, note, steps)
        panels.append(panel)
        spans.append(span)
    return _relative(spec, spec.title, panels, spans, label_tex(spec, "timeline_note"))


def schedules_timeline(spec) -> Timeline:
    """`dtgen figure SPEC --kind schedules`: the pipeline schedules its figures plugin compares
    (compared_schedules: GPipe, 1F1B, ...), each simulated for the spec's stages,
    microbatches and model under the illustrative calibration with free messages (as the
    schedules' papers draw them: only the compute's order makes the bubble), one panel each
    on one axis; a schedule the spec's shape cannot take is named in the note."""
    variants, left_out, title = plugin_of(spec).compared_schedules(spec)
    steps = 1
    panels, spans = [], []
    for k, variant in enumerate(variants):
        panel, span = _illustrative_panel(variant, "abcdefgh"[k] * 2, plugin_of(variant).run_name(variant), "", steps,
                                          free_messages=True)
        panels.append(panel)
        spans.append(span)
    note = ("illustrative cost model (relative units), messages free as in the schedules' papers; "
            "one step of each schedule in torch's order")
    if left_out:  # (dtgen validate with that schedule says why)
        note += "; not drawn (the spec's shape does not fit): " + ", ".join(left_out)
    return _relative(spec, title, panels, spans, note)


def datasheet_timeline(spec, cal=None) -> tuple[object, list]:
    """(Timeline, warnings) of a spec with `hardware:`: its first steps as the device's
    datasheet predicts them (predict/cluster.py), one lane per stage, noted "expected on N
    <device>, datasheet costs"; with `cal`, a calibration made on that device, its compute
    (cluster.calibrated_compute), or a device probe of it, its rates, noted so."""
    from ..rules import check_warnings
    from .cluster import cluster_result

    rec, steps, assumed = cluster_result(spec, cal=cal)
    timeline = measured_timeline(spec, result_trace(spec, rec.result, assumed), None).timeline
    per_lane = assumed["ranks"] // assumed["lanes"]
    if per_lane > 1:
        lanes = (f"; a lane stands for its stage's {per_lane:,} ranks" if assumed["lanes"] > 1
                 else f"; the lane stands for all {per_lane:,} ranks")
    else:
        lanes = ""
    return (dataclasses.replace(timeline, note=f"{assumed['caption']}{lanes}; {timeline.note}"),
            check_warnings(spec) + (list(cal.warnings) if cal is not None else []))
