"""A calibration made on one strategy and size predicts another: what it carries is said
(run.json `predicted.transfer`, the figures' notes, the command's warnings), never hidden."""

from __future__ import annotations

import json

import yaml
from click.testing import CliRunner

from opentikz_dt.cli import main
from opentikz_dt.measured.run import load_run
from opentikz_dt.measured.source import prediction_note
from opentikz_dt.predict.fit import fit_from_run
from opentikz_dt.predict.synthetic import spec_data, write_synthetic_run


def spec_file(tmp_path, kind, workers):
    path = tmp_path / f"{kind}-{workers}.yaml"
    path.write_text(yaml.safe_dump(spec_data(kind, workers=workers, steps=10)))
    return path


def test_a_fit_records_what_it_was_made_on(tmp_path):
    run = write_synthetic_run(tmp_path / "run", "allreduce-ring", workers=3, steps=10)
    made = fit_from_run(run).data["made_for"]
    assert made["strategy"]["algorithm"] == "ring" and made["workers"] == 3 and made["ranks"] == 3


def test_another_strategy_or_size_says_what_it_carries(tmp_path):
    cal = tmp_path / "ring.json"
    fit_from_run(write_synthetic_run(tmp_path / "run", "allreduce-ring", workers=3, steps=10)).save(cal)
    runner = CliRunner()
    # the calibrated spec itself: nothing carried, run.json as before
    result = runner.invoke(main, ["predict", str(spec_file(tmp_path, "allreduce-ring", 3)), "--calibration",
                                  str(cal), "-o", str(tmp_path / "same")])
    assert result.exit_code == 0, result.output
    assert "transfer" not in json.loads((tmp_path / "same" / "run.json").read_text())["predicted"]
    # a parameter server at another size: both said, in run.json, the warnings and the figures' note
    result = runner.invoke(main, ["predict", str(spec_file(tmp_path, "ps-sync", 4)), "--calibration", str(cal),
                                  "-o", str(tmp_path / "ps")])
    assert result.exit_code == 0, result.output
    transfer = json.loads((tmp_path / "ps" / "run.json").read_text())["predicted"]["transfer"]
    assert transfer[0].startswith("calibrated on allreduce ring: its message latency and untraced time per step "
                                  "are carried to parameter-server sync")
    assert transfer[1].startswith("calibrated with 3 processes on") and "predicted with 5" in transfer[1]
    assert "calibrated on allreduce ring" in result.output
    note = prediction_note(load_run(tmp_path / "ps"))
    assert "calibrated on allreduce ring; calibrated with 3 processes" in note
    # a sweep assumes a core per rank: only the strategy is carried, and its caption says so
    result = runner.invoke(main, ["predict", str(spec_file(tmp_path, "ps-sync", 4)), "--calibration", str(cal),
                                  "--sweep", "workers=2,4", "-o", str(tmp_path / "sweep")])
    assert result.exit_code == 0, result.output
    tex = (tmp_path / "sweep" / "predicted-scaling.tex").read_text()
    assert "calibrated on allreduce ring" in tex and "processes on" not in tex
