"""A run stopped with Ctrl-C: every number its figures and tables print divides by the steps
each rank completed (not the steps asked for), names the ranks whose counts stop short, and
calls it interrupted. A real run, interrupted as a terminal does (SIGINT to its group)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

pytest.importorskip("torch")

from opentikz_dt.measured.compare import summarize  # noqa: E402
from opentikz_dt.measured.run import bytes_per_step, load_run, rank_steps  # noqa: E402
from opentikz_dt.runner.metrics import WRITE_S  # noqa: E402

STEPS = 100_000
WORKERS = 3


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    folder = tmp_path_factory.mktemp("interrupted")
    spec = folder / "spec.yaml"
    spec.write_text(yaml.safe_dump({"name": "ring-int", "topology": {"workers": {"count": WORKERS}},
                                    "strategy": {"kind": "allreduce", "algorithm": "ring"},
                                    "training": {"steps": STEPS, "batch_size": 32}}), encoding="utf-8")
    out = folder / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(folder)}
    proc = subprocess.Popen([sys.executable, "-m", "opentikz_dt", "run", str(spec), "--out", str(out)], env=env,
                            start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline, stepped = time.monotonic() + 240, None
    while time.monotonic() < deadline:  # past a metrics write on every rank, then Ctrl-C
        assert proc.poll() is None, proc.communicate()
        try:
            steps = [json.loads((out / "progress" / f"rank{r}.json").read_text())["step"] for r in range(WORKERS)]
        except (OSError, ValueError, KeyError):
            steps = [-1]
        if min(steps) >= 1 and stepped is None:
            stepped = time.monotonic()
        if stepped is not None and time.monotonic() - stepped > 2.5 * WRITE_S:
            break
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == 130, err
    return load_run(out)


@pytest.mark.dist
@pytest.mark.solo
def test_an_interrupted_runs_counts_divide_by_the_steps_each_rank_completed(interrupted):
    run = interrupted
    m = run.metrics
    assert run.info["status"] == "interrupted" and run.interrupted
    assert 1 < m["steps_done"] < STEPS and m["steps"] == STEPS
    assert sorted(m["bytes"]) == list(range(WORKERS)) and m["ranks_missing"] == []  # every rank's counts kept
    per_step = bytes_per_step(m)
    # a ring rank sends the same bytes every step: per step they agree wherever each rank stopped
    sent = [per_step[r]["sent"] for r in range(WORKERS)]
    assert max(sent) / min(sent) < 1.01, (sent, m["steps_per_rank"])
    assert all(rank_steps(m, r) <= m["steps_done"] for r in range(WORKERS))
    # the table's bytes/step: the sum of the ranks' per-step bytes, not bytes / steps asked for
    assert summarize(run, None).bytes_per_step == pytest.approx(sum(sent))


@pytest.mark.dist
@pytest.mark.solo
def test_an_interrupted_runs_figures_say_how_far_it_got(interrupted, tmp_path):
    from click.testing import CliRunner

    from opentikz_dt.cli import main
    from opentikz_dt.measured.plots import _notes

    m = interrupted.metrics
    drawn = CliRunner().invoke(main, ["figure", str(interrupted.path), "--kind", "topology", "-o", str(tmp_path)])
    assert drawn.exit_code == 0, drawn.output
    (tex,) = [p.read_text(encoding="utf-8") for p in tmp_path.glob("*topology.tex")]
    done = sorted({rank_steps(m, r) for r in range(WORKERS)})
    assert f"mean of {done[-1]:,} steps" in tex or f"mean of {done[0]:,}–{done[-1]:,} steps" in tex, tex
    assert f"{STEPS:,}" not in tex
    if len(done) > 1:  # ranks stopped at different steps: the short ones are named
        assert "counts per rank up to its last completed step; partial: w" in tex
    (plot_note,) = [str(n) for n in _notes([interrupted])]
    assert plot_note.startswith(f"{interrupted.name}: interrupted after {m['steps_done']:,} of {STEPS:,} steps")
