"""The `dtgen` command line. Thin: each command parses options and calls one function.

One module per group of commands: spec.py (validate, init, contract, skill),
figure.py (figure, compare), run.py (run), edit.py (edit), template.py
(export-template), mcp.py (mcp: the MCP server over stdio), predict.py (calibrate, predict).

Errors from the library (DtgenError) become one clear message ending in a
`dtgen: error:` line and the same exit code in every command (opentikz_dt/errors.py
has the table); `--debug` shows the traceback instead. Only `run` imports the runner
(and torch).
"""

from __future__ import annotations

import sys

import click

from .. import __version__
from ..errors import DtgenError, error_text


class _Group(click.Group):
    """Maps DtgenError to a message and exit code, unless --debug."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except DtgenError as exc:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            click.echo(error_text(exc), err=True)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("dtgen: interrupted", err=True)
            sys.exit(130)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="dtgen")
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.pass_context
def main(ctx, debug):
    """dtgen: one YAML spec -> a real torch.distributed run and matching TikZ figures."""
    ctx.ensure_object(dict)["debug"] = debug


def _register() -> None:
    # Command modules must not import torch at module level (`run` imports the
    # runner inside its body), so `dtgen --help` stays fast.
    from . import edit, figure, mcp, predict, run, spec, template

    for command in (spec.validate, spec.contract, spec.init, spec.skill,
                    figure.figure, figure.compare, run.run, edit.edit, template.export_template, mcp.mcp,
                    predict.calibrate, predict.predict):
        main.add_command(command)


_register()
