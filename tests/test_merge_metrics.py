"""runner/merge.py's throughput window, on the per-rank metrics of a real run.

tests/data/async-slow-first-step: async parameter server, 3 workers + 1 server, 5 steps
(15 tickets), 4 ranks sharing one H200 (`make gpu-check`, 2026-11-26). w3's first step
took 3.8 s (CUDA warm-up) and served ticket 0, so ticket 0 ended after every other one;
the window used to open at ticket 0's end, came out negative, and the run reported
"throughput 0 samples/s" although w1 and w2 had made 12 updates.
"""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import REPO

DATA = REPO / "tests" / "data" / "async-slow-first-step"
ROLES = [("worker", "w1"), ("worker", "w2"), ("worker", "w3"), ("server", "ps")]


@pytest.fixture
def run_dir(tmp_path):
    shutil.copytree(DATA / "metrics", tmp_path / "metrics")
    return tmp_path


def test_async_window_opens_at_the_first_step_to_end_in_time(run_dir):
    from opentikz_dt.runner.merge import merge_metrics

    metrics = merge_metrics(run_dir, ROLES, steps=5)
    ranks = [json.loads((DATA / "metrics" / f"rank{r}.json").read_text()) for r in range(3)]
    # Each global step ends when its last ticket ends; the window runs from the earliest
    # such end to the latest, and counts every sample after each worker's own first step.
    ends = {}
    for m in ranks:
        for own, t in m["step_end"].items():
            g = m["global_step"][own]
            ends[g] = max(ends.get(g, t), t)
    steady_samples = sum(m["samples"] * (len(m["step_end"]) - 1) / len(m["step_end"]) for m in ranks)
    assert steady_samples == 12 * 256  # w1 and w2: 7 updates each, the first left out; w3: one
    expected = steady_samples / (max(ends.values()) - min(ends.values()))
    assert metrics["samples_per_s"] == pytest.approx(expected, rel=1e-4)
    assert metrics["samples_per_s"] > 0
    assert metrics["steps_per_worker"] == {"w1": 7, "w2": 7, "w3": 1}
    assert 0 < metrics["warmup_s"] < 4
