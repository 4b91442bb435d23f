"""The one exception family of dtgen. Library code raises these; only the CLI exits.

Exit codes, the same for every command (docs/cli.md, "Exit codes"):
  0  success
  1  invalid spec or input: a spec, edit, run directory, trace, model or dataset that
     cannot be used (nothing was started or written), an output that cannot be written
  2  usage: a bad command-line option or argument (click's own code), a path an option
     names that does not exist or is the wrong kind, options that cannot combine
  3  a run failed: a rank crashed, hung or was lost, after the ranks started
  4  a tool is missing or failed: pdflatex, a converter, PyTorch not installed
  130 interrupted (Ctrl-C)
"""

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


class SpecNote(UserWarning):
    """Something dtgen read differently from the file's letter, as the user meant it (a
    number YAML reads as text); the CLI prints it as one `dtgen: warning:` line."""


EXIT_INVALID, EXIT_USAGE, EXIT_RUN_FAILED, EXIT_TOOL = 1, 2, 3, 4
EXIT_INTERRUPTED = 130


class DtgenError(Exception):
    """Base of every error dtgen reports to a user: invalid input unless said otherwise."""

    exit_code = EXIT_INVALID


class SpecError(DtgenError):
    """A spec failed to load or validate; carries every issue found, not just the first."""

    def __init__(self, issues: list[Issue], more_after: str = ""):
        self.issues = sorted(set(issues))
        self.more_after = more_after  # checks that only run once these issues are fixed
        super().__init__("\n".join(str(i) for i in self.issues))


class UsageError(DtgenError):
    """A command-line option or argument that dtgen checks itself (--sweep, --link,
    --set, an edit operation's words): a usage error, exit code 2 as click's own."""

    exit_code = EXIT_USAGE


class ToolMissingError(DtgenError):
    """An external program (pdflatex, dvisvgm, ...) or PyTorch is not installed."""

    exit_code = EXIT_TOOL


class CompileError(DtgenError):
    """pdflatex (or a converter) failed on generated TeX."""

    exit_code = EXIT_TOOL


class RunError(DtgenError):
    """A distributed run failed: names the rank, its role and its log."""

    exit_code = EXIT_RUN_FAILED


class InputError(RunError):
    """What a run was given cannot work (an entry point that does not import, a model that
    does not take the dataset's samples, a dataset too small): refused before any rank
    starts, so it is invalid input, not a failed run. A RunError, so code that reports
    run failures reports it too."""

    exit_code = EXIT_INVALID


class TraceError(DtgenError):
    """A file given as a trace or run directory is not one."""


class EditRefused(DtgenError):
    """An edit would break the schema, a rule or a contract invariant; nothing was written."""


def problems_line(issues: list[Issue], more_after: str = "") -> str:
    """The `dtgen: error:` line under a spec's issues (and `dtgen validate`'s, over its files)."""
    files = len({issue.file for issue in issues})
    more = f"; {more_after} run once these are fixed" if more_after else ""
    return f"dtgen: error: {len(issues)} problem(s) in {files} file(s){more}"


def error_text(exc: DtgenError) -> str:
    """What the CLI prints and the MCP server returns for an error: a spec's issue lines
    as they are (gcc-style, so editors jump to them) and one `dtgen: error:` line, last."""
    if isinstance(exc, SpecError):
        return str(exc) + "\n" + problems_line(exc.issues, exc.more_after)
    # A message of several lines is what went wrong (its first line) and what that is about
    # (a refused edit's issues, an override's issues, a failed run's log and folder): those
    # come first and the `dtgen: error:` line last, as a spec's problems and their count do.
    headline, *details = str(exc).splitlines() or [""]
    if details:
        headline = headline.rstrip(":")  # "...:" announced the lines that now stand above it
    return "\n".join([*details, f"dtgen: error: {headline}"])
