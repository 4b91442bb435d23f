"""The `dtgen` command line. Thin: each command parses options and calls one function.

One module per group of commands: spec.py (validate, init, contract, skill),
figure.py (figure, compare), run.py (run), edit.py (edit), template.py
(export-template), mcp.py (mcp: the MCP server over stdio), predict.py (calibrate, predict).

Errors from the library (DtgenError) become one clear message ending in a
`dtgen: error:` line and the same exit code in every command (opentikz_dt/errors.py
has the table); `--debug` shows the traceback instead. click's own usage errors end in
the same line, and a file the system refuses (an output that cannot be written) is one
such line too, never a traceback. options.py has what several commands share. Only
`run` imports the runner (and torch).
"""

from __future__ import annotations

import sys
import warnings

import click

from .. import __version__
from ..errors import EXIT_INTERRUPTED, EXIT_INVALID, DtgenError, SpecNote, error_text

# click >= 8.2 asks for the help of a bare `dtgen` with this error; it must stay help
_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())


class _Group(click.Group):
    """Maps DtgenError to a message and exit code, unless --debug; click's own errors and
    OSErrors about a file to the same `dtgen: error:` line last."""

    def make_context(self, *args, **kwargs):
        try:  # dtgen's own options (`dtgen --bogus`); a command's are parsed in invoke
            return super().make_context(*args, **kwargs)
        except _NO_ARGS_IS_HELP:
            raise
        except click.ClickException as exc:
            _click_error(exc)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except DtgenError as exc:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            click.echo(error_text(exc), err=True)
            sys.exit(exc.exit_code)
        except _NO_ARGS_IS_HELP:
            raise
        except click.ClickException as exc:
            _click_error(exc)
        except OSError as exc:
            # A file or folder the system refused where no command named it (a default output
            # folder that cannot be made, a full disk): invalid input as an output that cannot
            # be written is (options.writing), one line naming the file. An OSError about no
            # file (a closed pipe) is click's to handle.
            if exc.filename is None or (ctx.obj and ctx.obj.get("debug")):
                raise
            click.echo(f"dtgen: error: {exc.filename}: {exc.strerror or exc}", err=True)
            sys.exit(EXIT_INVALID)
        except KeyboardInterrupt:
            click.echo("dtgen: interrupted", err=True)
            sys.exit(EXIT_INTERRUPTED)


def _click_error(exc: click.ClickException):
    """click's error (a bad option value, a missing argument, options that cannot combine) as
    dtgen's: the usage line for context, then `dtgen: error: ...` last, click's exit code (2)."""
    ctx = getattr(exc, "ctx", None)
    if ctx is not None:
        click.echo(f"{ctx.get_usage()}\nTry '{ctx.command_path} --help' for help.\n", err=True)
    click.echo(f"dtgen: error: {exc.format_message()}", err=True)
    sys.exit(exc.exit_code)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="dtgen")
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.pass_context
def main(ctx, debug):
    """dtgen: one YAML spec -> a real torch.distributed run and matching TikZ figures."""
    ctx.ensure_object(dict)["debug"] = debug
    _show_spec_notes()


def _show_spec_notes() -> None:
    """A spec read as the user meant rather than as written (errors.SpecNote) is one
    `dtgen: warning:` line on stderr, once; other warnings keep Python's own display."""
    shown = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, SpecNote):
            click.echo(f"dtgen: warning: {message}", err=True)
        else:
            shown(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    warnings.simplefilter("default", SpecNote)


def _register() -> None:
    # Command modules must not import torch at module level (`run` imports the
    # runner inside its body), so `dtgen --help` stays fast.
    from . import edit, figure, mcp, predict, run, spec, template

    for command in (spec.validate, spec.contract, spec.init, spec.skill,
                    figure.figure, figure.compare, run.run, edit.edit, template.export_template, mcp.mcp,
                    predict.calibrate, predict.predict):
        main.add_command(command)


_register()
