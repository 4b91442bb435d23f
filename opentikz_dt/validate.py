"""`dtgen validate`: load every file, collect every issue, never stop at the first."""

from __future__ import annotations

from .errors import Issue, SpecError
from .spec import load_spec


def validate_files(paths) -> list[Issue]:
    issues: list[Issue] = []
    for path in paths:
        try:
            load_spec(path)
        except SpecError as exc:
            issues.extend(exc.issues)
    return issues
