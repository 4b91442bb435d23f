"""Specs over 64 workers: the resolved spec a run or prediction writes loads again, for
every strategy kind, and a prediction's figures draw from it."""

from __future__ import annotations

import re

import pytest
import yaml
from click.testing import CliRunner

from opentikz_dt.cli import main
from opentikz_dt.errors import SpecError
from opentikz_dt.spec import load_spec
from opentikz_dt.strategies import kinds, strategy

COUNTS = (1, 65, 1024, 4096, 16384)


def _spec_text(kind: str, count: int) -> str:
    """A spec of `kind` at `count` workers, made as feasible as the kind's rules allow:
    enough samples for the global batch, and for a pipeline as many blocks and
    microbatches as the schema takes (256 blocks, 1,024 microbatches), for tensor
    parallelism a hidden layer that splits over the workers."""
    training = {"batch_size": 1, "steps": 2, "dataset": {"samples": 1_000_000}}
    strategy_data = {"kind": kind}
    if kind == "pipeline":
        micro = min(count, 1024)
        strategy_data["microbatches"] = micro
        training.update(batch_size=micro, model={"kind": "transformer", "layers": min(count, 256)})
    if kind == "tensor":
        training["model"] = {"kind": "mlp", "layers": [8, 2 * count, 4]}
    return yaml.safe_dump({"strategy": strategy_data, "topology": {"workers": {"count": count}},
                           "training": training}, sort_keys=False)


@pytest.mark.parametrize("count", COUNTS)
@pytest.mark.parametrize("kind", kinds())
def test_resolved_spec_round_trips_at_any_worker_count(kind, count):
    text = _spec_text(kind, count)
    low, high = strategy(kind).workers
    try:
        spec = load_spec("big.yaml", text)
    except SpecError as exc:
        # refused by the kind's own rules: every line located at a key the user wrote
        lines = str(exc).splitlines()
        assert lines and all(re.match(r"big\.yaml:\d+:\d+: [a-z_.\[\]0-9]+: ", line) for line in lines), lines
        assert not any("strategy.stages" in line for line in lines), lines  # a key the spec never names
        assert "topology.workers.count" in str(exc) or "training.model.layers" in str(exc), lines
        assert count < low or (high is not None and count > high) or kind == "pipeline", lines
        return
    resolved = yaml.safe_dump(spec.data, sort_keys=False)
    again = load_spec("spec.yaml", resolved, data_files=False)  # what `dtgen figure RUN_DIR` reads
    assert again.data == spec.data
    assert again.topology.workers.count == count


def test_figure_of_a_prediction_over_64_workers(tmp_path):
    spec = tmp_path / "big.yaml"
    spec.write_text(_spec_text("allreduce", 65), encoding="utf-8")
    runner = CliRunner()
    predicted = runner.invoke(main, ["predict", str(spec), "-o", str(tmp_path / "pred")])
    assert predicted.exit_code == 0, predicted.output
    drawn = runner.invoke(main, ["figure", str(tmp_path / "pred"), "-o", str(tmp_path / "figs")])
    assert drawn.exit_code == 0, drawn.output
    assert sorted(p.name for p in (tmp_path / "figs").glob("*.tex"))
