"""Every figure of one run directory: `dtgen figure RUN_DIR` calls write_run_figures.

measured-timeline (the trace in a window of steps), measured-topology (the spec's
diagram annotated with what was measured), plot-loss, plot-throughput,
plot-staleness (async runs), plot-memory (memory per rank, expected and measured;
runs that measured it) and table-summary: the figures' keys (render_run_figures,
`only`), for a prediction's run directory too. Their files are named by the run's
source and name (source.figure_stem: measured-<run>-timeline, predicted-<run>-topology),
so the figures of several runs can share a folder. Must not import torch.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..figures.fit import target_width_cm, with_width
from ..figures.render import render_timeline
from .annotate import render_annotated_topology
from .compare import default_loss_target, render_summary_table, summarize
from .export import write_outputs
from ..figures.memory import render_run_memory
from .plots import alike_note, render_loss_plot, render_staleness_plot, render_throughput_plot, workers_alike
from .run import Run, load_run
from .source import figure_stem, source_note
from .timeline import measured_timeline
from .window import parse_steps


def render_run_figures(run: Run, steps: str | None = None, body_only: bool = False, only: tuple = ()) -> dict:
    """stem -> TeX of every figure of the run (or of those named in `only`)."""
    window = parse_steps(steps)
    makers = {
        "measured-timeline": lambda: render_timeline(run.spec, _timeline(run, window), body_only=body_only),
        "measured-topology": lambda: render_annotated_topology(run, body_only),
    }
    if run.metrics["loss"]:
        makers["plot-loss"] = lambda: render_loss_plot([run], body_only)
    rates = run.metrics["per_worker_samples_per_s"]
    alike = workers_alike(rates)
    if rates and not alike:  # bars of one height say nothing: the table's note gives the rate instead
        makers["plot-throughput"] = lambda: render_throughput_plot([run], body_only)
    if run.metrics["staleness"]:
        makers["plot-staleness"] = lambda: render_staleness_plot([run], body_only)
    if run.metrics["memory"]:
        makers["plot-memory"] = lambda: render_run_memory(run, body_only)
    target = default_loss_target([run])
    extra = [alike_note(rates)] if rates and alike else []
    makers["table-summary"] = lambda: render_summary_table([summarize(run, target)], target, run.spec, body_only,
                                                           str(run.path), extra_notes=extra)
    return {stem: make() for stem, make in makers.items() if not only or stem in only}


def _timeline(run: Run, window):
    """The run's timeline, its note saying where the numbers come from: a prediction's
    calibration first (as `dtgen figure SPEC --calibration` does), the hardware measured on last."""
    timeline = measured_timeline(run.spec, run.trace, window).timeline
    line = source_note(run)
    if not line:
        return timeline
    parts = [line, timeline.note] if run.info.get("predicted") is not None else [timeline.note, line]
    return dataclasses.replace(timeline, note="; ".join(p for p in parts if p))


# the file name's last part of each figure (source.figure_stem)
FILE_KINDS = {"measured-timeline": "timeline", "measured-topology": "topology", "plot-loss": "loss",
              "plot-throughput": "throughput", "plot-staleness": "staleness", "plot-memory": "memory",
              "table-summary": "table"}
KIND_STEMS = {"timeline": ("measured-timeline",), "topology": ("measured-topology",),
              "plots": ("plot-loss", "plot-throughput", "plot-staleness", "plot-memory", "table-summary"),
              "memory": ("plot-memory",), "all": ()}


def write_run_figures(run_dir: str | Path, out_dir: str | Path | None = None, formats: tuple = ("tex",),
                      steps: str | None = None, body_only: bool = False, only: tuple = (),
                      width: str | None = None, notify=None) -> list:
    """Render and write the figures of a run directory (default into RUN_DIR/figures).

    With body_only the .tex files hold the bare picture for \\input; the compiled
    formats still come from the standalone document.
    """
    run = load_run(run_dir)
    if width is not None:
        run = dataclasses.replace(run, spec=with_width(run.spec, width))
    out_dir = Path(out_dir) if out_dir is not None else run.path / "figures"
    written = []
    texts = render_run_figures(run, steps, False, only)
    bodies = render_run_figures(run, steps, True, only) if body_only else {}
    for key, tex in texts.items():
        written += write_outputs(tex, out_dir, figure_stem(run, FILE_KINDS[key]), formats, body=bodies.get(key),
                                 target_cm=target_width_cm(run.spec), notify=notify)
    return written


def figure_run_command(run_dir, out_dir, kind: str, formats, body_only: bool, steps: str | None = None,
                       width: str | None = None, notify=None) -> list:
    """What `dtgen figure RUN_DIR` does: the measured figures of the run, in the asked formats."""
    return write_run_figures(run_dir, out_dir, tuple(formats) or ("tex",), steps, body_only, KIND_STEMS[kind],
                             width, notify)
