"""Topology figures at a target width (figure.width, `dtgen figure --width`).

The layout adapts first: the gaps shrink to what the labels and icons need (the spec's
colsep / rowsep are for the natural-width figure; the server or all-reduce bar gets a gap
of its own, spacing.fitted_flow_run), fewer workers and hosts are drawn (the existing
ellipsis and brace stand for the rest), labels much wider than their icons print on two
lines (spacing.printed_lines), icons drop their decorative text and box texts grow to
\\footnotesize. What is left is scaled in TeX (templates/topology.tex.j2 measures
the picture): down to the target width, but never below the scale where the smallest
text (8 pt \\footnotesize; 6 pt where a label's math has a subscript) reaches
fit.MIN_TEXT_PT at final size; a figure that still does
not fit stays wider than asked with legible text, and the log's FIT line says so.
Pure; must not import torch.
"""

from __future__ import annotations

import dataclasses
import re

from .fit import MIN_TEXT_PT, target_width_cm

SMALLEST_TEXT_PT = 8.0  # \footnotesize: labels, notes, and box texts in a fitted figure
MIN_SCALE = MIN_TEXT_PT / SMALLEST_TEXT_PT
NARROW_CM = 12.0  # below this target, draw at most COMPACT_WORKERS members of a column
COMPACT_WORKERS = 4
MAX_HOSTS_DRAWN = 4  # host boxes stacked in a hierarchical all-reduce before the ellipsis
COMPACT_HOSTS = 3  # and below NARROW_CM, where the picture is as tall as its boxes are many
PT_PER_CM = 72.27 / 2.54
BORDER_PT = 8.0  # the standalone border on each side (templates/base.tex.j2)


def fitted(spec) -> bool:
    return target_width_cm(spec) is not None


def narrow(spec) -> bool:
    """Whether the spec's figures are laid out for a target narrower than NARROW_CM (a column)."""
    width = target_width_cm(spec)
    return width is not None and width < NARROW_CM


def compact_spec(spec):
    """The spec a fitted layout is built from: the tightest gaps (widened to what the content
    needs by spacing.py) and, for a narrow target, fewer workers drawn."""
    width = target_width_cm(spec)
    if width is None:
        return spec
    drawn = min(spec.figure.max_workers_drawn, COMPACT_WORKERS) if width < NARROW_CM else spec.figure.max_workers_drawn
    return dataclasses.replace(spec, figure=dataclasses.replace(spec.figure, colsep=1.0, rowsep=1.2,
                                                                 max_workers_drawn=drawn))


def hosts_drawn(spec) -> int:
    """At most this many host boxes stack (the first, an ellipsis and the last stand for more)."""
    width = target_width_cm(spec)
    return COMPACT_HOSTS if width is not None and width < NARROW_CM else MAX_HOSTS_DRAWN


SCRIPT_TEXT_PT = 6.0  # a sub- or superscript (or a fraction's parts) of \footnotesize math
_SMALL_MATH = re.compile(r"\$[^$]*(?:[_^]|\\frac|\\dfrac|\\tfrac)[^$]*\$")


def smallest_text_pt(layout) -> float:
    """The smallest font size the picture prints: \footnotesize, or its script size where a
    label's math has a sub- or superscript (then the picture cannot be scaled down at all)."""
    texts = [layout.title, *layout.macros.values()]
    for node in layout.nodes:
        texts += [node.text, node.label]
    texts += [e.label for e in layout.edges] + [g.label for g in layout.groups] + [b.label for b in layout.braces]
    return SCRIPT_TEXT_PT if any(_SMALL_MATH.search(t) for t in texts) else SMALLEST_TEXT_PT


def fit_context(spec, layout) -> dict:
    """Template values: the target width in pt (None: natural width) and the smallest scale allowed."""
    width = target_width_cm(spec)
    floor = round(min(1.0, MIN_TEXT_PT / smallest_text_pt(layout)), 4)
    # The target is the compiled PDF's width (what \includegraphics places, and what the
    # figure-fits-width invariant measures), so the standalone border comes off it, as in
    # the timeline's layout.
    fit_pt = None if width is None else round(width * PT_PER_CM - 2 * BORDER_PT, 2)
    return {"fit_pt": fit_pt, "fit_min_scale": floor,
            "compact": width is not None}
