"""Target widths: `figure.width` in the spec and `dtgen figure --width` name the width a
figure is read at (column of a two-column paper, full page, or a length).

Layouts read target_width_cm() and adapt (fewer lanes, shorter labels, compact spacing)
instead of scaling text down, so every text stays at least MIN_TEXT_PT at final size.
"""

from __future__ import annotations

import dataclasses
import re

from ..errors import DtgenError

COLUMN_CM = 8.5  # one column of a two-column conference paper (ACM/IEEE/USENIX)
PAGE_CM = 17.8  # the text width of those papers
MIN_TEXT_PT = 6.0  # the smallest text size a reviewer accepts beside 10 pt body text
NAMED = {"column": COLUMN_CM, "page": PAGE_CM}
_LENGTH = re.compile(r"^(\d+(?:\.\d+)?)cm$")


def width_cm(width: str | None) -> float | None:
    """'column' -> 8.5, 'page' -> 17.8, '12cm' -> 12.0, None -> None (natural width)."""
    if width is None:
        return None
    if width in NAMED:
        return NAMED[width]
    match = _LENGTH.match(width)
    if not match or not 4.0 <= float(match.group(1)) <= 60.0:
        raise DtgenError(f"figure width {width!r}: use column, page, or a length from 4cm to 60cm such as 12cm")
    return float(match.group(1))


def target_width_cm(spec) -> float | None:
    """The width the spec's figures are laid out for (None: natural width)."""
    return width_cm(spec.figure.width)


def with_width(spec, width: str | None):
    """The spec with figure.width replaced (the CLI's --width overrides the spec's)."""
    if width is None:
        return spec
    width_cm(width)  # validate before anything is drawn
    data = dict(spec.data)
    data["figure"] = {**data["figure"], "width": width}
    return dataclasses.replace(spec, figure=dataclasses.replace(spec.figure, width=width), data=data)
