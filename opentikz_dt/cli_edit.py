"""`dtgen edit` (owned by the edit-contract work; placeholder until then)."""

import click

from .errors import DtgenError


@click.command()
@click.argument("spec")
def edit(spec):
    """Apply one edit-contract operation (in progress)."""
    raise DtgenError("dtgen edit is not built yet")
