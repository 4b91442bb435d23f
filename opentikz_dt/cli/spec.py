"""`dtgen validate`, `init`, `contract` and `skill`: the commands about specs and the contract."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..errors import EXIT_INVALID, problems_line
from .options import writing


@click.command()
@click.argument("specs", nargs=-1, required=True, type=click.Path(path_type=Path))
def validate(specs):
    """Check SPEC files; print every problem as file:line:col: key: message."""
    from ..validate import validate_files

    warnings: list[str] = []
    problems, waiting = validate_files(specs, warnings)
    for line in warnings:
        click.echo(f"dtgen: warning: {line}", err=True)
    for issue in problems:
        click.echo(str(issue), err=True)
    if problems:
        click.echo(problems_line(problems, waiting), err=True)
        raise SystemExit(EXIT_INVALID)
    for spec in specs:
        click.echo(f"{spec}: ok")


@click.command()
@click.option("--check", is_flag=True, help="Verify the contract against the templates and the code.")
def contract(check):
    """Print the edit contract, or check it with --check.

    The contract is two files keyed by the same ids: meta.json (OpenTikZ's format: the
    prose its tools read) and contract.exec.json (argument schemas, spec paths, bounds,
    checks). Both are printed, under their file names.
    """
    from ..contract_check import check_contract
    from ..resources import contract_exec, contract_meta

    if not check:
        shown = {"meta.json": contract_meta(), "contract.exec.json": contract_exec()}
        click.echo(json.dumps(shown, indent=2, ensure_ascii=False))
        return
    problems = check_contract()
    for problem in problems:
        click.echo(f"contract: {problem}", err=True)
    if problems:
        click.echo(f"dtgen: error: the contract does not match: {len(problems)} problem(s)", err=True)
        raise SystemExit(EXIT_INVALID)
    click.echo("contract: ok (parameters, styles, node names, operations and invariants match the templates and code)")


class _KindChoice(click.Choice):
    """The registered strategy kinds, read when the option is used, not when this module
    is imported (a DTGEN_PLUGINS that cannot be imported is then reported as an error by
    the command, not as a traceback of the import)."""

    def __init__(self):
        super().__init__(())

    @property
    def choices(self):
        from ..strategies import kinds

        return kinds()

    @choices.setter
    def choices(self, _value):
        pass


@click.command()
@click.option("--strategy", "kind", default="parameter-server", show_default=True, type=_KindChoice())
@click.option("--force", is_flag=True, help="Overwrite an existing file.")
@click.argument("path", required=False, type=click.Path(path_type=Path))
def init(kind, force, path):
    """Write a commented starter spec (to PATH, or stdout)."""
    from ..starter import write_starter

    if path is None:
        click.echo(write_starter(kind, None), nl=False)
        return
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)  # as calibrate -o and predict -o make theirs
        write_starter(kind, path, force=force)
    click.echo(f"wrote {path}")


@click.command()
def skill():
    """Print the skill document for AI agents editing specs and figures."""
    from ..resources import skill_text

    click.echo(skill_text(), nl=False)
