"""The one exception family of dtgen. Library code raises these; only the CLI exits."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Issue:
    """One problem in one file, printed gcc-style so editors can jump to it."""

    file: str
    line: int
    col: int
    path: str
    message: str

    def __str__(self) -> str:
        where = f"{self.path}: " if self.path else ""
        return f"{self.file}:{self.line}:{self.col}: {where}{self.message}"


class DtgenError(Exception):
    """Base of every error dtgen reports to a user (exit code 2 unless said otherwise)."""

    exit_code = 2


class SpecError(DtgenError):
    """A spec failed to load or validate; carries every issue found, not just the first."""

    def __init__(self, issues: list[Issue]):
        self.issues = sorted(set(issues))
        super().__init__("\n".join(str(i) for i in self.issues))


class ToolMissingError(DtgenError):
    """An external program (pdflatex, dvisvgm, ...) is not installed."""


class CompileError(DtgenError):
    """pdflatex (or a converter) failed on generated TeX."""


class RunError(DtgenError):
    """A distributed run failed: names the rank, its role and its log."""

    exit_code = 3


class TraceError(DtgenError):
    """A file given as a trace or run directory is not one."""


class EditRefused(DtgenError):
    """An edit would break the schema, a rule or a contract invariant; nothing was written."""
