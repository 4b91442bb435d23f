"""validate / contract / init from the command line, as a user types them."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from opentikz_dt.cli import main
from opentikz_dt.resources import schemas_dir
from opentikz_dt.spec import load_spec, spec_from_data
from opentikz_dt.strategies import kinds

CASES = Path(__file__).parent / "cases"


def run_cli(*args):
    return CliRunner().invoke(main, list(args))


def test_validate_reports_all_files_at_once():
    bad = [CASES / "bad" / "unknown-keys.yaml", CASES / "bad" / "misspelt-value.yaml"]
    result = run_cli("validate", *map(str, bad), str(CASES / "good" / "minimal-allreduce.yaml"))
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert lines[-1] == "dtgen: error: 4 problem(s) in 2 file(s); the cross-field rules and invariants run once these are fixed"
    assert any("did you mean 'algorithm'" in line for line in lines)
    assert any("did you mean 'async'" in line for line in lines)


def test_validate_ok_prints_each_file():
    good = CASES / "good" / "minimal-allreduce.yaml"
    result = run_cli("validate", str(good))
    assert result.exit_code == 0
    assert result.output == f"{good}: ok\n"


def test_missing_file_and_directory(tmp_path):
    result = run_cli("validate", str(tmp_path / "nope.yaml"), str(tmp_path))
    assert result.exit_code == 1
    assert f"{tmp_path / 'nope.yaml'}:1:1: no such file" in result.output
    assert f"{tmp_path}:1:1: is a directory, not a spec file" in result.output


def test_debug_shows_traceback_only_when_asked(tmp_path):
    target = tmp_path / "exists.yaml"
    target.write_text("x: 1\n")
    plain = subprocess.run([sys.executable, "-m", "opentikz_dt", "init", str(target)], capture_output=True, text=True)
    assert plain.returncode == 1  # invalid input (errors.py's table), not click's usage code 2
    assert plain.stderr == f"dtgen: error: {target} exists; use --force to overwrite it\n"
    debug = subprocess.run([sys.executable, "-m", "opentikz_dt", "--debug", "init", str(target)], capture_output=True, text=True)
    assert debug.returncode != 0 and "Traceback" in debug.stderr


def test_init_offers_every_strategy():
    """The starters the tests below check are the ones `dtgen init --help` lists."""
    help_text = " ".join(run_cli("init", "--help").output.split())
    assert f"--strategy [{'|'.join(kinds())}]" in help_text


@pytest.mark.parametrize("kind", kinds())
def test_init_writes_a_valid_commented_spec(tmp_path, kind):
    target = tmp_path / "spec.yaml"
    result = run_cli("init", "--strategy", kind, str(target))
    assert result.exit_code == 0, result.output
    text = target.read_text()
    first = text.splitlines()[0]
    # The schema's $id, not a file:// path of the checkout the spec was made in.
    schema = json.loads((schemas_dir() / "spec.schema.json").read_text())
    assert first == f"# yaml-language-server: $schema={schema['$id']}"
    assert "file://" not in text and str(schemas_dir()) not in text
    assert load_spec(target).strategy.kind == kind


@pytest.mark.parametrize("kind", kinds())
def test_init_values_are_the_defaults_it_says_they_are(kind):
    """'the values shown are the defaults': the starter resolves to what the bare kind resolves to
    (its name and title aside, which are the user's to choose)."""
    starter = load_spec("starter.yaml", text=run_cli("init", "--strategy", kind).output).data
    bare = spec_from_data({"strategy": {"kind": kind}}).data
    for data in (starter, bare):
        data.pop("name"), data.pop("title")
    assert starter == bare


def _listed_values():
    """(kind, strategy key) -> every value a spec of that kind may give the key, for the keys
    whose starter comment lists their values."""
    from opentikz_dt.strategies import strategy
    from opentikz_dt.strategies.mesh.strategy import DATA_METHODS

    return {("allreduce", "algorithm"): strategy("allreduce").algorithms,
            ("parameter-server", "sync"): strategy("parameter-server").sync_modes,
            ("pipeline", "schedule"): ("gpipe", "1f1b"),
            ("mesh", "data_parallel"): DATA_METHODS}


@pytest.mark.parametrize("kind, key", list(_listed_values()))
def test_init_shows_the_default_and_lists_every_value(kind, key):
    """mesh's starter once showed `data_parallel: fsdp  # ... allreduce | fsdp`: not the default
    (allreduce), and without ring and tree."""
    line = next(line for line in run_cli("init", "--strategy", kind).output.splitlines()
                if line.startswith(f"  {key}:"))
    value, _, comment = line.split(":", 1)[1].partition("#")
    assert value.strip() == spec_from_data({"strategy": {"kind": kind}}).data["strategy"][key], line
    assert [v for v in _listed_values()[(kind, key)] if not re.search(rf"(?<![\w-]){re.escape(v)}(?![\w-])", comment)] == []


@pytest.mark.parametrize("kind", kinds())
def test_init_starter_draws_without_a_warning(tmp_path, kind):
    """A fresh starter validates, and `dtgen figure` on it warns about nothing (the tensor starter's
    colsep 4.6 once drew at 5.07 cm with 'figure.colsep 4.6 cm is too tight' on stderr)."""
    target = tmp_path / "starter.yaml"
    assert run_cli("init", "--strategy", kind, str(target)).exit_code == 0
    validated = run_cli("validate", str(target))
    assert (validated.exit_code, validated.output) == (0, f"{target}: ok\n")
    drawn = run_cli("figure", str(target), "-o", str(tmp_path / "fig"))
    assert drawn.exit_code == 0, drawn.output
    assert drawn.stderr == ""
    assert sorted(p.name for p in (tmp_path / "fig").iterdir()) == ["starter-timeline.tex", "starter-topology.tex"]


def test_init_names_the_spec_after_its_file(tmp_path):
    assert run_cli("init", str(tmp_path / "Exp 2.yaml")).exit_code == 0
    assert load_spec(tmp_path / "Exp 2.yaml").name == "exp-2"
    assert "\nname: my-parameter-server " in run_cli("init").output  # to stdout: no file to name it after


def test_a_default_gap_is_widened_silently_and_a_written_one_with_a_warning(tmp_path):
    """The default colsep (4.6) is too tight for a native all-reduce's bar and its labels: dtgen
    widens it without a word (the user asked for nothing), but says so for a colsep the spec sets."""
    for name, figure, warned in (("unset", "", False), ("written", "figure: {colsep: 4.6}\n", True)):
        spec = tmp_path / f"{name}.yaml"
        spec.write_text("strategy: {kind: tensor}\n" + figure)
        result = run_cli("figure", str(spec), "-o", str(tmp_path), "--kind", "topology")
        assert result.exit_code == 0, result.output
        warning = f"{spec}: figure.colsep 4.6 cm is too tight for these labels and icons: dtgen draws it at 5.07 cm"
        assert warning in result.stderr if warned else result.stderr == ""
        assert "% figure.colsep 4.6 cm is too tight" in (tmp_path / f"{name}-topology.tex").read_text()


def test_init_makes_the_missing_folders_as_the_other_outputs_do(tmp_path):
    # calibrate -o and predict -o make theirs; init tracebacked on its temporary file
    target = tmp_path / "new" / "deeper" / "spec.yaml"
    result = run_cli("init", "--strategy", "gossip", str(target))
    assert result.exit_code == 0, result.output
    assert result.output == f"wrote {target}\n"
    assert load_spec(target).strategy.kind == "gossip"
    assert sorted(p.name for p in target.parent.iterdir()) == ["spec.yaml"]  # no temporary file left


def test_init_to_stdout_and_refuses_overwrite(tmp_path):
    result = run_cli("init", "--strategy", "gossip")
    assert "kind: gossip" in result.output
    target = tmp_path / "spec.yaml"
    target.write_text("keep me\n")
    result = run_cli("init", str(target))
    assert result.exit_code == 1
    assert target.read_text() == "keep me\n"


def test_contract_prints_meta_json():
    result = run_cli("contract")
    assert result.exit_code == 0
    shown = json.loads(result.output)
    meta, executable = shown["meta.json"], shown["contract.exec.json"]
    contract = meta["edit_contract"]
    assert meta["type"] == "template"
    assert {"parameters", "node_naming", "styles", "operations", "invariants"} <= set(contract)
    assert {"rename-node", "add-worker", "change-spacing", "swap-icon", "recolor"} <= {op["id"] for op in contract["operations"]}
    for param in contract["parameters"]:
        assert executable["parameters"][param["name"]]["path"], param
    for line in contract["invariants"]:
        assert executable["invariants"][line.split(":")[0]]["check"], line


def test_validate_says_when_the_rules_wait_for_the_schema(tmp_path):
    """Schema problems first; the cross-field rules need valid values, and the summary says
    they have not run yet, so a clean second run is no surprise (then only the rule's problem)."""
    spec = tmp_path / "s.yaml"
    spec.write_text("strategy: {kind: allreduce, sync: async}\ntraining: {optimizer: {kind: sgd, lr: fast}}\n")
    first = run_cli("validate", str(spec))
    assert first.exit_code == 1 and "training.optimizer.lr: expected a number" in first.output
    assert "strategy.sync" not in first.output
    assert first.output.splitlines()[-1] == ("dtgen: error: 1 problem(s) in 1 file(s); the cross-field rules and "
                                             "invariants run once these are fixed")
    spec.write_text("strategy: {kind: allreduce, sync: async}\ntraining: {optimizer: {kind: sgd, lr: 1.0e-3}}\n")
    second = run_cli("validate", str(spec))
    assert second.exit_code == 1 and "strategy.sync: async updates need a parameter server" in second.output
    assert second.output.splitlines()[-1] == "dtgen: error: 1 problem(s) in 1 file(s)"

@pytest.mark.parametrize("command", [["figure"], ["run"], ["validate"]])
def test_bad_spec_stops_every_command_with_the_located_message_and_writes_nothing(tmp_path, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    bad = CASES / "bad" / "misspelt-value.yaml"
    result = run_cli(*command, str(bad))
    assert result.exit_code == 1  # the same code from every command
    assert result.output.splitlines()[-1] == "dtgen: error: 1 problem(s) in 1 file(s); the cross-field rules and invariants run once these are fixed"
    assert f"{bad}:3:9: strategy.sync: 'asnyc' is not one of 'sync', 'async'; did you mean 'async'?" in result.output
    assert "Traceback" not in result.output
    assert list(tmp_path.iterdir()) == []  # no runs/ or figures/ half-written


@pytest.mark.parametrize("command", [["figure"], ["run"], ["validate"], ["predict"]])
def test_missing_spec_is_one_located_line(tmp_path, command):
    missing = tmp_path / "nope.yaml"
    result = run_cli(*command, str(missing))
    assert result.exit_code == 1  # invalid input, from every command alike
    assert result.output == f"{missing}:1:1: no such file\ndtgen: error: 1 problem(s) in 1 file(s)\n"


def test_run_takes_dash_o_like_every_other_command(tmp_path):
    # figure, compare, calibrate and predict all take -o; run took only --out.
    result = CliRunner().invoke(main, ["run", "examples/ps-sync.yaml", "-o", str(tmp_path / "r"), "--emit", "torchrun"])
    assert result.exit_code == 0, result.output
    assert f"--out {tmp_path / 'r'}" in result.output
