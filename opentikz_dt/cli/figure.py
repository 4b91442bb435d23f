"""`dtgen figure` (spec -> topology and timeline figures; run directory -> measured figures) and `dtgen compare`."""

import math
from pathlib import Path

import click

from .options import WIDTH, writing


@click.command()
@click.argument("spec", type=click.Path(path_type=Path))
@click.argument("more", nargs=-1, type=click.Path(path_type=Path))
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Output folder (default: figures/<spec name>/; for a run directory RUN_DIR/figures/).")
@click.option("--kind", type=click.Choice(["topology", "timeline", "memory", "partitioning", "comm", "schedules", "all"]), default="all",
              show_default=True,
              help="Which figure: the topology diagram, the expected timeline, or both; memory: the "
                   "expected memory per rank, by category (a run directory: the measured ones; all adds "
                   "the result plots, the memory figure and the table); partitioning (specs only): the "
                   "model split vertically (pipeline) and horizontally (tensor), illustrative; schedules (pipeline "
                   "specs only): GPipe, 1F1B, interleaved 1F1B, ZB-V and DualPipeV side by side on one time axis; comm "
                   "(profiler traces only): the communication table.")
@click.option("--format", "formats", multiple=True, type=click.Choice(["tex", "pdf", "svg", "png"]),
              help="Output format; repeat for several. The .tex is always written. Default: tex.")
@click.option("--body-only", is_flag=True, help="Write the bare tikzpicture (for \\input into a paper) as the .tex.")
@click.option("--steps", default=None, metavar="FIRST:LAST",
              help="Run directories only: the steps the measured timeline shows, both included "
                   "(default: a representative window after warm-up).")
@click.option("--width", type=WIDTH, default=None, metavar="column|page|Ncm",
              help="Target width at final size (overrides figure.width in the spec): the layout adapts so "
                   "text stays legible instead of being scaled down.")
@click.option("--calibration", type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="Specs only: draw the expected timeline as predicted with this calibration (dtgen calibrate) "
                   "instead of the illustrative cost model.")
@click.option("--mesh", default=None, metavar="DIM=N,...",
              help="Profiler traces only: the device mesh, outermost first (pipeline=2,data=4,tensor=8), "
                   "to name each process group's dimension.")
def figure(spec, more, out_dir, kind, formats, body_only, steps, width, calibration, mesh):
    """Render SPEC's figures (or a run directory's measured ones, or those of PyTorch profiler
    traces: a folder or files, one per rank) as standalone TeX (and PDF/SVG/PNG)."""
    from ..measured.profile_set import looks_like_kineto, parse_mesh

    if more or looks_like_kineto(spec):
        for given, option in ((calibration is not None, "--calibration"), (kind in ("memory", "partitioning"),
                                                                             f"--kind {kind}")):
            if given:
                raise click.UsageError(f"{option} does not apply to profiler traces")
        from ..measured.profile_figures import figure_profile_command

        with writing(out_dir):
            paths = figure_profile_command([spec, *more], out_dir, kind, formats, body_only, steps, width,
                                           parse_mesh(mesh),
                                           notify=lambda line: click.echo(f"dtgen: warning: {line}", err=True))
        for path in paths:
            click.echo(f"wrote {path}")
        return
    if mesh is not None:
        raise click.UsageError("--mesh applies to profiler traces only")
    if kind == "comm":
        raise click.UsageError("--kind comm applies to profiler traces only")
    run_dir = spec.is_dir()  # a run directory: its resolved spec.yaml and trace.json (measured figures)
    # An option for the other kind of input would be silently ignored (or fail deep inside);
    # of a path that does not exist, the kind is unknown: its own error says it is missing.
    for given, option, needs in ((steps is not None and not run_dir, "--steps", "run directories"),
                                 (calibration is not None and run_dir, "--calibration", "specs"),
                                 (kind == "partitioning" and run_dir, "--kind partitioning", "specs"),
                                 (kind == "schedules" and run_dir, "--kind schedules", "specs")):
        if given and spec.exists():
            raise click.UsageError(f"{option} applies to {needs} only; {spec} is "
                                   f"{'a run directory' if run_dir else 'a spec'}")
    with writing(out_dir):
        if run_dir:
            from ..measured.figures import figure_run_command

            paths = figure_run_command(spec, out_dir, kind, formats, body_only, steps, width=width,
                                       notify=lambda line: click.echo(f"dtgen: warning: {line}", err=True))
        else:
            from ..figures.write import figure_command
            from .predict import count_python_model

            if calibration is None:  # a python model's expected timeline on a `hardware:` datasheet
                count_python_model(spec)
            paths = figure_command(spec, out_dir, kind, formats, body_only, width=width,
                                   notify=lambda line: click.echo(line, err=True), calibration=calibration)
    for path in paths:
        click.echo(f"wrote {path}")


def _finite_loss(ctx, param, loss):
    """nan is reached by no step and inf by every one: neither is a target (a negative one can
    be, for a loss that goes below 0: compare_runs checks that against the runs)."""
    if loss is not None and not math.isfinite(loss):
        raise click.BadParameter(f"{loss}: a target loss is a finite number")
    return loss


@click.command()
@click.argument("runs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("-o", "--out", "out_dir", default="compare", show_default=True, type=click.Path(path_type=Path),
              help="Folder for the plots and the table.")
@click.option("--format", "formats", multiple=True, type=click.Choice(["tex", "pdf", "svg", "png"]),
              help="Output format; repeat for several. The .tex is always written. Default: tex.")
@click.option("--loss", type=float, default=None, callback=_finite_loss,
              help="Target loss for 'time to loss' (default: the lowest loss every run reached).")
@click.option("--body-only", is_flag=True, help="Write bare pictures/tables for \\input into a paper.")
def compare(runs, out_dir, formats, loss, body_only):
    """Overlay RUN_DIRs in one set of plots and write a booktabs table of their summary metrics.

    Given a run and a prediction of it (dtgen predict), also compare them per phase, with the error."""
    from ..measured.compare import compare_runs

    with writing(out_dir):
        paths = compare_runs(list(runs), out_dir, tuple(formats) or ("tex",), loss, body_only, echo=click.echo)
    for path in paths:
        click.echo(f"wrote {path}")
