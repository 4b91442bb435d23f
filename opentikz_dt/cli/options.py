"""What several commands share: the --width option's type and the reporting of an output
that cannot be written.

Exit codes (errors.py's table): a bad option value is usage (2), checked while click
parses, before anything runs or prints a warning; an output that cannot be written is
invalid input (1), as `dtgen edit` reports a spec it cannot write and `dtgen init` one
that exists.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

import click

from ..errors import DtgenError


class WidthType(click.ParamType):
    """--width: column, page or a length (figures/fit.py's width_cm decides), a usage error
    (2) when it is none, as every other bad option value; the same word in a spec's
    figure.width is invalid input (1), which is why the library's own check says 1."""

    name = "width"

    def convert(self, value, param, ctx):
        from ..figures.fit import width_cm  # imported when used: `dtgen --help` stays fast

        try:
            width_cm(value)
        except DtgenError as exc:
            self.fail(str(exc), param, ctx)
        return value


WIDTH = WidthType()


def cannot_write(path: Path, exc: OSError) -> DtgenError:
    """One error naming the output the user gave, not the temporary file or folder that failed."""
    blocker = next((p for p in reversed(Path(path).parents) if p.exists() and not p.is_dir()), None)
    reason = f"{blocker} is a file, not a folder" if blocker is not None else exc.strerror or str(exc)
    return DtgenError(f"{path}: cannot write: {reason}")


@contextlib.contextmanager
def writing(path: Path | None):
    """Report an OSError about the output `path` (the path itself, a file in it, its temporary
    file beside it, a folder above it that cannot be made) as `cannot_write`; other OSErrors
    (and all of them where `path` is None: a default output) go on to the CLI's own handler."""
    try:
        yield
    except OSError as exc:
        if path is None or not _about(exc.filename, Path(path)):
            raise
        raise cannot_write(path, exc) from None


def check_writable(path: Path) -> None:
    """Fail now, not at the end of minutes of work, where the output file `path` cannot be
    written: create and remove a file in the nearest folder above it that exists (the missing
    ones are made when it is written, so none is made here for a command that then fails)."""
    folder = Path(path).parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as exc:
        raise cannot_write(path, exc) from None


def _about(name, path: Path) -> bool:
    if not isinstance(name, (str, os.PathLike)):
        return False
    failed, target = Path(os.path.abspath(name)), Path(os.path.abspath(path))
    # the atomic writes' temporary files: x.json.tmp, .x.json.abc123.tmp, .x.abc123 (a folder)
    beside = failed.parent == target.parent and failed.name.lstrip(".").startswith(target.name + ".")
    return failed == target or target in failed.parents or failed in target.parents or beside
