"""`dtgen run --repeat N`: the same spec run N times into RUN/r1..rN, then the spread.

The same spec differs run to run on a shared machine (up to about 20%:
benchmarks/results/predict-accuracy_cpu2core_2026-11.md), so one
run says little; the repeat folder is what `dtgen compare` reads as one row (mean and
min--max, opentikz_dt.measured.repeats)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from ..errors import RunError


def repeat_folder(spec_name: str, out) -> Path:
    if out is not None:
        return Path(out)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    base, n = Path("runs") / f"{spec_name}-{stamp}", 1
    while base.exists():
        n += 1
        base = Path("runs") / f"{spec_name}-{stamp}-{n}"
    return base


def launch_repeats(spec_path, repeat: int, out=None, force: bool = False, echo=None, **kwargs) -> list:
    """Run the spec `repeat` times (one after another: concurrent runs would share the cores
    and measure each other); return the RunResults; a failed repeat stops the series."""
    from ..spec import load_spec
    from .launch import launch_run

    base = repeat_folder(load_spec(spec_path).name, out)
    if base.exists() and not force and any(base.iterdir()):
        raise RunError(f"{base}: directory exists and is not empty (use --force to overwrite)")
    results = []
    for index in range(1, repeat + 1):
        if echo is not None:
            echo(f"dtgen run: repeat {index} of {repeat} -> {base / f'r{index}'}")
        results.append(launch_run(spec_path, out=base / f"r{index}", force=force, echo=echo, **kwargs))
    if echo is not None:
        echo(spread_line(results, base))
    return results


def spread_line(results: list, base: Path) -> str:
    from ..lossfacts import final_loss

    rates = [r.metrics["samples_per_s"] for r in results]
    finals = [f for r in results if (f := final_loss(r.metrics["loss"])) is not None]
    text = (f"{len(results)} repeats: samples/s mean {sum(rates) / len(rates):,.0f} "
            f"(min {min(rates):,.0f}, max {max(rates):,.0f})")
    if finals:
        text += f"; final loss mean {sum(finals) / len(finals):.4f} (min {min(finals):.4f}, max {max(finals):.4f})"
    return text + f"\nrepeat folder: {base} (dtgen compare {base} draws them as one series with error bars)"


def run_again(spec_path, run_dir: Path, out: Path, steps: int) -> float | None:
    """Run a spec again for `steps` steps into `out` (as `dtgen calibrate` makes its runs:
    every step traced, no fault) and return its mean step over that of the run in `run_dir`
    (predict/fit.repeat_ratio), or None where either is too short to tell.

    `dtgen calibrate` repeats its crowded run this way (and runs the spec itself three
    times, runner/calibrate.py): the same spec run twice here lands up to
    43% apart (benchmarks/results/predict-transfer_cpu2core_2026-11.md), because the processes' placement on the
    cores and the machine's load persist through a run and change between runs, so the
    steps of one run (noise.block_ratios) do not show it (predict/interval.py)."""
    import json

    from ..predict.fit import repeat_ratio
    from .launch import launch_run

    launch_run(spec_path, out=out, steps=steps, echo=lambda line: None, progress=False, measure_only=True)
    walls = [json.loads((d / "metrics.json").read_text(encoding="utf-8")).get("wall_s") or [] for d in (run_dir, out)]
    return repeat_ratio(*walls)
