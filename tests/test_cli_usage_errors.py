"""Bad command lines and outputs that cannot be written, as a user types them: one message,
the `dtgen: error:` line last, the exit code of errors.py's table, no traceback, nothing written.

Codes: a bad option value, a path given as an option's value that does not exist or is the
wrong kind, or options that cannot combine are usage (2); a SPEC or run directory given as
an argument that cannot be used, and an output that cannot be written, are invalid input (1).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from opentikz_dt.cli import main
from opentikz_dt.errors import RunError, UsageError, error_text

REPO = Path(__file__).resolve().parent.parent
SPEC = REPO / "examples" / "ps-sync.yaml"
ILLUSTRATIVE = "no --calibration"


def dtgen(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def error_line(result, code: int) -> str:
    """The last stderr line, once the shape every error has is checked."""
    # CliRunner catches an uncaught exception (a traceback for a user) into result.exception
    assert not isinstance(result.exception, Exception), repr(result.exception)
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    last = result.stderr.splitlines()[-1]
    assert last.startswith("dtgen: error: "), result.stderr
    return last


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A predicted run directory: a run directory for figure, compare and calibrate --from."""
    out = tmp_path_factory.mktemp("cli-usage") / "pred"
    result = dtgen("predict", SPEC, "-o", out)
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def calibration(run_dir):
    path = run_dir.parent / "cal.json"
    result = dtgen("calibrate", "--from", run_dir, "-o", path)
    assert result.exit_code == 0, result.output
    return path


# ------------------------------------------------------------ outputs that cannot be written

def _commands(run_dir, target):
    return {"init": ["init", "--strategy", "gossip", target],
            "calibrate --from": ["calibrate", "--from", run_dir, "-o", target],
            "calibrate SPEC": ["calibrate", SPEC, "-o", target],  # before minutes of measuring
            "predict": ["predict", SPEC, "-o", target],
            "figure": ["figure", SPEC, "-o", target],
            "figure RUN_DIR": ["figure", run_dir, "-o", target],
            "compare": ["compare", run_dir, "-o", target],
            "export-template": ["export-template", SPEC, target],
            "run": ["run", SPEC, "-o", target]}


@pytest.mark.parametrize("command", ["init", "calibrate --from", "calibrate SPEC", "predict", "figure",
                                     "figure RUN_DIR", "compare", pytest.param("export-template", marks=pytest.mark.latex),
                                     "run"])
def test_an_output_under_a_file_is_one_line_naming_it(tmp_path, run_dir, command):
    blocker = tmp_path / "afile"
    blocker.write_text("mine\n")
    target = blocker / "sub" / "out.x"
    result = dtgen(*_commands(run_dir, target)[command])
    # exit 1, as `dtgen edit` on a spec it cannot write and `dtgen init` on one that exists
    assert error_line(result, 1) == f"dtgen: error: {target}: cannot write: {blocker} is a file, not a folder"
    assert blocker.read_text() == "mine\n" and list(tmp_path.iterdir()) == [blocker]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc takes no new files on Linux")
@pytest.mark.parametrize("args", [["init"], ["calibrate", "--from", "RUN"]])
def test_an_output_in_a_folder_that_takes_no_files_is_one_line(run_dir, args):
    # the folder exists, so only the write itself (of a temporary file beside the target) fails
    target = Path("/proc") / "dtgen-cannot-write.json"
    args = [run_dir if a == "RUN" else a for a in args]
    result = dtgen(*args, *(["-o"] if args[0] == "calibrate" else []), target)
    assert error_line(result, 1).startswith(f"dtgen: error: {target}: cannot write: ")
    assert ".tmp" not in result.stderr


def test_a_default_output_folder_that_cannot_be_made_is_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("figures").write_text("a file where figure's default folder goes\n")
    result = dtgen("figure", SPEC)
    assert error_line(result, 1).startswith("dtgen: error: figures")


# ------------------------------------------------------------ calibrate: options that cannot combine

@pytest.mark.parametrize("args, named", [
    (["SPEC", "--from", "RUN"], "--from cannot be combined with SPEC:"),
    (["--probe-only", "--from", "RUN"], "--from cannot be combined with --probe-only:"),
    (["SPEC", "--probe-only", "--from", "RUN"], "--from cannot be combined with SPEC or --probe-only:"),
    (["--ranks", "2", "--from", "RUN"], "--from cannot be combined with --ranks:"),
    (["--run-steps", "10", "--from", "RUN"], "--from cannot be combined with --run-steps:"),
    (["SPEC", "--base", "CAL"], "--base applies only with --from RUN_DIR"),
    (["SPEC", "--probe-only", "--run-steps", "10"], "--run-steps cannot be combined with --probe-only:"),
    (["SPEC", "--ranks", "2", "--run-steps", "10"], "--run-steps cannot be combined with --ranks:"),
])
def test_calibrate_options_that_cannot_combine_are_usage(tmp_path, run_dir, calibration, args, named):
    values = {"SPEC": SPEC, "RUN": run_dir, "CAL": calibration}
    out = tmp_path / "c.json"
    result = dtgen("calibrate", *[values.get(a, a) for a in args], "-o", out)
    assert error_line(result, 2).startswith(f"dtgen: error: {named}")
    assert not out.exists()


