"""`dtgen calibrate` (measure this machine, or fit a finished run) and `dtgen predict` (simulate a spec).

`calibrate` with a spec starts processes (torch, imported in the command body);
`calibrate --from RUN_DIR` and `predict` never import torch.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import click
from click.core import ParameterSource

from ..errors import ToolMissingError
from .options import WIDTH, check_writable, writing


@click.command()
@click.argument("spec", required=False, type=click.Path(path_type=Path, dir_okay=False))
@click.option("-o", "--out", type=click.Path(path_type=Path, dir_okay=False), default="calibration.json",
              show_default=True, help="Calibration file to write.")
@click.option("--from", "from_run", type=click.Path(path_type=Path, exists=True, file_okay=False),
              help="Fit from a finished run directory's trace instead of measuring.")
@click.option("--from-profile", "from_profile", type=click.Path(path_type=Path, exists=True),
              help="Fit from a user's PyTorch profiler traces (a folder or one trace per rank's folder) of the "
                   "run SPEC describes (its model and per-worker batch); see docs/profiles.md.")
@click.option("--base", type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="With --from or --from-profile: a measured calibration for what the run cannot show "
                   "(message sizes, collectives).")
@click.option("--ranks", type=click.IntRange(min=2, max=64),
              help="Processes to measure with (default: the spec's ranks); implies --probe-only. With "
                   "--device-probe: the GPUs its collectives run over (default every GPU; 2 processes on a CPU).")
@click.option("--run-steps", type=click.IntRange(min=4, max=1000), default=100, show_default=True,
              help="Steps of the short real run of SPEC that follows the probe (its untraced time per step is "
                   "heavy-tailed on shared cores: fewer steps, a noisier mean).")
@click.option("--probe-only", is_flag=True,
              help="Micro-benchmarks only, no run of SPEC (misses the runner's own per-step work).")
@click.option("--device-probe", is_flag=True,
              help="Measure this host's accelerator instead, no SPEC: its best matmul rate, memory copy rate and, "
                   "over its GPUs (or --ranks processes on a CPU), collective bus bandwidth; -o defaults to "
                   "device-probe.json. Given as "
                   "`dtgen predict --calibration` of a spec whose hardware.device is that GPU, they replace "
                   "the datasheet's (docs/planning.md).")
def calibrate(spec, out, from_run, from_profile, base, ranks, run_steps, probe_only, device_probe):
    """Measure what predictions need on this machine: micro-benchmarks (per-block compute,
    messages and collectives at several sizes, cores), then a short real run of SPEC for what
    they cannot see (the runner's untraced work, per-message framework costs, the spread),
    and, where SPEC has fewer processes than twice the cores, a short ring run with that
    many for what a message waits for a core once processes outnumber cores. SPEC runs three
    times and the median run is fitted; the crowded run is repeated for 40 steps: how far the
    runs land apart widens predictions' intervals."""
    run_steps_given = click.get_current_context().get_parameter_source("run_steps") != ParameterSource.DEFAULT
    if device_probe:
        if click.get_current_context().get_parameter_source("out") == ParameterSource.DEFAULT:
            out = Path("device-probe.json")
        _device_probe(spec, out, from_run, from_profile, base, ranks, run_steps_given, probe_only)
        return
    if from_profile is not None:
        _calibrate_from_profile(spec, out, from_run, from_profile, base, ranks, run_steps_given, probe_only)
        return
    _check_calibrate_options(spec, from_run, base, ranks, run_steps_given, probe_only)
    if from_run is not None:
        from ..predict.calibration import load_calibration
        from ..predict.fit import fit_from_run

        cal = fit_from_run(from_run, load_calibration(base) if base else None)
        with writing(out):
            click.echo(f"wrote {cal.save(out)} (fitted from {from_run})")
        return
    check_writable(out)
    if importlib.util.find_spec("torch") is None:
        raise ToolMissingError("dtgen calibrate needs PyTorch to measure (or use --from RUN_DIR)")
    from ..runner.calibrate import calibrate as measure
    from ..spec import load_spec, spec_from_data

    loaded = load_spec(spec) if spec is not None else spec_from_data({"strategy": {"kind": "parameter-server"}})
    steps = 0 if probe_only or ranks else run_steps
    with writing(out):
        click.echo(f"wrote {measure(loaded, out, ranks, steps, spec, lambda line: click.echo(line, err=True))}")


def _device_probe(spec, out, from_run, from_profile, base, ranks, run_steps_given, probe_only) -> None:
    """calibrate --device-probe: this host's accelerator, no spec (runner/device_probe.py)."""
    others = [name for name, given in (("SPEC", spec is not None), ("--from", from_run is not None),
                                       ("--from-profile", from_profile is not None), ("--base", base is not None),
                                       ("--probe-only", probe_only), ("--run-steps", run_steps_given)) if given]
    if others:
        raise click.UsageError(f"--device-probe cannot be combined with {' or '.join(others)}: it measures this "
                               "host's accelerator, not a spec's run")
    check_writable(out)
    if importlib.util.find_spec("torch") is None:
        raise ToolMissingError("dtgen calibrate --device-probe needs PyTorch to measure")
    from ..runner.device_probe import probe

    with writing(out):
        click.echo(f"wrote {probe(out, ranks, lambda line: click.echo(line, err=True))}")


def _calibrate_from_profile(spec, out, from_run, from_profile, base, ranks, run_steps_given, probe_only) -> None:
    """calibrate --from-profile DIR SPEC: SPEC says the model and batch the traces ran."""
    others = [name for name, given in (("--from", from_run is not None), ("--probe-only", probe_only),
                                       ("--ranks", ranks is not None), ("--run-steps", run_steps_given)) if given]
    if others:
        raise click.UsageError(f"--from-profile cannot be combined with {' or '.join(others)}: it fits the "
                               "profiled run, not this machine")
    if spec is None:
        raise click.UsageError("--from-profile needs SPEC: the spec of the profiled run (its model and per-worker "
                               "batch; a trace records neither)")
    from ..predict.calibration import load_calibration
    from ..predict.profile_fit import fit_from_profile
    from ..spec import load_spec

    check_writable(out)
    cal, warnings = fit_from_profile([from_profile], load_spec(spec), load_calibration(base) if base else None)
    for line in warnings:
        click.echo(f"dtgen: warning: {line}", err=True)
    with writing(out):
        click.echo(f"wrote {cal.save(out)} (fitted from the profile {from_profile})")


def _check_calibrate_options(spec, from_run, base, ranks, run_steps_given: bool, probe_only: bool) -> None:
    """calibrate either measures (SPEC, --probe-only, --ranks, --run-steps) or fits a run
    (--from, --base): an option of the other way would be silently ignored, so it is a usage error."""
    if from_run is not None:
        measuring = [name for name, given in (("SPEC", spec is not None), ("--probe-only", probe_only),
                                              ("--ranks", ranks is not None), ("--run-steps", run_steps_given))
                     if given]
        if measuring:
            raise click.UsageError(f"--from cannot be combined with {' or '.join(measuring)}: --from fits a "
                                   "finished run (its own spec and ranks); those are for measuring this machine")
    elif base is not None:
        raise click.UsageError("--base applies only with --from RUN_DIR: it is the measured calibration a fit of "
                               "a run starts from")
    elif run_steps_given and (probe_only or ranks is not None):
        raise click.UsageError(f"--run-steps cannot be combined with {'--probe-only' if probe_only else '--ranks'}: "
                               "there is no run of SPEC then (--ranks implies --probe-only)")


@click.command()
@click.argument("spec", required=False, type=click.Path(path_type=Path, dir_okay=False))
@click.option("--calibration", type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="Calibration file (dtgen calibrate); without it, the illustrative cost model, or the "
                   "datasheets of the spec's hardware: block (with it, a calibration made on that GPU "
                   "sets the compute).")
@click.option("--workers", type=click.IntRange(min=1), help="Override topology.workers.count.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override any spec value (repeatable).")
@click.option("--steps", type=click.IntRange(min=2), help="Override training.steps.")
@click.option("-o", "--out", type=click.Path(path_type=Path, file_okay=False),
              help="Predicted run directory (default runs/<name>-predicted); a sweep's figure folder.")
@click.option("--sweep", metavar="workers=2,4,...|shapes",
              help="Predict at each worker count and write a scaling figure (workers=2,4,...,1024: '...' goes "
                   "on multiplying by the ratio of the two counts before it); or `shapes`: every layout of the "
                   "worker count (--workers, else the spec's) the strategy can take (a mesh: pipeline x data x "
                   "tensor degrees), with step time and memory per worker per shape.")
@click.option("--link", metavar="10gbit|PRESET",
              help="Link bandwidth between workers instead of the calibrated one, or a preset (--list-presets).")
@click.option("--device", metavar="PRESET",
              help="Predict for this device (--list-presets): needs a calibration made on it; its link is the default.")
@click.option("--list-presets", is_flag=True, help="List the --link and --device presets with their sources, and exit.")
@click.option("--latency-ms", type=click.FloatRange(min=0), help="Message latency instead of the calibrated one.")
@click.option("--dedicated", is_flag=True,
              help="Every rank on its own core (a cluster), not sharing this machine's. Sweeps always "
                   "assume this: 1,024 ranks cannot meaningfully share a few cores.")
@click.option("--format", "formats", multiple=True, type=click.Choice(["tex", "pdf", "svg", "png"]),
              help="Sweep figure formats (repeatable; the .tex is always written).")
@click.option("--width", type=WIDTH, default=None, metavar="column|page|Ncm",
              help="--sweep shapes: the figure's width at final size (default column).")
def predict(spec, calibration, workers, sets, steps, out, sweep, link, device, list_presets, latency_ms, dedicated,
            formats, width):
    """Simulate SPEC's schedule and write a predicted run directory (trace.json, metrics.json)."""
    if list_presets:
        from ..predict.datasheet import efficiency_lines
        from ..predict.presets import presets_table

        click.echo(presets_table())
        click.echo("\n".join(efficiency_lines()))
        return
    if spec is None:
        raise click.UsageError("Missing argument 'SPEC'.")
    shapes = (sweep or "").strip() == "shapes"
    if width is not None and not shapes:
        raise click.UsageError("--width applies to --sweep shapes (the scaling figure has one layout)")
    if sweep is not None and not shapes and workers is not None:
        raise click.UsageError("--workers applies to one prediction or --sweep shapes; "
                               "--sweep workers=... lists the counts")
    if sweep is not None:
        from ..predict.predict import ILLUSTRATIVE_WARNING
        from ..predict.shapes import shapes_command
        from ..predict.sweep import sweep_command

        with writing(out):
            if shapes:
                paths = shapes_command(spec, calibration, sets, steps, out, link, latency_ms,
                                       tuple(formats) or ("tex",), workers, width, echo=click.echo, device=device)
            else:
                paths = sweep_command(spec, sweep, calibration, sets, steps, out, link, latency_ms, dedicated,
                                      tuple(formats) or ("tex",), echo=click.echo, device=device)
        # warned once it predicted, as one prediction warns: a bad --sweep, --link or --set
        # found on the way is then the only message
        if calibration is None and not _datasheet(spec, device, link):
            click.echo(f"dtgen: warning: {ILLUSTRATIVE_WARNING}", err=True)
        for path in paths:
            click.echo(f"wrote {path}")
        return
    from ..predict.predict import predict as run_prediction

    if calibration is None and device is None and link is None:
        count_python_model(spec, sets, workers)
    with writing(out):
        path, warnings = run_prediction(spec, out, calibration, sets, workers, steps, link, latency_ms, dedicated,
                                        device)
    for line in warnings:
        click.echo(f"dtgen: warning: {line}", err=True)
    from ..predict.summary import prediction_summary

    click.echo(prediction_summary(path))  # the answer, as `dtgen run` ends with its summary
    click.echo(f"wrote {path}")


def count_python_model(spec_path, sets: tuple = (), workers: int | None = None) -> None:
    """A python model predicted from the spec's `hardware:` datasheet: built once on the CPU
    and one trial step counted (runner/describe.py, torch.utils.flop_counter), so the
    datasheet costs know its FLOPs. Without torch the datasheet path says what it lacks; a
    spec that does not load is left to the command's own message."""
    from ..errors import DtgenError
    from ..predict.predict import apply_overrides
    from ..spec import load_spec

    try:
        loaded = apply_overrides(load_spec(spec_path), sets, workers)
    except DtgenError:
        return
    if loaded.hardware is None or loaded.training.model_kind != "python" or importlib.util.find_spec("torch") is None:
        return
    from ..runner.describe import count_python_model as count

    count(loaded, spec_path)


def _datasheet(spec, device, link) -> bool:
    """Whether the prediction came from the spec's `hardware:` datasheet (not illustrative)."""
    if device is not None or link is not None:
        return False
    from ..spec import load_spec

    return load_spec(spec).hardware is not None
