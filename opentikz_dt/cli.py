"""The `dtgen` command line. Thin: each command parses options and calls one function.

Errors from the library (DtgenError) become one clear message and a non-zero exit;
`--debug` shows the traceback instead. Only `run` imports the runner (and torch).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from . import __version__
from .errors import DtgenError, SpecError


class _Group(click.Group):
    """Maps DtgenError to a message and exit code, unless --debug."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except DtgenError as exc:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            message = str(exc)
            if not isinstance(exc, SpecError):
                message = f"dtgen: error: {message}"
            click.echo(message, err=True)
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


@main.command()
@click.argument("specs", nargs=-1, required=True, type=click.Path(path_type=Path))
def validate(specs):
    """Check SPEC files; print every problem as file:line:col: key: message."""
    from .validate import validate_files

    problems = validate_files(specs)
    for issue in problems:
        click.echo(str(issue), err=True)
    if problems:
        files = len({i.file for i in problems})
        raise SystemExit(click.echo(f"{len(problems)} problem(s) in {files} file(s)", err=True) or 1)
    for spec in specs:
        click.echo(f"{spec}: ok")


@main.command()
@click.option("--check", is_flag=True, help="Verify the contract against the templates and the code.")
def contract(check):
    """Print the edit contract (meta.json), or check it with --check."""
    from .contract import check_contract, load_contract

    if not check:
        click.echo(json.dumps(load_contract(), indent=2, ensure_ascii=False))
        return
    problems = check_contract()
    for problem in problems:
        click.echo(f"contract: {problem}", err=True)
    if problems:
        raise SystemExit(1)
    click.echo("contract: ok (parameters, styles, node names, operations and invariants match the templates and code)")


@main.command()
@click.option("--strategy", "kind", default="parameter-server", show_default=True,
              type=click.Choice(["single", "parameter-server", "central-storage", "allreduce", "gossip", "pipeline"]))
@click.option("--force", is_flag=True, help="Overwrite an existing file.")
@click.argument("path", required=False, type=click.Path(path_type=Path))
def init(kind, force, path):
    """Write a commented starter spec (to PATH, or stdout)."""
    from .starter import write_starter

    text = write_starter(kind, path, force=force)
    if path is None:
        click.echo(text, nl=False)
    else:
        click.echo(f"wrote {path}")


@main.command()
def skill():
    """Print the skill document for AI agents editing specs and figures."""
    from .resources import skill_text

    click.echo(skill_text(), nl=False)


# The figure, run, compare and edit commands live beside their implementations.
from .cli_commands import register  # noqa: E402

register(main)