# ------------------------------------------------------------ a bad option value is usage (2) everywhere

@pytest.mark.parametrize("args", [
    ["figure", "SPEC", "--width", "3furlongs"],
    ["figure", "RUN", "--width", "3furlongs"],
    ["predict", "SPEC", "--sweep", "shapes", "--width", "3furlongs"],
    ["edit", "SPEC", "set-size", "--fit", "3furlongs", "--dry-run"],
])
def test_a_bad_width_is_usage_from_every_command(tmp_path, run_dir, args):
    output = ["-o", tmp_path / "o"] if args[0] != "edit" else []  # edit writes SPEC (--dry-run: not even that)
    result = dtgen(*[{"SPEC": SPEC, "RUN": run_dir}.get(a, a) for a in args], *output)
    assert "3furlongs" in error_line(result, 2)
    assert ILLUSTRATIVE not in result.stderr  # nothing predicted, nothing to warn of
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("args, named", [
    (["calibrate", "--from", "MISSING"], "'--from'"),
    (["calibrate", "--from", "SPEC"], "'--from'"),  # a file, not a run directory
    (["calibrate", "--from", "RUN", "--base", "MISSING"], "'--base'"),
    (["predict", "SPEC", "--calibration", "MISSING"], "'--calibration'"),
    (["figure", "SPEC", "--calibration", "MISSING"], "'--calibration'"),
    (["edit", "SPEC", "--ops", "MISSING"], "'--ops'"),
])
def test_an_option_naming_a_missing_or_wrong_path_is_usage(tmp_path, run_dir, args, named):
    values = {"SPEC": SPEC, "RUN": run_dir, "MISSING": tmp_path / "nodir" / "nope"}
    result = dtgen(*[values.get(a, a) for a in args], *(["-o", tmp_path / "o"] if args[0] != "edit" else []))
    assert named in error_line(result, 2)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("command", [["validate"], ["figure"], ["run"], ["predict"], ["calibrate"],
                                     ["export-template", "OUT"], ["edit", "add-worker"]])
def test_a_missing_spec_argument_is_invalid_input_from_every_command(tmp_path, command):
    missing = tmp_path / "nope.yaml"
    args = [command[0], missing, *(tmp_path / a if a == "OUT" else a for a in command[1:])]
    result = dtgen(*args)
    assert error_line(result, 1) == "dtgen: error: 1 problem(s) in 1 file(s)"
    assert result.stderr == f"{missing}:1:1: no such file\ndtgen: error: 1 problem(s) in 1 file(s)\n"


def test_clicks_own_usage_errors_end_in_the_same_line(tmp_path):
    result = dtgen("figure", SPEC, "--kind", "everything", "-o", tmp_path / "o")
    assert error_line(result, 2).startswith("dtgen: error: Invalid value for '--kind': 'everything'")
    assert not (tmp_path / "o").exists()


# ------------------------------------------------------------ the dtgen: error: line comes last

def test_edit_of_a_spec_with_a_typo_lists_the_problems_then_the_error(tmp_path):
    path = tmp_path / "typo.yaml"
    path.write_text("strategy: {kind: allreduce, algoritm: ring}\n")
    result = dtgen("edit", path, "add-worker")
    assert error_line(result, 1) == (f"dtgen: error: {path}: add-worker refused: the spec has problems before "
                                     "the edit; fix them first (dtgen validate)")
    assert result.stderr.splitlines()[:-1] == [
        f"{path}:1:29: strategy.algoritm: unknown key 'algoritm'; did you mean 'algorithm'?"]
    assert path.read_text() == "strategy: {kind: allreduce, algoritm: ring}\n"


def test_an_override_that_makes_an_invalid_spec_names_it_then_the_error(tmp_path):
    result = dtgen("predict", SPEC, "--set", "training.steps=0", "-o", tmp_path / "p")
    assert error_line(result, 2) == "dtgen: error: the overrides make an invalid spec"
    assert result.stderr == (f"{SPEC} (with --set training.steps=0):1:1: training.steps: 0 is less than the "
                             "minimum of 1\ndtgen: error: the overrides make an invalid spec\n")
    assert not (tmp_path / "p").exists()


