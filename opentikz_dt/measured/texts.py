"""The words of a measured or predicted timeline: its title, notes and axis title.

Each comes from the spec's figure.labels where it sets them (measured_panel,
predicted_panel, window_note, requested_note, aggregated_note, bubble_panel, bubble_note,
measured_axis), with the run's numbers filled into the template's placeholders; where it
does not, dtgen describes the run in English ("measured: ring all-reduce, steps 5–7").
Titles are plain text drawn through texsafe.render_label; the note stays plain text
(escaped when drawn) because callers extend it (a prediction names its calibration), and
the run's own failure status is quoted as the run wrote it. Must not import torch.
"""

from __future__ import annotations

from ..figures.model import Tex
from ..figures.plugin import plugin_of
from ..figures.texts import label_tex, label_text, lane_text


def strategy_name(spec) -> str:
    """The English name of what ran (its figures plugin's run_name): synchronous parameter
    server, ring all-reduce, 1F1B pipeline."""
    return plugin_of(spec).run_name(spec)


def _is_set(spec, key: str) -> bool:
    return bool(spec.figure.labels.get(key))


def panel_title(spec, seen: str, window) -> str:
    """The panel's title; `seen` is measured or predicted."""
    key = f"{seen}_panel"
    if _is_set(spec, key):
        return label_text(spec, key, steps=window.numbers)
    return f"{seen}: {strategy_name(spec)}, {window.label}"


def bubble_title_note(spec, seen: str, bubble) -> str:
    """The note after a pipeline panel's title: the bubble drawn beside the ideal (p-1)/(m+p-1)."""
    if _is_set(spec, "bubble_panel"):
        return label_text(spec, "bubble_panel", bubble=f"{bubble.measured:.0%}", theory=f"{bubble.theory:.0%}")
    return f"bubble {bubble.measured:.0%} {seen}; {bubble.form} = {bubble.theory:.0%}"


def _bubble_note(spec, seen: str, bubble) -> str:
    ideal = bubble.ideal or f"{bubble.stages - 1}/{bubble.microbatches + bubble.stages - 1}"
    values = {"bubble": f"{bubble.measured:.1%}", "run_mean": f"{bubble.run_mean:.1%}", "ideal": ideal,
              "theory": f"{bubble.theory:.1%}"}
    if _is_set(spec, "bubble_note"):
        return label_text(spec, "bubble_note", **values)
    return (f"{seen} bubble {values['bubble']} (run mean {values['run_mean']}) vs {ideal} = {values['theory']} "
            f"for balanced stages")


def _window_note(spec, window) -> str:
    """Which steps are drawn and why (dtgen's choice or --steps)."""
    key = "window_note" if window.chosen == "default" else "requested_note"
    if _is_set(spec, key):
        return label_text(spec, key, steps=window.numbers)
    how = "a representative window, near the median step time" if window.chosen == "default" else "as requested"
    return f"{window.label}: {how}"


def timeline_note(spec, seen: str, window, bubble, binned: tuple | None, ended_note: str | None,
                  skipped: list | None = None) -> str:
    """The note under the timeline: the bubble, the binning (spans, budget), why the run ended
    early, fp16 steps skipped in the window; or, when none applies, which steps are drawn."""
    notes = []
    if skipped:
        notes.append(f"fp16: no update at step {', '.join(map(str, skipped))} (gradients overflowed; step skipped)")
    if bubble is not None:
        notes.append(_bubble_note(spec, seen, bubble))
    if binned is not None:
        spans, budget = binned
        notes.append(label_text(spec, "aggregated_note", spans=f"{spans:,}", budget=f"{budget:,}"))
    if ended_note is not None:
        notes.append(ended_note)
    return "; ".join(notes or [_window_note(spec, window)])


def axis_title(spec, t0_ms: float) -> Tex:
    """The time axis title: counted from the window's start in the run."""
    return label_tex(spec, "measured_axis", t0=f"{t0_ms:,.1f}")


def lane_name(spec, ident: str) -> str:
    """A rank's lane: a worker's label (a pipeline's stage), a server's label, else its id."""
    if ident.startswith("w") and ident[1:].isdigit():
        return lane_text(spec, ident)
    if ident in spec.topology.servers.ids:
        return spec.topology.servers.label_of(ident)
    return ident


def comm_lane_name(spec, lane: str) -> str:
    """The lane of a rank's communication that overlaps its compute."""
    return label_text(spec, "comm_lane", lane=lane)
