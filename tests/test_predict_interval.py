"""A prediction's interval: written in metrics.json, checked by `dtgen compare`, drawn as a
band by sweeps; made only of what was measured (simulator sampling, the calibration run's drift)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from opentikz_dt.cli import main
from opentikz_dt.measured.run import load_run
from opentikz_dt.predict.compare import Row, format_rows, phase_rows
from opentikz_dt.predict.calibration import illustrative_calibration
from opentikz_dt.predict.fit import block_ratios, fit_from_run, repeat_ratio
from opentikz_dt.predict.synthetic import write_synthetic_run
from opentikz_dt.spec import load_spec

SPEC = "examples/allreduce-ring.yaml"


def noisy_cal(tmp_path, blocks=None, repeats=None):
    """The illustrative costs with a measured-looking spread (and, given, a calibration run's
    drift and its repeated runs' ratios)."""
    data = json.loads(json.dumps(illustrative_calibration(load_spec(SPEC)).data))
    data["source"] = "probe"
    data["noise"] = {"compute_ratios": [0.8, 0.9, 1.0, 1.1, 1.6], "overhead_s": [0.0, 1e-4, 2e-3]}
    if blocks:
        data["noise"]["block_ratios"] = blocks
    if repeats:
        data["noise"]["repeats"] = [{"run": f"r{i}", "processes": 4, "ratio": r} for i, r in enumerate(repeats)]
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(data))
    return path


def predicted_metrics(tmp_path, cal, name="p", extra=()):
    args = ["predict", SPEC, "--steps", "20", "-o", str(tmp_path / name), *extra] + (
        ["--calibration", str(cal)] if cal else [])
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    return json.loads((tmp_path / name / "metrics.json").read_text())


def test_a_prediction_writes_its_interval_around_its_value(tmp_path):
    m = predicted_metrics(tmp_path, noisy_cal(tmp_path))
    step = sum(m["step_time_s"].values()) / len(m["step_time_s"])
    low, high = m["step_time_interval_s"]
    assert low <= round(step, 6) <= high and high > low          # seeds of the spread differ
    rlow, rhigh = m["samples_per_s_interval"]
    assert rlow <= m["samples_per_s"] <= rhigh
    assert m["interval_sources"] == ["5 simulator seeds"]
    # the calibration run's drift widens it by its ratios, no more
    w = predicted_metrics(tmp_path, noisy_cal(tmp_path, [0.9, 1.0, 1.2]), "q")
    assert w["step_time_interval_s"] == pytest.approx([low * 0.9, high * 1.2], abs=2e-6)
    assert "10% below to 20% above" in w["interval_sources"][1]


def test_the_calibrations_repeated_runs_widen_it_on_both_sides(tmp_path):
    m = predicted_metrics(tmp_path, noisy_cal(tmp_path, [0.95, 1.0, 1.05]))
    low, high = m["step_time_interval_s"]
    # a repeat 20% slower than its run: the next run may land 20% either way; the larger
    # ratio of two repeats (0.8 -> 1.25 apart) is the one carried, past the drift's 5%
    w = predicted_metrics(tmp_path, noisy_cal(tmp_path, [0.95, 1.0, 1.05], [1.2]), "q")
    assert w["step_time_interval_s"] == pytest.approx([low / 0.95 / 1.2, high / 1.05 * 1.2], abs=2e-6)
    assert w["interval_sources"][-1] == "the calibration's repeated run, up to 20% apart"
    v = predicted_metrics(tmp_path, noisy_cal(tmp_path, [0.95, 1.0, 1.05], [1.1, 0.8]), "r")
    assert v["step_time_interval_s"] == pytest.approx([low / 0.95 * 0.8, high / 1.05 * 1.25], abs=2e-6)
    assert v["interval_sources"][-1] == "the calibration's repeated runs, up to 25% apart"
    # a drift wider than the repeats stays
    u = predicted_metrics(tmp_path, noisy_cal(tmp_path, [0.7, 1.0, 1.05], [1.1]), "s")
    assert u["step_time_interval_s"] == pytest.approx([low / 0.95 * 0.7, high / 1.05 * 1.1], abs=2e-6)


@pytest.mark.parametrize("repeats, key", [("x", "noise.repeats: expected a list"),
                                          ([1.1], "noise.repeats.0: expected"),
                                          ([{"run": "r", "processes": 2}], "noise.repeats.0.ratio: missing"),
                                          ([{"run": "r", "processes": 2, "ratio": 0}], "noise.repeats.0.ratio: 0")])
