"""The expected timeline of `dtgen figure SPEC --calibration FILE`: a prediction, drawn as a run.

Simulates a few steps with the calibration, writes them as a run directory in a
temporary folder and draws them through the measured timeline (same template, same
window choice), titled "predicted" and with the calibration named in the note.
Without a calibration the illustrative schedule (figures/schedule.py) stays.
Must not import torch.
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

from ..figures.texts import label_text
from ..measured.timeline import measured_timeline
from ..measured.trace import load_trace
from .predict import costs_for
from .rundir import write_run_dir
from .simulate import simulate

STEPS = 12  # enough for a window after warm-up


def predicted_timeline(spec, calibration) -> tuple[object, list]:
    """(Timeline, warnings) of the spec's first STEPS steps as the calibration predicts them."""
    steps = min(STEPS, max(3, spec.training.steps))
    costs, assumed, warnings = costs_for(spec, calibration)
    result = simulate(spec, costs, steps)
    with tempfile.TemporaryDirectory(prefix="dtgen-expected-") as tmp:
        run_dir = write_run_dir(Path(tmp) / "run", spec, result, steps, predicted=assumed)
        timeline = measured_timeline(spec, load_trace(run_dir), None).timeline
    note = f"{label_text(spec, 'calibration_note', file=Path(str(calibration)).name)}; {timeline.note}"
    return dataclasses.replace(timeline, note=note), warnings


def datasheet_timeline(spec) -> tuple[object, list]:
    """(Timeline, warnings) of a spec with `hardware:` and no calibration: its first steps
    as the device's datasheet predicts them (predict/cluster.py), one lane per stage,
    noted "expected on N <device>, datasheet costs"."""
    from ..rules import check_warnings
    from .cluster import cluster_result

    rec, steps, assumed = cluster_result(spec)
    with tempfile.TemporaryDirectory(prefix="dtgen-expected-") as tmp:
        run_dir = write_run_dir(Path(tmp) / "run", spec, rec.result, steps, predicted=assumed)
        timeline = measured_timeline(spec, load_trace(run_dir), None).timeline
    per_lane = assumed["ranks"] // assumed["lanes"]
    if per_lane > 1:
        lanes = (f"; a lane stands for its stage's {per_lane:,} ranks" if assumed["lanes"] > 1
                 else f"; the lane stands for all {per_lane:,} ranks")
    else:
        lanes = ""
    return (dataclasses.replace(timeline, note=f"{assumed['caption']}{lanes}; {timeline.note}"),
            check_warnings(spec))
