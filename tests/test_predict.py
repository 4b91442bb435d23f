"""Predicted timelines: closed forms, calibration checks, sweeps, bad input (no torch, fast)."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from opentikz_dt.cli import main
from opentikz_dt.errors import DtgenError
from opentikz_dt.measured.run import load_run
from opentikz_dt.measured.timeline import pipeline_bubble
from opentikz_dt.predict.calibration import Calibration, CalibrationError, illustrative_calibration, load_calibration
from opentikz_dt.predict.costs import Costs, parse_link
from opentikz_dt.predict.fit import fit_from_run
from opentikz_dt.predict.predict import apply_overrides, check_size
from opentikz_dt.predict.rundir import write_run_dir
from opentikz_dt.predict.simulate import simulate
from opentikz_dt.predict.synthetic import write_synthetic_run
from opentikz_dt.memory import expected_memory
from opentikz_dt.spec import load_spec, spec_from_data


def spec_of(strategy: dict, workers: int = 4, layers=(32, 128, 128, 10), **topology) -> object:
    return spec_from_data({"strategy": strategy, "topology": {"workers": {"count": workers}, **topology},
                           "training": {"model": {"layers": list(layers)}, "steps": 10}})


def comm_only(spec, alpha: float, beta: float, compute_s: float = 0.0) -> Calibration:
    """A calibration with messages alpha + bytes*beta and (nearly) free compute."""
    cal = illustrative_calibration(spec)
    for block in cal.data["compute"]["blocks"]:
        block["forward"] = [compute_s, 0.0]
        block["backward"] = [2 * compute_s, 0.0]
    cal.data["compute"]["optimizer"] = [0.0, 0.0]
    cal.data["compute"]["add_per_param_s"] = 0.0
    for v in cal.data["comm"].values():
        v.update(alpha_s=alpha, beta_s_per_byte=beta)
    return cal


# ---------------------------------------------------------------- closed forms


@pytest.mark.parametrize("n", [2, 3, 8])
def test_ring_allreduce_matches_the_closed_form(n):
    spec = spec_of({"kind": "allreduce", "algorithm": "ring"}, workers=n)
    alpha, beta = 2e-4, 1e-8
    result = simulate(spec, Costs(comm_only(spec, alpha, beta), spec), steps=4)
    size = 4 * sum(a * b + b for a, b in zip(spec.training.layers, spec.training.layers[1:]))
    closed = 2 * (n - 1) / n * size * beta + 2 * (n - 1) * alpha
    per_rank_step = result.phases["allreduce"] / (n * 4) / 1e6
    assert per_rank_step == pytest.approx(closed, rel=1e-6)


@pytest.mark.parametrize("n, children", [(2, 1), (3, 2), (5, 2), (8, 2)])
def test_tree_allreduce_matches_the_closed_form(n, children):
    """Reduce up, broadcast down, one chunk (the model is far under TREE_CHUNK): each of the
    floor(log2 n) levels of the heap (its deepest leaf's depth: 3 ranks are a root and two
    leaves, one hop each way) a message whose bytes the parent's children share its link
    with (a 2-rank tree's root has one child: a ring fit once predicted tree(2) 42-53% slow).
    With free compute a step is the collective: the deepest leaf ends it."""
    spec = spec_of({"kind": "allreduce", "algorithm": "tree"}, workers=n)
    alpha, beta = 2e-4, 1e-8
    result = simulate(spec, Costs(comm_only(spec, alpha, beta), spec), steps=4)
    size = 4 * sum(a * b + b for a, b in zip(spec.training.layers, spec.training.layers[1:]))
    levels = int(math.log2(n))
    closed = 2 * levels * (alpha + children * size * beta)
    step = max(result.step_done[w][-1] - result.step_done[w][-2] for w in result.step_done) / 1e6
    assert step == pytest.approx(closed, rel=1e-6)


@pytest.mark.parametrize("n", [3, 4, 7])
def test_tree_ranks_wait_where_the_tree_puts_them_and_leave_when_done(n):
    """Each rank's spans of the tree cover it from its ready time to its end, waits drawn as
    `wait`: a leaf sends up at once and leaves when its parent's chunk arrives, a parent adds
    once its children's chunk arrived and passes the broadcast on after its own parent did,
    and the deepest leaf ends the collective, the root's reduce the up pass."""
    spec = spec_of({"kind": "allreduce", "algorithm": "tree"}, workers=n)
    alpha = 2e-4
    result = simulate(spec, Costs(comm_only(spec, alpha, 0.0), spec), steps=3)
    hop = 1e6 * alpha
    spans = {k: sorted((e for e in result.events[k] if e.get("ph") == "X" and e["args"]["step"] == 2
                        and e["name"] in ("allreduce", "wait")), key=lambda e: e["ts"]) for k in range(n)}
    start = max(spans[k][0]["ts"] for k in range(n))  # the last rank ready: the collective starts
    levels = int(math.log2(n))

    def ends(k, name, phase):
        return [e["ts"] + e["dur"] for e in spans[k] if e["name"] == name and e["args"]["phase"] == phase]

    for k in range(n):
        for a, b in zip(spans[k], spans[k][1:]):
            assert a["ts"] + a["dur"] == pytest.approx(b["ts"], abs=2e-3)  # one after another, no gap
        depth, leaf = int(math.log2(k + 1)), 2 * k + 1 >= n
        done = spans[k][-1]["ts"] + spans[k][-1]["dur"]
        assert done == pytest.approx(start + (levels + depth + (0 if leaf else 1)) * hop, abs=1e-2)
        if leaf:  # sent up at the start, received its parent's chunk, left
            assert ends(k, "allreduce", "reduce") == pytest.approx([start + hop], abs=1e-2)
            assert spans[k][-1]["name"] == "wait"
        else:  # passed the broadcast on to its children: one hop after it had it
            assert spans[k][-1]["name"] == "allreduce" and spans[k][-1]["args"]["phase"] == "broadcast"
            assert spans[k][-1]["dur"] == pytest.approx(hop, abs=1e-2)
    assert ends(0, "wait", "reduce") == pytest.approx([start + levels * hop], abs=1e-2)  # the root: all of the up pass
    deepest = max(spans[k][-1]["ts"] + spans[k][-1]["dur"] for k in range(n))
    assert deepest == pytest.approx(start + 2 * levels * hop, abs=1e-2)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("stages,micro", [(3, 4), (3, 8)])
def test_pipeline_bubble_matches_the_closed_form(tmp_path, schedule, stages, micro):
    spec = spec_from_data({"strategy": {"kind": "pipeline", "schedule": schedule, "microbatches": micro},
                           "topology": {"workers": {"count": stages}},
                           "training": {"model": {"layers": [64, 64, 64, 64]}, "batch_size": 64, "steps": 4}})
    result = simulate(spec, Costs(comm_only(spec, 0.0, 0.0, compute_s=1e-3), spec), steps=4)
    events = [e for evs in result.events.values() for e in evs if e.get("ph") == "X"]
    assert pipeline_bubble(events) == pytest.approx((stages - 1) / (micro + stages - 1), rel=1e-6)


def test_sync_ps_runs_at_the_slowest_worker_and_async_does_not():
    slow = {"w3": 3.0}
    sync = spec_of({"kind": "parameter-server", "sync": "sync"}, workers=3, servers={"count": 1})
    sync = apply_overrides(sync, ("topology.workers.slowdown={w3: 3.0}",))
    cal = comm_only(sync, 1e-5, 0.0, compute_s=1e-3)
    result = simulate(sync, Costs(cal, sync), steps=6)
    times = {w: sum(v[1:]) / len(v[1:]) for w, v in result.step_time.items()}
    compute_straggler = 3.0 * 3 * 3e-3 * 1e6  # (fwd + bwd of 3 blocks) x slowdown, µs
    assert min(times.values()) >= compute_straggler  # every worker waits for w3
    assert max(times.values()) / min(times.values()) < 1.05
    asyn = apply_overrides(sync, ("strategy.sync=async",))
    result = simulate(asyn, Costs(cal, asyn), steps=6)
    times = {w: sum(v[1:]) / len(v[1:]) for w, v in result.step_time.items()}
    assert times["w3"] > 2.5 * times["w1"] and slow
    assert result.staleness and max(result.staleness) >= 2  # fast workers update many times per w3 step


def test_every_strategy_simulates_and_writes_a_run_directory(tmp_path):
    examples = sorted(Path("examples").glob("*.yaml"))
    assert len(examples) >= 12
    from opentikz_dt.spec import load_spec

    for path in examples:
        spec = load_spec(path)
        costs = Costs(illustrative_calibration(spec), spec)
        result = simulate(spec, costs, steps=5)
        out = write_run_dir(tmp_path / path.stem, spec, result, 5, predicted={"calibration": "illustrative"})
        run = load_run(out)
        assert run.info["predicted"] and run.trace.metadata["predicted"] is True
        assert set(run.metrics["step_time_s"]) == set(spec.topology.workers.ids), path
        assert all(t > 0 for t in run.metrics["step_time_s"].values()), path
        assert run.metrics["samples_per_s"] > 0, path
        if path.stem == "transformer-pipeline":  # the tied embedding's gradient is summed by the end stages
            tied = {e["pid"] for e in run.trace.events if e["args"].get("phase") == "tied"}
            assert tied == {0, spec.topology.workers.count - 1}


def test_units_follow_the_workload_for_every_model_kind():
    from opentikz_dt.predict.blocks import model_blocks, stage_units
    from opentikz_dt.workload import workload_of

    for model in ({"kind": "transformer", "layers": 3}, {"kind": "cnn", "layers": 2}, {"kind": "mlp"}):
        spec = spec_from_data({"strategy": {"kind": "pipeline", "microbatches": 4}, "topology": {"workers": {"count": 2}},
                               "training": {"model": model}})
        work = workload_of(spec)
        units = model_blocks(spec)
        assert [u.name for u in units] == [u.name for u in work.units]
        assert sum(u.params for u in units) == work.params
        assert sum(u.flops for u in units) == pytest.approx(work.flops_per_sample)
        bounds = stage_units(spec, 2)
        assert [len(p) for p in work.stage_units(2)] == [b - a for a, b in zip(bounds, bounds[1:])]


@pytest.mark.parametrize("kind", ["allreduce-ring", "allreduce-tree", "central-storage", "gossip"])
def test_fit_from_a_run_predicts_it_back(tmp_path, kind):
    # central storage: its collectives are fitted from the last rank joining to the end (the
    # waits for late workers are the simulator's own); gossip: the exchange's spread is drawn
    run_dir = write_synthetic_run(tmp_path / "run", kind, workers=3, steps=30)
    cal = fit_from_run(run_dir)
    path = cal.save(tmp_path / "fit.json")
    spec = load_run(run_dir).spec
    result = simulate(spec, Costs(load_calibration(path, spec), spec), steps=30)
    from opentikz_dt.predict.rundir import metrics_of

    predicted = metrics_of(result, spec, 30)["step_time_s"]
    measured = load_run(run_dir).metrics["step_time_s"]
    for w in measured:
        assert predicted[w] == pytest.approx(measured[w], rel=0.15), w


# ---------------------------------------------------------------- the commands


def test_predict_figure_and_compare_commands(tmp_path):
    runner = CliRunner()
    pred = tmp_path / "pred"
    result = runner.invoke(main, ["predict", "examples/ps-async.yaml", "-o", str(pred), "--steps", "12"])
    assert result.exit_code == 0, result.output
    figs = runner.invoke(main, ["figure", str(pred), "--kind", "timeline", "-o", str(tmp_path / "f")])
    assert figs.exit_code == 0, figs.output
    assert "predicted: asynchronous parameter server" in (tmp_path / "f" / "predicted-pred-timeline.tex").read_text()
    measured = write_synthetic_run(tmp_path / "run", "ps-async", steps=12)
    cmp = runner.invoke(main, ["compare", str(measured), str(pred), "-o", str(tmp_path / "c")])
    assert cmp.exit_code == 0, cmp.output
    assert "worker forward" in cmp.output and "step time" in cmp.output
    table = (tmp_path / "c" / "compare-phases.tex").read_text()
    assert "Error" in table and "\\%" in table
    assert "synth-ps-async (predicted)" not in table
    # an uncalibrated prediction says so, in its note and its interval line
    assert "measured run vs ps-async (predicted), illustrative cost model (no calibration): not a measurement" in table
    assert "Interval: a point (the illustrative cost model has no spread)." in table
    assert "calibration holds" not in table
    assert "(predicted)" in (tmp_path / "c" / "compare-table.tex").read_text()


def test_figure_spec_with_calibration_draws_the_prediction(tmp_path):
    spec = spec_from_data({"strategy": {"kind": "allreduce", "algorithm": "ring"}})
    cal = illustrative_calibration(spec).save(tmp_path / "cal.json")
    runner = CliRunner()
    out = tmp_path / "f"
    result = runner.invoke(main, ["figure", "examples/allreduce-ring.yaml", "--kind", "timeline",
                                  "--calibration", str(cal), "-o", str(out)])
    assert result.exit_code == 0, result.output
    tex = (out / "allreduce-ring-timeline.tex").read_text()
    assert "predicted from calibration cal.json" in tex
    plain = runner.invoke(main, ["figure", "examples/allreduce-ring.yaml", "--kind", "timeline", "-o", str(out)])
    assert plain.exit_code == 0
    assert "illustrative cost model" in (out / "allreduce-ring-timeline.tex").read_text()
    # the note is the spec's words where it sets them (seed 001 in Chinese)
    zh = tmp_path / "zh.yaml"
    zh.write_text("strategy: {kind: allreduce, algorithm: ring}\n"
                  "figure: {labels: {calibration_note: '按校准 {file} 预测'}}\n", encoding="utf-8")
    result = runner.invoke(main, ["figure", str(zh), "--kind", "timeline", "--calibration", str(cal), "-o", str(out)])
    assert result.exit_code == 0, result.output
    tex = next(out.glob("zh-timeline.tex")).read_text(encoding="utf-8")
    assert "按校准 cal.json 预测" in tex and "predicted from" not in tex


def test_sweep_to_1024_workers_writes_a_scaling_figure(tmp_path):
    runner = CliRunner()
    started = time.perf_counter()
    result = runner.invoke(main, ["predict", "examples/ps-sync.yaml", "--sweep", "workers=2,16,128,1024",
                                  "--link", "10gbit", "--steps", "20", "-o", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert time.perf_counter() - started < 60  # a bound for a loaded CI box; the benchmark has the real number
    tex = (tmp_path / "predicted-scaling.tex").read_text()
    assert "(1024," in tex and "links 10 Gbit/s" in tex and "every rank on its own core" in tex
    rows = (tmp_path / "predicted-scaling.txt").read_text().splitlines()[1:]
    rates = [float(r.split()[2].replace(",", "")) for r in rows]
    assert len(rates) == 4 and rates[1] > rates[0]  # more workers, more samples/s at first
    steps = [float(r.split()[3]) for r in rows]
    assert steps == sorted(steps)  # one server: the step time grows with the workers


@pytest.mark.latex
def test_scaling_figure_compiles(tmp_path):
    result = CliRunner().invoke(main, ["predict", "examples/allreduce-ring.yaml", "--sweep", "workers=2,8,64",
                                       "--set", "strategy.algorithm=ring,tree", "--steps", "10", "-o", str(tmp_path),
                                       "--format", "pdf"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "predicted-scaling.pdf").stat().st_size > 1000


# ---------------------------------------------------------------- bad input


def write_cal(tmp_path, spec, edit=None) -> Path:
    cal = illustrative_calibration(spec)
    data = json.loads(json.dumps(cal.data))
    if edit:
        edit(data)
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(data))
    return path


def test_calibration_missing_value_names_file_and_key(tmp_path):
    spec = spec_of({"kind": "allreduce"})
    path = write_cal(tmp_path, spec, lambda d: d["comm"]["p2p"].pop("alpha_s"))
    with pytest.raises(CalibrationError) as err:
        load_calibration(path, spec)
    assert str(err.value) == f"{path}: comm.p2p.alpha_s: missing"
    path = write_cal(tmp_path, spec, lambda d: d["compute"]["blocks"][1]["forward"].__setitem__(1, "fast"))
    with pytest.raises(CalibrationError, match=r"compute\.blocks\.1\.forward\.1: 'fast' is not a number"):
        load_calibration(path, spec)
    path.write_text("{not json")
    with pytest.raises(CalibrationError, match="not JSON"):
        load_calibration(path, spec)


def test_calibration_of_another_model_is_refused_and_another_machine_warns(tmp_path):
    spec = spec_of({"kind": "allreduce"})
    other = spec_of({"kind": "allreduce"}, layers=(32, 64, 10))
    path = write_cal(tmp_path, other)
    with pytest.raises(CalibrationError) as err:
        load_calibration(path, spec)
    assert 'made for model kind="mlp" layers=[32,64,10], but' in str(err.value)
    assert 'has kind="mlp" layers=[32,128,128,10]' in str(err.value)
    path = write_cal(tmp_path, spec, lambda d: d["machine"].update(host="elsewhere", cpus=64))
    cal = load_calibration(path, spec)
    assert any("calibrated on another machine (host 'elsewhere'" in w for w in cal.warnings)
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text("strategy: {kind: allreduce}\ntopology: {workers: {count: 4}}\n"
                         "training: {model: {layers: [32, 128, 128, 10]}}\n")
    result = CliRunner().invoke(main, ["predict", str(spec_file), "--calibration", str(path),
                                       "-o", str(tmp_path / "p"), "--steps", "4"])
    assert result.exit_code == 0, result.output
    assert "dtgen: warning: " in result.output and "calibrated on another machine" in result.output
    refused = CliRunner().invoke(main, ["predict", "examples/allreduce-native.yaml", "--calibration",
                                        str(write_cal(tmp_path, other)), "-o", str(tmp_path / "q")])
    assert refused.exit_code == 1 and 'made for model kind="mlp" layers=[32,64,10]' in refused.output
    assert not (tmp_path / "q").exists()


def test_cli_bad_input_is_one_line_and_nothing_written(tmp_path):
    runner = CliRunner()
    out = tmp_path / "p"
    cases = [  # exit codes of errors.py's table: 1 invalid input, 2 a bad option value (usage)
        (["--calibration", str(tmp_path / "nope.json")], "does not exist", 2),
        (["--sweep", "workers=2,4,x"], "worker counts must be whole numbers", 2),
        (["--sweep", "hosts=2,4"], "expected workers=N,N,...", 2),
        (["--sweep", "workers=" + ",".join(str(i) for i in range(1, 80))], "at most 64 per figure", 2),
        (["--workers", "16384"], "16,385 ranks: predictions go up to 16,384 ranks", 1),
        (["--workers", "4000", "--steps", "1000"], "rank-steps", 1),
        (["--link", "fast"], "is not a bandwidth", 2),
        (["--set", "topology.workers.count=-3"], "the overrides make an invalid spec", 2),
    ]
    for args, message, code in cases:
        result = runner.invoke(main, ["predict", "examples/ps-sync.yaml", "-o", str(out), *args])
        assert result.exit_code == code, (args, result.output)
        assert message in result.output, (args, result.output)
        assert "Traceback" not in result.output
        assert not out.exists(), args
    (tmp_path / "keep").mkdir()
    (tmp_path / "keep" / "notes.txt").write_text("mine")
    result = runner.invoke(main, ["predict", "examples/ps-sync.yaml", "-o", str(tmp_path / "keep")])
    assert result.exit_code == 1 and "is not a predicted run" in result.output
    assert (tmp_path / "keep" / "notes.txt").read_text() == "mine"
    bad = runner.invoke(main, ["calibrate", "--from", str(tmp_path / "keep"), "-o", str(tmp_path / "c.json")])
    assert bad.exit_code == 1 and "not a run directory (no spec.yaml)" in bad.output
    assert not (tmp_path / "c.json").exists()
    # a python model that does not import: the run's own preflight, before any process starts
    spec = tmp_path / "mine.yaml"
    spec.write_text("strategy: {kind: allreduce}\ntraining:\n  model: {kind: python, entry: 'nowhere:build'}\n"
                    "  dataset: {kind: python, entry: 'nowhere:data'}\n")
    bad = runner.invoke(main, ["calibrate", str(spec), "-o", str(tmp_path / "c.json")])
    assert bad.exit_code == 1 and "training.model.entry: cannot import 'nowhere'" in bad.output, bad.output
    assert "Traceback" not in bad.output and not (tmp_path / "c.json").exists()


def test_link_units():
    assert parse_link("10gbit") == 1.25e9
    assert parse_link("100mbit") == 12.5e6
    assert parse_link("1gb") == 1e9
    with pytest.raises(DtgenError):
        parse_link("0gbit")
    assert math.isclose(parse_link("2.5 Gbit/s"), 2.5e9 / 8)


def test_size_bound_names_the_reason():
    spec = spec_of({"kind": "gossip"})
    with pytest.raises(DtgenError, match="at most 2,000,000 per prediction"):
        check_size(apply_overrides(spec, (), workers=4000), 600)


@pytest.mark.parametrize("values", [[135_222, 190_253], [2.7, 1906.0], [0.8, 0.9]])
def test_log_ticks_label_at_least_two_values_inside_the_data(values):
    # pgfplots ends a log axis at the data: ticks outside it are not drawn, and a sweep
    # whose values span less than one 1-2-5 step got an axis with no numbers at all.
    from opentikz_dt.predict.sweep import log_ticks
    ticks = [float(t) for t in str(log_ticks(values)).split(",")]
    assert sum(min(values) * 0.99 <= t <= max(values) * 1.01 for t in ticks) >= 2, ticks


def test_scaling_caption_names_the_calibration_file_not_its_path(tmp_path):
    from opentikz_dt.predict.sweep import caption
    notes = caption({"calibration": str(tmp_path / "cal.json")}, [], 20)
    assert "calibration cal.json" in notes[0] and str(tmp_path) not in notes[0]


def test_an_uncalibrated_sweep_says_nothing_was_calibrated(tmp_path):
    """It said 'predicted from the illustrative cost model: ... compute as calibrated solo;
    links as calibrated': the illustrative model's numbers are round ones, measured nowhere."""
    result = CliRunner().invoke(main, ["predict", "examples/allreduce-ring.yaml", "--sweep", "workers=2,4,8",
                                       "--steps", "10", "-o", str(tmp_path)])
    assert result.exit_code == 0, result.output
    tex = (tmp_path / "predicted-scaling.tex").read_text()
    assert ("predicted from the illustrative cost model (round numbers, not measured): every rank on its own "
            "core, compute and links at the model's nominal speeds; 10 steps, first left out") in tex
    assert "calibrated" not in tex
    from opentikz_dt.predict.sweep import caption
    given = caption({"calibration": "illustrative (no calibration)", "illustrative": True,
                     "link_bytes_per_s": 1.25e9, "latency_s": 1e-3}, [], 10)[0]
    assert "compute at the model's nominal speed; links 10 Gbit/s, latency 1 ms;" in given


def test_phase_table_sets_negative_errors_with_a_dash_not_a_hyphen():
    from types import SimpleNamespace
    from opentikz_dt.predict.compare import Row, render_phase_table
    spec = spec_from_data({"strategy": {"kind": "single"}})
    run = SimpleNamespace(spec=spec, path="run", name="single")
    predicted = SimpleNamespace(spec=spec, path="pred", name="single", label="single (predicted)",
                                info={"predicted": {"calibration": "cal.json"}}, metrics={})
    tex = render_phase_table([Row("step time", 2.0, 1.0, "ms"), Row("samples/s", 100.0, 150.0, "1/s"),
                              Row("worker backward", 1.0, 0.998, "ms")], run, predicted)
    assert "--50\\%" in tex and "+50\\%" in tex
    assert "& 0\\%" in tex and "-0" not in tex  # a rounding to zero has no sign


def test_a_python_model_is_predicted_once_a_calibration_describes_it(tmp_path):
    python_model = {"kind": "python", "entry": "net:build", "args": {"width": 48}}
    data = {"name": "mine", "strategy": {"kind": "parameter-server"}, "topology": {"workers": {"count": 2},
            "servers": {"count": 2}}, "training": {"model": python_model, "steps": 6,
                                                   "dataset": {"kind": "python", "entry": "net:data"}}}
    spec = spec_from_data(data)
    with pytest.raises(DtgenError, match="only known once built: calibrate it"):
        simulate(spec, Costs(illustrative_calibration(spec_of({"kind": "parameter-server"})), spec), steps=3)
    described = {"blocks": [{"name": "0 (Linear)", "tensors": [["0.weight", [48, 8]], ["0.bias", [48]]],
                             "flops": 768.0},
                            {"name": "1 (Linear)", "tensors": [["1.weight", [3, 48]], ["1.bias", [3]]], "flops": 288.0}],
                 "activations": [48, 3]}
    base = spec_of({"kind": "parameter-server"})
    cal = illustrative_calibration(base)
    cal.data["model"] = {"model": python_model, "batch_size": spec.training.batch_size, "workload": described}
    cal.data["compute"]["blocks"] = cal.data["compute"]["blocks"][:2]
    loaded = load_calibration(cal.save(tmp_path / "cal.json"), spec)  # learns the model
    result = simulate(spec, Costs(loaded, spec), steps=3)
    assert result.bytes[0][0] == 3 * 4 * (48 * 8 + 48 + 3 * 48 + 3)  # each step pushes every gradient once
    # another size of the same entry is another model: refused, naming what differs
    other = spec_from_data({**data, "training": {**data["training"], "model": {**python_model, "args": {"width": 64}}}})
    with pytest.raises(CalibrationError, match=r"made for model args=\{\"width\":48\}"):
        load_calibration(tmp_path / "cal.json", other)
    cal.data["model"]["workload"] = {"blocks": [{"name": "x"}]}
    with pytest.raises(CalibrationError, match="model.workload: not a model description"):
        load_calibration(cal.save(tmp_path / "bad.json"), spec)


# ---------------------------------------------------------------- device, precision, optimizer


def _measured(device=None, training=None):
    """An edit making write_cal's calibration a measured one (illustrative ones are not checked)."""
    def edit(d):
        d["source"] = "probe"
        if device is not None:
            d["device"] = device
        if training is not None:
            d["training"] = training
    return edit


H100 = {"kind": "cuda", "name": "NVIDIA H100 80GB HBM3", "count": 1}
XEON = {"kind": "cpu", "name": "Intel(R) Xeon(R) Gold 6248", "count": 2}


def test_calibration_of_another_device_precision_or_optimizer_is_refused(tmp_path, monkeypatch):
    from opentikz_dt.predict import calibration

    monkeypatch.setattr(calibration, "local_gpus", lambda: [])
    layers = {"training": {"model": {"layers": [32, 128, 128, 10]}, "steps": 10}}
    cuda = spec_from_data({"name": "gpu-run", "strategy": {"kind": "single"}, "runtime": {"device": "cuda"}, **layers})
    cpu = spec_from_data({"name": "cpu-run", "strategy": {"kind": "single"}, "runtime": {"device": "cpu"}, **layers})
    auto = spec_from_data({"name": "auto-run", "strategy": {"kind": "single"}, **layers})
    # a CPU calibration for a CUDA spec, and the other way round
    path = write_cal(tmp_path, cpu, _measured(XEON))
    with pytest.raises(CalibrationError) as err:
        load_calibration(path, cuda)
    assert str(err.value) == (f"{path}: device: measured on cpu (Intel(R) Xeon(R) Gold 6248, 2 cores), but gpu-run "
                              "runs on cuda (runtime.device cuda); calibrate on the device the spec runs on "
                              "(dtgen calibrate SPEC there)")
    assert not any("device" in w for w in load_calibration(path, cpu).warnings)
    path = write_cal(tmp_path, cpu, _measured(H100))
    with pytest.raises(CalibrationError, match=r": device: measured on cuda \(1x NVIDIA H100 80GB HBM3\), but cpu-run "
                                               r"runs on cpu \(runtime.device cpu\)"):
        load_calibration(path, cpu)
    assert load_calibration(path, cuda) and load_calibration(path, auto)  # auto: the calibration's device
    # another GPU model than this machine's
    monkeypatch.setattr(calibration, "local_gpus", lambda: ["NVIDIA A100-SXM4-40GB"])
    with pytest.raises(CalibrationError) as err:
        load_calibration(path, cuda)
    assert str(err.value) == (f"{path}: device: measured on cuda (1x NVIDIA H100 80GB HBM3), but this machine's GPU "
                              "is NVIDIA A100-SXM4-40GB; calibrate on this machine (dtgen calibrate SPEC)")
    monkeypatch.setattr(calibration, "local_gpus", lambda: ["NVIDIA H100 80GB HBM3"] * 2)
    assert load_calibration(path, cuda).warnings == ()
    # a CPU calibration for an `auto` spec on a machine with a GPU: `dtgen run` would use the GPU
    cal = load_calibration(write_cal(tmp_path, auto, _measured(XEON)), auto)
    assert any("has runtime.device auto and this machine has a GPU (NVIDIA H100 80GB HBM3)" in w for w in cal.warnings)
    # precision and optimizer are part of the cost
    monkeypatch.setattr(calibration, "local_gpus", lambda: [])
    path = write_cal(tmp_path, cpu, _measured(XEON, {"precision": "bf16", "optimizer": "adamw"}))
    with pytest.raises(CalibrationError) as err:
        load_calibration(path, cpu)
    assert str(err.value) == (f"{path}: training: measured with precision bf16 (the spec: fp32), optimizer adamw "
                              "(the spec: sgd); precision and optimizer change the costs: calibrate this spec "
                              "(dtgen calibrate SPEC)")
    # the command: one line, exit 1 (invalid input), nothing written
    spec_file = tmp_path / "gpu.yaml"
    spec_file.write_text("name: gpu-run\nstrategy: {kind: single}\nruntime: {device: cuda}\n"
                         "training: {model: {layers: [32, 128, 128, 10]}}\n")
    result = CliRunner().invoke(main, ["predict", str(spec_file), "--calibration",
                                       str(write_cal(tmp_path, cpu, _measured(XEON))), "-o", str(tmp_path / "p")])
    assert result.exit_code == 1 and result.output.count("\n") == 1, result.output
    assert result.output.startswith("dtgen: error: ") and "runs on cuda (runtime.device cuda)" in result.output
    assert not (tmp_path / "p").exists()


def test_calibration_files_without_device_are_read_as_cpu_fp32_sgd(tmp_path, monkeypatch):
    """Calibrations written before they recorded the device: the probe only ever ran on the CPU."""
    from opentikz_dt.predict import calibration

    monkeypatch.setattr(calibration, "local_gpus", lambda: [])
    cpu = spec_of({"kind": "allreduce"})
    old = write_cal(tmp_path, cpu, lambda d: d.update(source="probe"))
    assert "device" not in json.loads(old.read_text()) and "training" not in json.loads(old.read_text())
    assert not any("device" in w or "training" in w for w in load_calibration(old, cpu).warnings)
    cuda = spec_from_data(dict(cpu.data, runtime=dict(cpu.data["runtime"], device="cuda")))
    with pytest.raises(CalibrationError, match=r"measured on cpu \(a calibration without a device: taken as the "
                                               r"CPU\), but .* runs on cuda"):
        load_calibration(old, cuda)
    bad = write_cal(tmp_path, cpu, _measured({"kind": "tpu"}))
    with pytest.raises(CalibrationError, match=r"device.kind: expected cpu or cuda"):
        load_calibration(bad, cpu)


def test_a_fitted_calibration_records_the_runs_device_and_training(tmp_path):
    from opentikz_dt.predict.calibration import cpu_device
    from opentikz_dt.predict.fit import run_device

    run_dir = write_synthetic_run(tmp_path / "run", "allreduce-ring", workers=3, steps=10)
    cal = fit_from_run(run_dir)
    assert cal.data["training"] == {"precision": "fp32", "optimizer": "sgd"}
    assert cal.data["device"] == run_device(load_run(run_dir).info)
    assert run_device({"device_info": H100}) == H100
    assert run_device({"device": "cuda:0", "ranks": [{"device": "cuda:0"}, {"device": "cuda:1"}]}) == {
        "kind": "cuda", "name": None, "count": 2}
    assert run_device({"device": "cpu"}) == cpu_device() and cpu_device()["count"] >= 1


# ---------------------------------------------------------------- fsdp


def _fsdp_collectives(result, rank: int, step: int) -> list:
    events = sorted((e for e in result.events[rank] if e["args"]["step"] == step), key=lambda e: e["ts"])
    return [e for e in events if e["name"] == "allreduce"], {e["name"]: e for e in events if e["name"] != "allreduce"}


@pytest.mark.parametrize("reshard", [True, False])
def test_fsdp_simulates_the_runners_collectives_per_unit(reshard):
    """As tests/test_runner_numerics.py finds them in a real run: the root, blocks.0 and
    blocks.1 gathered for the forward; in the backward the blocks gathered again
    (reshard_after_forward) and every unit reduce-scattered, the root last, over the
    buffer its all-gather fills; each inside its pass's span, the optimizer after."""
    from opentikz_dt.spec import load_spec
    from opentikz_dt.workload import workload_of

    spec = load_spec("examples/fsdp-transformer.yaml")
    spec = spec_from_data({**spec.data, "strategy": {"kind": "fsdp", "reshard_after_forward": reshard}})
    result = simulate(spec, Costs(illustrative_calibration(spec), spec), steps=3)
    found, spans = _fsdp_collectives(result, 0, 1)
    got = [(e["args"]["phase"], e["args"]["unit"], e["args"]["pass"]) for e in found]
    units = ("root", "blocks.0", "blocks.1")
    assert got[:3] == [("all-gather", unit, "forward") for unit in units]
    again = [("all-gather", unit, "backward") for unit in ("blocks.1", "blocks.0")] if reshard else []
    assert sorted(got[3:]) == sorted(again + [("reduce-scatter", unit, "backward") for unit in units])
    assert got[-1] == ("reduce-scatter", "root", "backward")
    size = {e["args"]["unit"]: e["args"]["bytes"] for e in found if e["args"]["phase"] == "all-gather"}
    assert all(e["args"]["bytes"] == size[e["args"]["unit"]] for e in found)
    block = workload_of(spec).blocks[0]  # each tensor padded by less than a row per rank (dim 0 split in 2)
    rows = sum(math.prod(shape[1:]) for _, shape in block.tensors)
    assert 4 * block.params <= size["blocks.0"] < 4 * (block.params + rows)
    forward, backward, optimizer = spans["forward"], spans["backward"], spans["optimizer"]
    for e in found:
        span = forward if e["args"]["pass"] == "forward" else backward
        assert e["tid"] == 1 and span["ts"] - 1e-6 <= e["ts"] <= span["ts"] + span["dur"] + 1e-6
    assert optimizer["ts"] >= found[-1]["ts"] + found[-1]["dur"] - 1e-6


def test_zero1_updates_its_own_tensors_then_broadcasts_them_one_source_after_another():
    """shard: optimizer as ZeroRedundancyOptimizer runs it after DDP's backward: inside the
    `optimizer` span each rank updates the tensors torch assigns it, then each source's
    broadcast of them (its values' fp32 bytes) runs once every rank is there, source 0 first."""
    from opentikz_dt.memory import model_sizes
    from opentikz_dt.strategies.fsdp.strategy import zero_partition

    spec = load_spec("examples/fsdp-transformer.yaml")
    spec = spec_from_data({**spec.data, "strategy": {"kind": "fsdp", "shard": "optimizer"}})
    result = simulate(spec, Costs(illustrative_calibration(spec), spec), steps=3)
    held = zero_partition(list(model_sizes(spec).tensors.values()), 2)
    ends = []
    for rank in (0, 1):
        found, spans = _fsdp_collectives(result, rank, 1)
        casts = [e for e in found if e["args"]["algorithm"] == "zero"]
        assert [(e["args"]["phase"], e["args"]["src"], e["args"]["bytes"]) for e in casts] == [
            ("broadcast", src, 4 * values) for src, values in enumerate(held)]
        assert [e["args"]["phase"] for e in found if e["args"]["algorithm"] == "native"] == ["bucket"]
        backward, optimizer = spans["backward"], spans["optimizer"]
        assert backward["ts"] + backward["dur"] <= optimizer["ts"] < casts[0]["ts"]
        assert casts[1]["ts"] == pytest.approx(casts[0]["ts"] + casts[0]["dur"])
        assert optimizer["ts"] + optimizer["dur"] == pytest.approx(casts[1]["ts"] + casts[1]["dur"])
        ends.append([e["ts"] + e["dur"] for e in casts])
    assert ends[0] == ends[1]  # collectives: every rank leaves each broadcast together


def test_fsdp_fit_from_a_run_predicts_it_back(tmp_path):
    """A predicted fsdp run, fitted (its passes' spans less their collectives, the
    collectives' latency), predicts its own step time back."""
    from opentikz_dt.predict.rundir import metrics_of
    from opentikz_dt.spec import load_spec

    spec = load_spec("examples/fsdp-transformer.yaml")
    cal = illustrative_calibration(spec)
    made = simulate(spec, Costs(cal, spec), steps=8)
    run_dir = write_run_dir(tmp_path / "run", spec, made, 8, predicted={"calibration": "illustrative"})
    fitted = fit_from_run(run_dir, base=cal)
    predicted = metrics_of(simulate(spec, Costs(fitted, spec), steps=8), spec, 8)["step_time_s"]
    measured = load_run(run_dir).metrics["step_time_s"]
    for w in measured:
        assert predicted[w] == pytest.approx(measured[w], rel=0.15), w


def test_predict_prints_its_answer_from_the_files_it_wrote(tmp_path):
    """Step time, samples/s and memory per rank as `run`'s summary gives them, and what the
    numbers come from; alike ranks are one row."""
    result = CliRunner().invoke(main, ["predict", "examples/ps-sync.yaml", "-o", str(tmp_path / "p"), "--steps", "4"])
    assert result.exit_code == 0, result.output
    metrics = json.loads((tmp_path / "p" / "metrics.json").read_text())
    memory = expected_memory(load_spec("examples/ps-sync.yaml"))
    lines = result.stdout.splitlines()
    assert lines[0] == ("ps-sync: predicted parameter-server, 4 rank(s), 4 steps, from the illustrative cost model "
                        "(no calibration: relative costs, not this machine's)")
    assert lines[1].split() == ["ranks", "ids", "role", "step", "time", "samples/s", "memory", "MB"]
    assert memory[0].activations and memory[3].activations == 0  # a server runs no forward
    worker_mb = (memory[0].params + memory[0].grads + memory[0].optimizer + memory[0].activations) / 1e6
    server_mb = (memory[3].params + memory[3].grads + memory[3].optimizer) / 1e6
    assert lines[3].split() == ["0-2", "w1..w3", "worker", f"{metrics['step_time_s']['w1'] * 1000:.1f}", "ms",
                                f"{metrics['per_worker_samples_per_s']['w1']:,.0f}", f"{worker_mb:.2f}"]
    assert lines[4].split() == ["3", "ps", "server", "-", "-", f"{server_mb:.2f}"]
    assert lines[5] == (f"throughput {metrics['samples_per_s']:,.0f} samples/s; memory per rank: expected "
                        "parameters, gradients, optimizer state and activations (docs/memory.md)")
    assert lines[-1] == f"wrote {tmp_path / 'p'}"


def test_a_calibrated_prediction_names_its_calibration(tmp_path):
    spec = spec_of({"kind": "allreduce"})
    path = write_cal(tmp_path, spec, lambda d: d.update(source="probe and a 100-step run"))
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text("strategy: {kind: allreduce}\ntopology: {workers: {count: 4}}\n"
                         "training: {model: {layers: [32, 128, 128, 10]}}\n")
    result = CliRunner().invoke(main, ["predict", str(spec_file), "--calibration", str(path), "-o", str(tmp_path / "p"),
                                       "--steps", "4", "--link", "10gbit"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] == (f"spec: predicted allreduce, 4 rank(s), 4 steps, from calibration {path} "
                                             "(probe and a 100-step run)")
    assert result.stdout.splitlines()[3].split()[:3] == ["0-3", "w1..w4", "worker"]
