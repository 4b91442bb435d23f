"""A number in exponent form (1e3, 3e-4) that YAML 1.1 reads as text is taken as the number
the user meant where the key's type is a number, with a note; elsewhere it stays text."""

from __future__ import annotations

import warnings

import pytest
import yaml
from click.testing import CliRunner

from opentikz_dt.cli import main
from opentikz_dt.errors import SpecNote
from opentikz_dt.schema import yaml_number_text
from opentikz_dt.spec import load_spec


@pytest.mark.parametrize("text", ["1e3", "3e-4", "1.5e3", "2E+10", "-1e-9", ".5e3"])
def test_the_hinted_spelling_is_a_number_to_yaml(text):
    assert isinstance(yaml.safe_load(text), str)  # the reason for all of this
    assert yaml.safe_load(yaml_number_text(text)) == float(text)


def test_spec_takes_exponent_numbers_with_a_note():
    text = "strategy: {kind: allreduce}\ntraining: {steps: 1e2, optimizer: {lr: 3e-4}}\nfigure: {labels: {time_axis: 1e3}}\n"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        spec = load_spec("exp.yaml", text)
    assert spec.training.lr == 3e-4 and spec.training.steps == 100 and isinstance(spec.data["training"]["steps"], int)
    assert spec.figure.labels["time_axis"] == "1e3"  # a text key keeps its text
    notes = [str(w.message) for w in caught if issubclass(w.category, SpecNote)]
    assert notes == [
        "exp.yaml:2:19: training.steps: read '1e2' as the number 100 (YAML reads 1e2 as text; it reads 1.0e+2 as a number)",
        "exp.yaml:2:40: training.optimizer.lr: read '3e-4' as the number 0.0003 (YAML reads 3e-4 as text; it reads "
        "3.0e-4 as a number)"]


def test_validate_prints_the_note_as_a_warning(tmp_path):
    spec = tmp_path / "exp.yaml"
    spec.write_text("strategy: {kind: allreduce}\ntraining: {optimizer: {lr: 3e-4}}\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["validate", str(spec)])
    assert result.exit_code == 0, result.output
    assert f"dtgen: warning: {spec}:2:28: training.optimizer.lr: read '3e-4' as the number 0.0003" in result.output
    assert f"{spec}: ok" in result.output


def test_edit_set_writes_the_number_yaml_reads(tmp_path):
    spec = tmp_path / "exp.yaml"
    spec.write_text("strategy: {kind: allreduce}\n", encoding="utf-8")
    runner = CliRunner()
    for key, value in (("training.optimizer.lr", "3e-4"), ("training.steps", "1e3")):
        result = runner.invoke(main, ["edit", str(spec), "set", "--key", key, "--value", value, "--no-compile"])
        assert result.exit_code == 0, result.output
        assert f"note: {key}: read {value} as the number" in result.output
    text = spec.read_text(encoding="utf-8")
    assert "lr: 3.0e-4" in text and "steps: 1000" in text
    assert yaml.safe_load(text)["training"] == {"optimizer": {"lr": 3e-4}, "steps": 1000}
