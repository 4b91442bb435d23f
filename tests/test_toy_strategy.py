"""A strategy from outside dtgen, added by following CONTRIBUTING.md ("Add a strategy")
alone: tests/plugins/dtgen_toy has one module per side (strategy, figures, predict,
runner) and nothing in dtgen names it. With DTGEN_PLUGINS=dtgen_toy, `strategy.kind: toy`
validates (its own key in the schema, checked), draws a topology and a timeline, runs
on one rank (its own train loop, reading its own key) and predicts."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import REPO

pytestmark = pytest.mark.slow

SPEC = """name: toy
strategy: {kind: toy, toy_factor: %s}
training: {model: {kind: mlp, layers: [8, 16, 4]}, batch_size: 16, steps: 3, optimizer: {kind: sgd, lr: %s, momentum: 0}}
"""


def dtgen(*args, cwd, plugins="dtgen_toy"):
    env = dict(os.environ, DTGEN_PLUGINS=plugins,
               PYTHONPATH=os.pathsep.join([str(REPO / "tests" / "plugins"), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "opentikz_dt", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def test_toy_validates_draws_runs_and_predicts(tmp_path):
    (tmp_path / "toy.yaml").write_text(SPEC % (2.0, 0.05))
    checked = dtgen("validate", "toy.yaml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stderr
    drawn = dtgen("figure", "toy.yaml", "--out", "fig", cwd=tmp_path)
    assert drawn.returncode == 0, drawn.stderr
    topology, timeline = (tmp_path / "fig" / "toy-topology.tex").read_text(), (tmp_path / "fig" / "toy-timeline.tex").read_text()
    assert "Toy training" in topology  # the descriptor's title
    # its predict plugin's simulation, drawn as every expected timeline (illustrative, relative units)
    assert "expected: toy, step" in timeline and "illustrative cost model" in timeline
    ran = dtgen("run", "toy.yaml", "--out", "run", cwd=tmp_path)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["world_size"] == 1 and run["status"] == "ok"
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert len(metrics["loss"]) == 3
    measured = dtgen("figure", "run", "--kind", "timeline", cwd=tmp_path)
    assert measured.returncode == 0, measured.stderr
    assert list((tmp_path / "run" / "figures").glob("measured-*-timeline.tex"))
    predicted = dtgen("predict", "toy.yaml", "--out", "pred", cwd=tmp_path)
    assert predicted.returncode == 0, predicted.stderr
    assert json.loads((tmp_path / "pred" / "metrics.json").read_text())["samples_per_s"] > 0

    # Its runner really ran the shared loop with its own key: toy_factor 2 at lr 0.05 is
    # `single` at lr 0.1, parameter for parameter.
    torch = pytest.importorskip("torch")
    (tmp_path / "single.yaml").write_text((SPEC % (1.0, 0.1)).replace("kind: toy, toy_factor: 1.0", "kind: single")
                                          .replace("name: toy", "name: single"))
    reference = dtgen("run", "single.yaml", "--out", "single", cwd=tmp_path)
    assert reference.returncode == 0, reference.stderr
    ours, theirs = (torch.load(tmp_path / d / "model.pt") for d in ("run", "single"))
    assert ours.keys() == theirs.keys()
    for name in ours:
        torch.testing.assert_close(ours[name], theirs[name], rtol=0, atol=1e-6)


def test_toy_keys_are_checked_and_bad_plugins_named(tmp_path):
    (tmp_path / "toy.yaml").write_text(SPEC % (0, 0.05))
    refused = dtgen("validate", "toy.yaml", cwd=tmp_path)
    assert refused.returncode == 1 and "toy_factor" in refused.stdout + refused.stderr
    assert "Traceback" not in refused.stderr
    missing = dtgen("validate", "toy.yaml", cwd=tmp_path, plugins="no_such_dtgen_plugin")
    assert missing.returncode == 1 and "no_such_dtgen_plugin" in missing.stderr and "Traceback" not in missing.stderr
    # Without the plugin the kind is unknown, as any other typo would be.
    (tmp_path / "ok.yaml").write_text(SPEC % (2.0, 0.05))
    unknown = dtgen("validate", "ok.yaml", cwd=tmp_path, plugins="")
    assert unknown.returncode == 1 and "toy" in unknown.stdout + unknown.stderr