def test_a_bad_repeat_in_a_calibration_is_named(tmp_path, repeats, key):
    path = noisy_cal(tmp_path)
    data = json.loads(path.read_text())
    data["noise"]["repeats"] = repeats
    path.write_text(json.dumps(data))
    result = CliRunner().invoke(main, ["predict", SPEC, "--calibration", str(path), "-o", str(tmp_path / "p")])
    assert result.exit_code == 1 and key in result.output and "Traceback" not in result.output, result.output
    assert not (tmp_path / "p").exists()


def probed_cal(tmp_path, rounds):
    """noisy_cal whose collectives the probe measured, in `rounds` ([alpha_s, beta_s_per_byte])."""
    path = noisy_cal(tmp_path)
    data = json.loads(path.read_text())
    for kind in ("allreduce", "broadcast", "reduce"):
        data["comm"][kind].update({"measured": "probe", "rounds": rounds})
    path.write_text(json.dumps(data))
    return path


def test_the_probes_fastest_and_slowest_rounds_widen_a_strategy_that_uses_its_collectives(tmp_path):
    # the illustrative costs' collectives: 300 us a step; the rounds 50 (fastest) to 900 us
    rounds = [[3e-4, 1e-8], [0.5e-4, 1e-8], [9e-4, 1e-8]]
    native = ["--set", "strategy.algorithm=native"]
    plain = predicted_metrics(tmp_path, noisy_cal(tmp_path), "plain", native)
    m = predicted_metrics(tmp_path, probed_cal(tmp_path, rounds), "rounds", native)
    assert m["step_time_s"] == plain["step_time_s"]  # the point: the fit, not a round
    (low, high), (plow, phigh) = m["step_time_interval_s"], plain["step_time_interval_s"]
    point = sum(plain["step_time_s"].values()) / 4
    # 4 ranks: 6 steps of the all-reduce a step, each 250 us faster and 600 us slower
    assert low < plow and low == pytest.approx(point - 6 * 250e-6, rel=0.01)
    assert high > phigh and high == pytest.approx(point + 6 * 600e-6, rel=0.01)
    assert m["interval_sources"][-1] == "the probe's collectives at their fastest and slowest of 3 rounds"
    # dtgen's ring uses no collective the probe measured: no wider, and not said
    ring = predicted_metrics(tmp_path, probed_cal(tmp_path, rounds), "ring")
    assert ring["step_time_interval_s"] == predicted_metrics(tmp_path, noisy_cal(tmp_path), "ring0")["step_time_interval_s"]
    assert not any("probe" in s for s in ring["interval_sources"])


@pytest.mark.parametrize("rounds, key", [("x", "comm.allreduce.rounds: expected a list"),
                                         ([[1e-4]], "comm.allreduce.rounds: expected a list"),
                                         ([[1e-4, -1.0]], "comm.allreduce.rounds.0.1: -1.0 is less than 0")])
def test_a_bad_probe_round_in_a_calibration_is_named(tmp_path, rounds, key):
    path = probed_cal(tmp_path, rounds)
    result = CliRunner().invoke(main, ["predict", SPEC, "--calibration", str(path), "-o", str(tmp_path / "p")])
    assert result.exit_code == 1 and key in result.output and "Traceback" not in result.output, result.output
    assert not (tmp_path / "p").exists()


def test_a_repeat_ratio_is_the_repeats_mean_step_over_the_runs():
    # wall_s: seconds at each step's end; the first step (start-up) is left out
    run = [1.0] + [1.0 + 0.01 * i for i in range(1, 6)]       # 1 s, then 5 steps of 10 ms
    repeat = [2.0] + [2.0 + 0.012 * i for i in range(1, 4)]   # 2 s, then 3 steps of 12 ms
    assert repeat_ratio(run, repeat) == pytest.approx(1.2, abs=1e-4)
    assert repeat_ratio(run, repeat[:3]) is None              # 2 steady steps: too short to tell


def test_without_a_spread_the_interval_is_the_point_and_says_so(tmp_path):
    m = predicted_metrics(tmp_path, None)
    step = round(sum(m["step_time_s"].values()) / len(m["step_time_s"]), 6)
    assert m["step_time_interval_s"][0] == m["step_time_interval_s"][1] == pytest.approx(step, abs=2e-6)
    assert m["interval_sources"] == []


def test_block_ratios_are_the_runs_own_repeat():
    wall = [1.0] + [1.0 + 0.01 * i for i in range(1, 10)] + [1.09 + 0.02 * i for i in range(1, 4)]
    # 12 steps: 9 of 10 ms then 3 of 20 ms -> blocks of 4: 10, 10, 17.5 ms
    ratios = block_ratios(wall)
    assert ratios == pytest.approx([10 / 12.5, 10 / 12.5, 17.5 / 12.5], abs=1e-3)
    assert block_ratios(wall[:6]) == []                     # too short to cut into blocks


