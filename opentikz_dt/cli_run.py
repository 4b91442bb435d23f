"""`dtgen run` (owned by the runner work; placeholder until then)."""

import click

from .errors import DtgenError


@click.command()
@click.argument("spec")
def run(spec):
    """Launch a real torch.distributed run (in progress)."""
    raise DtgenError("dtgen run is not built yet")
