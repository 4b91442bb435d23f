"""`dtgen validate`: load every file, collect every issue, never stop at the first."""

from __future__ import annotations

from .errors import Issue, SpecError
from .spec import load_spec


def validate_files(paths, warnings: list | None = None) -> tuple[list[Issue], str]:
    """Every issue of every file, and what was not checked yet: a spec with schema problems
    has its cross-field rules run only once those are fixed (spec.py), and the user is told.
    `warnings`, if given, receives a valid spec's located warnings (rules.check_warnings)."""
    from .memory import fit_warning
    from .rules import check_warnings

    issues: list[Issue] = []
    waiting = ""
    for path in paths:
        try:
            spec = load_spec(path)
        except SpecError as exc:
            issues.extend(exc.issues)
            waiting = waiting or exc.more_after
            continue
        if warnings is not None:
            warnings.extend(check_warnings(spec))
            warnings.extend(line for line in [fit_warning(spec)] if line)
    return issues, waiting
