"""`dtgen export-template SPEC DIR`: the topology figure as an OpenTikZ template folder."""

from __future__ import annotations

from pathlib import Path

import click

from .options import writing


@click.command("export-template")
@click.argument("spec", type=click.Path(path_type=Path, dir_okay=False))
@click.argument("out_dir", metavar="DIR", type=click.Path(path_type=Path, file_okay=False))
def export_template(spec, out_dir):
    """Write SPEC's topology figure to DIR as an OpenTikZ template: template.tex (a \\def
    parameter block drives it), template.meta.json (OpenTikZ metadata and edit contract)
    and preview.svg, as OpenTikZ's tools/validate.py --strict expects."""
    from ..export_template import export_template as export

    with writing(out_dir):
        paths = export(spec, out_dir)
    for path in paths:
        click.echo(f"wrote {path}")