def test_a_fit_records_the_block_ratios(tmp_path):
    run = write_synthetic_run(tmp_path / "run", "allreduce-ring", workers=3, steps=14)
    cal = fit_from_run(run)
    assert len(cal.data["noise"]["block_ratios"]) == 3


def test_compare_says_whether_the_measured_value_is_in_the_interval(tmp_path):
    row = Row("step time", 10.0, 9.0, "ms", (8.0, 11.0))
    assert row.inside is True and Row("step time", 12.0, 9.0, "ms", (8.0, 11.0)).inside is False
    assert Row("step time", 12.0, 9.0, "ms").inside is None
    text = format_rows([row, Row("samples/s", 100.0, 80.0, "1/s", (70.0, 90.0))], "m", "p")
    assert "8.000-11.000 in" in text and "70-90 OUT" in text
    measured = write_synthetic_run(tmp_path / "run", "allreduce-ring", workers=4, steps=20)
    pred = tmp_path / "pred"
    assert CliRunner().invoke(main, ["predict", str(measured / "spec.yaml"), "--calibration",
                                     str(noisy_cal(tmp_path)), "-o", str(pred)]).exit_code == 0
    rows = phase_rows(load_run(measured), load_run(pred))
    assert rows[0].interval is not None and rows[1].interval is not None and rows[2].interval is None
    result = CliRunner().invoke(main, ["compare", str(measured), str(pred), "-o", str(tmp_path / "c")])
    assert result.exit_code == 0, result.output
    table = (tmp_path / "c" / "compare-phases.tex").read_text()
    assert "Interval (measured in?)" in table and "Interval from 5 simulator seeds" in table
    assert "\\dimen0=\\wd0" in table and "p{\\dimen0}" in table  # the notes wrap at the table's width, however many sources there are
    assert (" in " in table) or ("textbf{out}" in table)


def test_a_sweep_draws_the_band_only_where_there_is_one(tmp_path):
    args = ["predict", SPEC, "--sweep", "workers=2,4,8", "--steps", "10"]
    result = CliRunner().invoke(main, args + ["--calibration", str(noisy_cal(tmp_path, [0.9, 1.0, 1.1])),
                                              "-o", str(tmp_path / "a")])
    assert result.exit_code == 0, result.output
    tex = (tmp_path / "a" / "predicted-scaling.tex").read_text()
    assert tex.count("-- cycle") == 2 and "fill=otblue, fill opacity" in tex
    assert "predicted interval" in tex  # the legend entry; what it holds, in the notes (wrapped)
    assert "band: the predicted interval, from 3 simulator seeds; the calibration run" in tex
    assert "10\\% below" in tex and "textbackslash" not in tex  # escaped once
    result = CliRunner().invoke(main, args + ["-o", str(tmp_path / "b")])  # illustrative: no spread, no band
    tex = (tmp_path / "b" / "predicted-scaling.tex").read_text()
    assert "-- cycle" not in tex and "predicted interval" not in tex


def test_a_sweep_beyond_ten_seconds_of_simulation_is_refused_before_it_starts(tmp_path):
    import time

    started = time.perf_counter()
    result = CliRunner().invoke(main, ["predict", SPEC, "--sweep", "workers=1024,2048,4096", "--steps", "400",
                                       "-o", str(tmp_path / "s")])
    error = [line for line in result.output.splitlines() if line.startswith("dtgen: error")]
    assert result.exit_code == 1 and len(error) == 1, result.output
    assert "2,867,200 simulated rank-steps" in result.output and "about 10 s of simulation" in result.output
    assert time.perf_counter() - started < 10 and not (tmp_path / "s").exists()


def test_a_sweeps_bound_counts_the_probes_rounds(tmp_path):
    # 1,024 and 2,048 workers x 150 steps: 460,800 rank-steps for one simulation of each, x3 with the
    # spread's seeds (1,382,400, within the bound); with the probe's two ends, x5: refused
    args = ["predict", SPEC, "--sweep", "workers=1024,2048", "--steps", "150", "-o"]
    rounds = [[3e-4, 1e-8], [1.5e-4, 1e-8], [9e-4, 1e-8]]
    refused = CliRunner().invoke(main, args + [str(tmp_path / "r"), "--calibration", str(probed_cal(tmp_path, rounds))])
    assert refused.exit_code == 1 and "2,304,000 simulated rank-steps" in refused.output, refused.output
    assert not (tmp_path / "r").exists()
    from opentikz_dt.predict.sweep import MAX_SWEEP_RANK_STEPS

    assert 3 * 460_800 <= MAX_SWEEP_RANK_STEPS < 5 * 460_800  # what the case above stands on
