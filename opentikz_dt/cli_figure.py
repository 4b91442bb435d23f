"""`dtgen figure` and `dtgen compare` (owned by the figures work; placeholder until then)."""

import click

from .errors import DtgenError


@click.command()
@click.argument("target")
def figure(target):
    """Render figures (in progress)."""
    raise DtgenError("dtgen figure is not built yet")


@click.command()
@click.argument("runs", nargs=-1)
def compare(runs):
    """Compare runs (in progress)."""
    raise DtgenError("dtgen compare is not built yet")