def test_a_failed_runs_log_and_folder_come_before_the_error_line():
    # the message launch_run raises for a crashed rank (tests/test_runner.py has the real one)
    message = ("rank 2 (worker w3) crashed at step 3: InjectedFault: injected crash\n"
               "log: /r/logs/rank2.log\nrun directory: /r (partial trace kept)")
    assert error_text(RunError(message)).splitlines() == [
        "log: /r/logs/rank2.log", "run directory: /r (partial trace kept)",
        "dtgen: error: rank 2 (worker w3) crashed at step 3: InjectedFault: injected crash"]
    assert error_text(UsageError("one line")) == "dtgen: error: one line"


@pytest.mark.dist
def test_a_crashed_run_ends_with_the_error_line(tmp_path):
    from opentikz_dt.runner.testing import small_spec_data, write_spec

    data = small_spec_data("allreduce", name="crashes", topology={"workers": {"count": 2}}, training={"steps": 4},
                           runtime={"fault": {"rank": 1, "at_step": 2, "kind": "crash"}})
    out = tmp_path / "run"
    result = dtgen("run", write_spec(data, tmp_path), "-o", out)
    last = error_line(result, 3)
    assert last.startswith("dtgen: error: rank 1 (worker w2) crashed at step 2: InjectedFault")
    assert result.stderr.splitlines()[-3:-1] == [f"log: {out.resolve()}/logs/rank1.log",
                                                 f"run directory: {out} (partial trace kept)"]


# ------------------------------------------------------------ predict warns only when it predicts

@pytest.mark.parametrize("args", [["--sweep", "workers=2,4", "--workers", "4"], ["--sweep", "workers=two"],
                                  ["--sweep", "shapes", "--link", "fast"], ["--sweep", "workers=2,3", "--link", "fast"]])
def test_a_sweeps_usage_error_comes_without_the_calibration_warning(tmp_path, args):
    result = dtgen("predict", SPEC, *args, "-o", tmp_path / "s")
    error_line(result, 2)
    assert ILLUSTRATIVE not in result.stderr
    assert not (tmp_path / "s").exists()


def test_a_sweep_without_calibration_still_warns(tmp_path):
    result = dtgen("predict", SPEC, "--sweep", "workers=2,3", "--steps", "4", "-o", tmp_path / "s")
    assert result.exit_code == 0, result.output
    assert result.stderr.count(ILLUSTRATIVE) == 1


# ------------------------------------------------------------ compare --loss

def _with_losses(source: Path, folder: Path, losses: list) -> Path:
    copy = shutil.copytree(source, folder)
    metrics = json.loads((copy / "metrics.json").read_text())
    metrics["loss"] = losses[:len(metrics["wall_s"])]
    (copy / "metrics.json").write_text(json.dumps(metrics))
    return copy


@pytest.mark.parametrize("value, why", [("-1", "no run's loss goes below 0"), ("nan", "a finite number"),
                                        ("inf", "a finite number")])
def test_compare_refuses_a_target_loss_no_run_can_reach(tmp_path, run_dir, value, why):
    run = _with_losses(run_dir, tmp_path / "a", [2.0 * 0.95 ** i for i in range(64)])
    result = dtgen("compare", run, run_dir, "--loss", value, "-o", tmp_path / "c")
    last = error_line(result, 2)
    assert last.startswith("dtgen: error: ") and "--loss" in last and why in last, last
    assert not (tmp_path / "c").exists()


def test_compare_takes_a_negative_target_when_the_loss_goes_negative(tmp_path, run_dir):
    # a python training.model.loss may go below 0 (the default target allows it too)
    run = _with_losses(run_dir, tmp_path / "a", [-0.1 * i for i in range(64)])
    result = dtgen("compare", run, "--loss", "-1", "-o", tmp_path / "c")
    assert result.exit_code == 0, result.output
    assert "Time to loss $\\leq$ -1" in (tmp_path / "c" / "compare-table.tex").read_text()


# ------------------------------------------------------------ figure: options for one kind of input

@pytest.mark.parametrize("args, needs", [
    (["SPEC", "--steps", "10:14"], "--steps applies to run directories only"),
    (["RUN", "--calibration", "CAL"], "--calibration applies to specs only"),
    (["RUN", "--kind", "partitioning"], "--kind partitioning applies to specs only"),
])
def test_figure_options_for_the_other_kind_of_input_are_usage(tmp_path, run_dir, calibration, args, needs):
    values = {"SPEC": SPEC, "RUN": run_dir, "CAL": calibration}
    result = dtgen("figure", *[values.get(a, a) for a in args], "-o", tmp_path / "f")
    assert error_line(result, 2).startswith(f"dtgen: error: {needs}")
    assert not (tmp_path / "f").exists()
