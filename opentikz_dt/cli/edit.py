"""`dtgen edit SPEC OP [--name value ...]`: one edit-contract operation on a spec file;
`dtgen edit SPEC --ops FILE|-`: a list of them, applied all or none; `--list`: the operations.

The operation's options are not click options: they come from its argument schema in
schemas/meta.json (edit/args.py parses and checks them), so a new operation in the
contract needs no CLI change. Exit codes: 0 applied (or nothing to change), 1 refused
or a spec that cannot be read, as every command's SPEC (the file is unchanged), 2 bad
arguments (an --ops FILE that does not exist included).
"""

from __future__ import annotations

import json
import sys

import click

from ..errors import DtgenError


class _EditCommand(click.Command):
    """Lists the operations and their options (from the contract) under --help."""

    def format_epilog(self, ctx, formatter):
        from ..edit.args import operations_contract, usage

        with formatter.section("Operations (dtgen contract has the full argument schemas)"):
            formatter.write_dl([(usage(name), op["description"]) for name, op in operations_contract().items()])


@click.command(cls=_EditCommand, context_settings={"ignore_unknown_options": True})
@click.argument("spec", type=click.Path(dir_okay=False), required=False)
@click.argument("operation", required=False)
@click.argument("words", nargs=-1, type=click.UNPROCESSED)
@click.option("--ops", "ops_file", type=click.File("r", encoding="utf-8"), default=None, metavar="FILE|-",
              help="Apply a list of operations from FILE (- for stdin) atomically: all or none. YAML/JSON list of "
                   "{op: NAME, ARG: VALUE, ...}, or one 'OP --arg value ...' line each.")
@click.option("--list", "list_ops", is_flag=True, help="List the operations with their options and exit.")
@click.option("--dry-run", is_flag=True, help="Print the unified diff; write nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print a machine-readable result (for agents).")
@click.option("--no-compile", is_flag=True,
              help="Skip the invariants that need pdflatex (figure-compiles, figure-fits-width, no-overlaps); faster, weaker.")
def edit(spec, operation, words, ops_file, list_ops, dry_run, as_json, no_compile):
    """Apply one edit-contract OPERATION to SPEC in place, if every invariant still holds.

    Comments, key order and formatting of SPEC are kept. On refusal nothing changes and
    the message names the rule or [invariant id] that refused and why. The result's
    notes name side effects, edits no figure shows and comments that may be stale.
    """
    from ..edit import EditRefusal, edit_batch, edit_file, error_result, parse_words
    from ..edit.batch import read_ops

    if list_ops:
        _list_operations(as_json)
        return
    if spec is None or (operation is None and ops_file is None):
        raise click.UsageError("give SPEC and an OPERATION (or --ops FILE); dtgen edit --list shows the operations")
    if ops_file is not None and (operation is not None or words):
        raise click.UsageError("give either one OPERATION or --ops FILE, not both")
    given: dict = {}  # the arguments as passed, for a --json refusal of them
    try:
        if ops_file is not None:
            operation = "batch"
            steps = read_ops(ops_file.read(), getattr(ops_file, "name", "-"))
            given = {"ops": [{"op": op, "args": op_args} for op, op_args in steps]}
            result = edit_batch(spec, steps, dry_run=dry_run, compile=not no_compile)
        else:
            given = _words_as_given(words)
            given = parse_words(operation, words)
            result = edit_file(spec, operation, given, dry_run=dry_run, compile=not no_compile)
        code = 0
    except EditRefusal as exc:
        result, code = exc.result, exc.exit_code
        if not as_json:
            if dry_run:  # the refused proposal, which the issues' line:col point into
                click.echo(result.diff, nl=False)
            raise
    except DtgenError as exc:  # bad arguments, unreadable spec, missing toolchain
        if not as_json:
            raise
        result, code = error_result(exc, operation, spec, dry_run, given), exc.exit_code
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2, ensure_ascii=False))
        sys.exit(code)
    _report(result)


def _words_as_given(words) -> dict:
    """['--colsep', '-1', '--rowsep=2'] -> {'colsep': '-1', 'rowsep': '2'}, untyped: what an
    argument refusal reports when the words cannot be read by the operation's schema."""
    given, words = {}, list(words)
    while words:
        word = words.pop(0)
        if not word.startswith("--"):
            given.setdefault("_unexpected", []).append(word)
            continue
        name, has_value, value = word[2:].partition("=")
        given[name.replace("-", "_")] = value if has_value else (words.pop(0) if words and not words[0].startswith("--") else None)
    return given


def _list_operations(as_json: bool) -> None:
    from ..edit.args import operations_contract, usage

    operations = operations_contract()
    if as_json:
        listed = [{"id": name, "summary": op["description"], "usage": usage(name), "args": op["args"]}
                  for name, op in operations.items()]
        click.echo(json.dumps(listed, indent=2, ensure_ascii=False))
        return
    for name, op in operations.items():
        click.echo(f"{usage(name)}\n    {op['description']}")


def _report(result) -> None:
    held = "every invariant holds" + (f" (not checked: {', '.join(result.skipped)})" if result.skipped else "")
    if result.dry_run:
        click.echo(result.diff, nl=False)
        click.echo(f"dry run: {result.file} not written ({'would change' if result.changed else 'nothing to change'}; {held})", err=True)
    elif result.written:
        click.echo(f"{result.file}: {result.operation} applied; {held}")
    else:
        click.echo(f"{result.file}: {result.operation}: nothing to change; {held}")
    for note in result.notes:
        click.echo(f"note: {note}", err=True)
