"""`dtgen run`: launch a real torch.distributed run of a spec.

Thin: parses options and calls opentikz_dt.runner.launch.launch_run. torch is imported
only inside the command body, so `dtgen --help` and the other commands stay fast.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import click

from ..errors import ToolMissingError, UsageError
from .options import writing


@click.command()
@click.argument("spec", type=click.Path(path_type=Path, dir_okay=False))
@click.option("-o", "--out", type=click.Path(path_type=Path, file_okay=False),
              help="Run directory (default runs/<name>-<timestamp>/).")
@click.option("--steps", type=click.IntRange(min=1), help="Override training.steps.")
@click.option("--nnodes", type=click.IntRange(min=1), default=1, show_default=True, help="Number of nodes (machines).")
@click.option("--node-rank", type=click.IntRange(min=0), default=0, show_default=True, help="This node's rank (0..nnodes-1).")
@click.option("--rdzv-endpoint", metavar="HOST:PORT", help="c10d rendezvous endpoint, the same on every node.")
@click.option("--rdzv-timeout", type=click.FloatRange(min=1), default=120, show_default=True,
              help="Seconds to wait for the rendezvous endpoint and for every node to join.")
@click.option("--emit", type=click.Choice(["slurm", "torchrun"]),
              help="Print a launch script for that engine (with these options) instead of running.")
@click.option("--force", is_flag=True, help="Reuse a non-empty run directory (its previous run outputs are removed), and run a spec whose "
                   "expected memory is over its hardware device's capacity.")
@click.option("--repeat", type=click.IntRange(min=1), default=1, show_default=True,
              help="Run the spec N times, one after another, into OUT/r1..rN; `dtgen compare OUT` then shows their "
                   "mean and min-max. Not with --emit (run the emitted script again instead).")
def run(spec, out, steps, nnodes, node_rank, rdzv_endpoint, rdzv_timeout, emit, force, repeat):
    """Run SPEC with one process per rank (gloo on CPU, NCCL on GPUs); write trace and metrics."""
    if emit:
        from ..runner.emit import emit_script

        click.echo(emit_script(emit, spec, out=out, steps=steps, nnodes=nnodes, rdzv_endpoint=rdzv_endpoint,
                               rdzv_timeout=rdzv_timeout, force=force, repeat=repeat), nl=False)
        return
    if importlib.util.find_spec("torch") is None:
        raise ToolMissingError("dtgen run needs PyTorch, which is not installed: pip install 'dtgen[run]' "
                         "(for the CPU build: pip install torch==2.13.0 first)")
    if repeat > 1:
        if nnodes > 1:
            raise UsageError("--repeat runs on one node; repeat a multi-node run by launching it again")
        from ..runner.repeat import launch_repeats

        with writing(out):
            launch_repeats(spec, repeat, out=out, steps=steps, force=force,
                           echo=lambda line: click.echo(line, err=True))
        return
    from ..runner.launch import launch_run

    with writing(out):
        launch_run(spec, out=out, steps=steps, nnodes=nnodes, node_rank=node_rank, rdzv_endpoint=rdzv_endpoint,
                   rdzv_timeout=rdzv_timeout, force=force, echo=lambda line: click.echo(line, err=True))
