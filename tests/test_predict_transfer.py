"""A calibration made on one strategy and size predicts another: what it carries is said
(run.json `predicted.transfer`, the figures' notes, the command's warnings), never hidden."""

from __future__ import annotations

import json

import pytest
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
    assert transfer[0].startswith("calibrated on allreduce ring: its message latency is carried to "
                                  "parameter-server sync as a cost per message, of its untraced time per step only "
                                  "the floor (")
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


def test_a_fitted_message_latency_is_split_into_a_message_and_a_wait_for_a_core():
    from opentikz_dt.predict.fit import message_split

    # 10 messages of 1,000 bytes at 1 ns per byte: 8 alone (51-58 µs), 2 that waited for a core
    samples = [(51 + i, 1000) for i in range(8)] + [(900, 1000), (1500, 1000)]
    split = message_split(samples, 1e-9, alpha=300e-6)
    assert split["alpha_floor_s"] == pytest.approx(51e-6, rel=0.05)   # a low quantile: a message alone
    assert split["core_wait_s"] == pytest.approx(300e-6 - split["alpha_floor_s"])
    assert message_split(samples[:4], 1e-9, 300e-6) == {}               # too few to tell


def test_a_ring_fit_solves_its_hop_latency_so_its_own_prediction_gives_the_runs_step(tmp_path):
    """A ring hop's span holds its wait for the predecessor's stalls, which the simulator
    draws itself (measured: fitted from the typical hop, the ring predicted the runs it was
    fitted on +12..+19%). The fit solves the hop latency so that the ring's own prediction
    gives the run's step time, no lower than a message alone; the split that every other
    strategy and process count carries stays as fitted."""
    import copy

    from opentikz_dt.predict.calibration import Calibration
    from opentikz_dt.predict.fit import run_step_s, simulated_step_s
    from opentikz_dt.predict.predict import costs_for
    from opentikz_dt.strategies.allreduce import predict as allreduce
    from opentikz_dt.spec import spec_from_data

    run = load_run(write_synthetic_run(tmp_path / "run", "allreduce-ring", workers=4, steps=20))
    data = copy.deepcopy(fit_from_run(run.path).data)
    # a hop fitted long (as one holding its predecessor's stalls), a message alone short
    data["comm"]["p2p"].update(alpha_s=3e-3, alpha_floor_s=1e-4, core_wait_s=2.9e-3)
    long = Calibration(data, "long.json")
    target = run_step_s(run)
    assert simulated_step_s(long, run, 20) > 1.5 * target  # what the solve corrects
    solved = allreduce.finish_fit(long, run)
    p2p = solved.data["comm"]["p2p"]
    assert simulated_step_s(solved, run, 20) == pytest.approx(target, rel=0.01)
    assert 1e-4 <= p2p["alpha_s"] < 3e-3
    assert (p2p["alpha_floor_s"], p2p["core_wait_s"]) == (1e-4, 2.9e-3)
    # another strategy, and the ring at another size, carry the split: the solve changes nothing there
    for kind, workers in (("allreduce-tree", 4), ("ps-sync", 3), ("allreduce-ring", 8)):
        spec_kind = "allreduce-ring" if kind == "allreduce-tree" else kind
        other = spec_from_data(spec_data(spec_kind, workers=workers, steps=10))
        if kind == "allreduce-tree":
            other = spec_from_data(dict(other.data, strategy={"kind": "allreduce", "algorithm": "tree"}))
        before, _, _ = costs_for(other, long.save(tmp_path / "long.json"), dedicated=False)
        after, _, _ = costs_for(other, solved.save(tmp_path / "solved.json"), dedicated=False)
        assert before.comm["p2p"] == after.comm["p2p"], kind
    # a message alone already too slow for the run: the floor, not below it
    data["comm"]["p2p"].update(alpha_floor_s=2.5e-3)
    assert allreduce.finish_fit(Calibration(data, "slow.json"), run).data["comm"]["p2p"]["alpha_s"] == 2.5e-3
    # another algorithm is left as fitted
    tree = copy.deepcopy(data)
    assert allreduce.finish_fit(Calibration(tree, "t.json"), _as_tree(run)).data == tree


def _as_tree(run):
    from types import SimpleNamespace

    from opentikz_dt.spec import spec_from_data

    return SimpleNamespace(spec=spec_from_data(dict(run.spec.data, strategy={"kind": "allreduce", "algorithm": "tree"})),
                           metrics=run.metrics)


def _cal_with_split(tmp_path, ranks=4):
    from opentikz_dt.predict.calibration import illustrative_calibration
    from opentikz_dt.spec import spec_from_data

    spec = spec_from_data(spec_data("allreduce-ring", workers=ranks, steps=10))
    data = json.loads(json.dumps(illustrative_calibration(spec).data))
    data.update(source="run", cores_effective=2.0,
                made_for={"strategy": dict(spec.data["strategy"]), "workers": ranks, "ranks": ranks, "hosts": 1})
    data["comm"]["p2p"].update(alpha_s=1e-3, alpha_floor_s=1e-4, core_wait_s=9e-4)
    path = tmp_path / "split.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("kind, workers, dedicated, alpha_us", [
    ("allreduce-ring", 4, False, 1000.0),                    # the calibrated spec: the fitted latency as it was
    ("allreduce-ring", 4, True, 100.0),                      # a core per rank: a message alone
    ("allreduce-ring", 8, False, 100 + 900 * (1 - 2 / 8) / (1 - 2 / 4)),   # more processes: more waiting
    ("ps-sync", 3, False, 100 + 900 * (1 - 2 / 4) / (1 - 2 / 4)),          # 3 workers + 1 server = 4 ranks
])
def test_the_wait_for_a_core_follows_the_process_count(tmp_path, kind, workers, dedicated, alpha_us):
    from opentikz_dt.predict.predict import costs_for
    from opentikz_dt.spec import spec_from_data

    cal = _cal_with_split(tmp_path)
    spec = spec_from_data(spec_data(kind, workers=workers, steps=10))
    costs, assumed, _ = costs_for(spec, cal, dedicated=dedicated)
    assert costs.comm["p2p"][0] == pytest.approx(alpha_us)
    assert ("message_wait_scale" in assumed) == (alpha_us != 1000.0 or kind != "allreduce-ring")


def test_a_malformed_message_split_names_the_file_and_key(tmp_path):
    from opentikz_dt.predict.calibration import CalibrationError, load_calibration

    path = _cal_with_split(tmp_path)
    data = json.loads(path.read_text())
    data["comm"]["p2p"]["core_wait_s"] = "slow"
    path.write_text(json.dumps(data))
    with pytest.raises(CalibrationError, match=r"split.json: comm.p2p.core_wait_s: 'slow' is not a number"):
        load_calibration(path)


def _cal_with_probed_collectives(tmp_path, measured="probe"):
    """_cal_with_split (4 processes on 2 cores, 900 µs wait per message) whose collectives
    (300 µs a step) say where they were measured."""
    path = _cal_with_split(tmp_path)
    data = json.loads(path.read_text())
    for kind in ("allreduce", "broadcast", "reduce"):
        data["comm"][kind]["measured"] = measured
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("measured, workers, dedicated, active, step_us", [
    ("probe", 4, False, None, 300 + 900),                                   # the run's own process count
    ("probe", 8, False, None, 300 + 900 * (1 - 2 / 8) / (1 - 2 / 4)),       # more runnable: more waiting
    ("probe", 4, False, 2, 300.0),                                          # 2 runnable on 2 cores: none
    ("probe", 4, True, None, 300.0),                                        # a core per rank
    ("run", 4, False, None, 300.0),                                         # fitted in a run: waits held
])
def test_a_probed_collective_carries_the_runs_wait_for_a_core(tmp_path, measured, workers, dedicated, active,
                                                               step_us):
    from opentikz_dt.predict.predict import costs_for
    from opentikz_dt.spec import spec_from_data

    spec = spec_from_data(spec_data("allreduce-native", workers=workers, steps=10))
    costs, assumed, notes = costs_for(spec, _cal_with_probed_collectives(tmp_path, measured), dedicated=dedicated)
    for kind in ("allreduce", "broadcast", "reduce"):
        assert costs.step_alpha(kind, active) == pytest.approx(step_us)
    beta = costs.comm["allreduce"][1]
    assert costs.allreduce(4000, 4, active) == pytest.approx(6 * step_us + 1.5 * 4000 * beta)
    carried = measured == "probe" and not dedicated
    assert ("collective_wait_for_core_s" in assumed) == carried
    assert any("probed collectives wait for a core as the run's messages do" in n for n in notes) == carried


def test_the_calibrated_spec_itself_adds_no_wait_to_a_collective(tmp_path):
    """Its run measured the collectives it uses; its prediction and run.json stay as they were."""
    from opentikz_dt.predict.predict import costs_for
    from opentikz_dt.spec import spec_from_data

    spec = spec_from_data(spec_data("allreduce-ring", workers=4, steps=10))
    costs, assumed, notes = costs_for(spec, _cal_with_probed_collectives(tmp_path), dedicated=False)
    assert costs.step_alpha("allreduce", None) == pytest.approx(300.0)
    assert "collective_wait_for_core_s" not in assumed and not notes


def test_the_hierarchical_step_between_hosts_waits_for_no_core(tmp_path):
    """Its leaders alone take part (2 on 2 cores): the probe's collective as measured; the
    steps inside a host carry the wait."""
    from opentikz_dt.predict.costs import Costs
    from opentikz_dt.predict.predict import costs_for
    from opentikz_dt.predict.simulate import simulate
    from opentikz_dt.spec import spec_from_data

    data = spec_data("allreduce-ring", workers=4, steps=4)
    data["strategy"]["algorithm"], data["topology"]["hosts"] = "hierarchical", 2
    spec = spec_from_data(data)
    costs, _, _ = costs_for(spec, _cal_with_probed_collectives(tmp_path), dedicated=False)
    plain = Costs(costs.cal, spec)
    inter = [e for e in simulate(spec, costs).events[0] if e["args"].get("phase") == "inter"]
    plain_inter = [e for e in simulate(spec, plain).events[0] if e["args"].get("phase") == "inter"]
    intra = [e for e in simulate(spec, costs).events[1] if e["args"].get("phase") == "intra"]
    plain_intra = [e for e in simulate(spec, plain).events[1] if e["args"].get("phase") == "intra"]
    assert inter and [e["dur"] for e in inter] == [e["dur"] for e in plain_inter]
    assert all(a["dur"] > b["dur"] + 800 for a, b in zip(intra[1:], plain_intra[1:]))


def test_a_malformed_collective_source_names_the_file_and_key(tmp_path):
    from opentikz_dt.predict.calibration import CalibrationError, load_calibration

    path = _cal_with_probed_collectives(tmp_path, measured="bench")
    with pytest.raises(CalibrationError, match=r"split.json: comm.allreduce.measured: 'bench' must be probe or run"):
        load_calibration(path)


def test_a_fit_says_which_collectives_its_run_measured(tmp_path):
    """A native all-reduce run sets the all-reduce's latency; broadcast and reduce stay the probe's."""
    from opentikz_dt.predict.calibration import Calibration, illustrative_calibration

    run_dir = write_synthetic_run(tmp_path / "run", "allreduce-native", workers=3, steps=12)
    base = json.loads(json.dumps(illustrative_calibration(load_run(run_dir).spec).data))
    for kind in ("allreduce", "broadcast", "reduce"):
        base["comm"][kind].update(measured="probe", rounds=[[1e-4, 1e-9], [2e-4, 1e-9]])
    fitted = fit_from_run(run_dir, base=Calibration(base, "probe.json")).data["comm"]
    assert [fitted[k]["measured"] for k in ("allreduce", "broadcast", "reduce")] == ["run", "probe", "probe"]
    # the probe's rounds go with the probe's fit: the run's all-reduce has none, the others keep theirs
    assert ["rounds" in fitted[k] for k in ("allreduce", "broadcast", "reduce")] == [False, True, True]


def _cal_with_crowding(tmp_path, ranks=2, wait_s=1e-3):
    """A calibration made with `ranks` processes on 2 cores whose crowded run (runner/crowding.py)
    measured `wait_s` per message with 4 processes."""
    path = _cal_with_split(tmp_path, ranks)
    data = json.loads(path.read_text())
    data["comm"]["p2p"].update(alpha_s=1e-4, core_wait_s=0.0, crowding={"cores": 2, "processes": 4, "wait_s": wait_s})
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("kind, workers, dedicated, wait_us", [
    ("allreduce-ring", 2, False, None),        # as many processes as cores: no wait
    ("allreduce-ring", 4, False, 1000.0),      # the probe's own crowding
    ("allreduce-ring", 8, False, 1500.0),      # a ring's hops: x (1 - 2/8) / (1 - 2/4)
    ("ps-sync", 2, False, 500.0),              # 2 workers + 1 server: 1 beyond the cores
    ("ps-sync", 5, False, 2000.0),             # lone messages: 4 beyond 2 cores, 2x the 2 beyond at 4
    ("allreduce-ring", 8, True, None),         # a core per rank
    ("allreduce-native", 8, False, 1500.0),    # gloo's ring: as a ring's hop, x (1 - 2/8) / (1 - 2/4)
])
def test_the_probes_crowded_wait_is_carried_to_more_processes_than_cores(tmp_path, kind, workers, dedicated,
                                                                         wait_us):
    from opentikz_dt.predict.predict import costs_for
    from opentikz_dt.spec import spec_from_data

    spec = spec_from_data(spec_data(kind, workers=workers, steps=10))
    costs, assumed, notes = costs_for(spec, _cal_with_crowding(tmp_path), dedicated=dedicated)
    extra = wait_us or 0.0
    assert costs.comm["p2p"][0] == pytest.approx(100.0 + extra)      # every message waits
    assert costs.comm["allreduce"][0] == pytest.approx(300.0 + extra)  # a collective's steps too
    assert assumed.get("message_wait_for_core_s") == (pytest.approx(wait_us / 1e6) if wait_us else None)
    if wait_us:
        law = "(k - 2)/2" if kind == "ps-sync" else "(1 - 2/k), as a ring's hop"
        assert f"a message waits {wait_us:.0f} us for a core (the crowded run: 1000 us with 4 " \
               f"processes on 2 cores, scaled by {law})" in " ".join(notes)


@pytest.mark.parametrize("link, wire_us", [("1gbit", 8.0 * 1000 / 1e9 * 1e6),     # 1 kB on 1 Gbit/s: 8 us
                                            ("1mbit", 8.0 * 1000 / 1e6 * 1e6)])    # 8000 us
def test_on_a_link_a_messages_wait_for_a_core_and_its_time_on_the_wire_overlap(tmp_path, link, wire_us):
    """8 processes of a ring on 2 cores wait 1500 us a message for a core (the crowded run's
    1000 us at 4, scaled by (1 - 2/8) / (1 - 2/4)). Through loopback the bytes add to it; on a given link only the longer of the
    wait and the wire counts, for a message and for each step of a collective."""
    from opentikz_dt.predict.predict import costs_for
    from opentikz_dt.spec import spec_from_data

    spec = spec_from_data(spec_data("allreduce-ring", workers=8, steps=10))
    loopback, _, _ = costs_for(spec, _cal_with_crowding(tmp_path), dedicated=False)
    costs, _, _ = costs_for(spec, _cal_with_crowding(tmp_path), link=link, dedicated=False)
    alpha = costs.comm["p2p"][0]
    assert alpha == pytest.approx(100.0 + 1500.0) and costs.contention.p2p_wait == pytest.approx(1500.0)
    assert costs.p2p(1000) == pytest.approx(alpha + max(0.0, wire_us - 1500.0))
    assert loopback.p2p(1000) == pytest.approx(alpha + 1000 * loopback.comm["p2p"][1])  # added, not overlapped
    step = costs.comm["allreduce"][0]
    assert costs.allreduce(8000, 8) == pytest.approx(14 * (step + max(0.0, wire_us - 1500.0)))
    alone, _, _ = costs_for(spec, _cal_with_crowding(tmp_path), link=link, dedicated=True)  # a core per rank
    assert alone.p2p(1000) == pytest.approx(alone.comm["p2p"][0] + wire_us)


@pytest.mark.parametrize("kind, workers, solved_s, hop_us", [
    ("allreduce-ring", 4, None, 1500.0),                       # the crowded run's own hop: alone + wait
    ("allreduce-ring", 8, None, 100.0 + 1400.0 * 0.75 / 0.5),  # its excess over the floor, x (1 - 2/8) / (1 - 2/4)
    ("allreduce-ring", 3, None, 100.0 + 1400.0 * (1 / 3) / 0.5),
    ("allreduce-ring", 4, 1.2e-3, 1200.0),                     # its hop as its fit solved it, where recorded
    ("allreduce-ring", 8, 1.2e-3, 100.0 + 1100.0 * 0.75 / 0.5),
    ("ps-sync", 7, 1.2e-3, 100.0 + 1000.0 * 6 / 2),            # another strategy: the wait alone, (k - 2) / 2
])
def test_a_ring_carries_its_crowded_runs_whole_hop(tmp_path, kind, workers, solved_s, hop_us):
    """The crowded ring run (4 processes on 2 cores) took 1.5 ms a hop: 0.5 ms its fastest
    hops ("alone", each waiting on a predecessor that waited for a core), 1 ms the wait
    beyond; its fit solved the hop from its step time at 1.2 ms. The ring calibrated with 2
    processes (a message alone 0.1 ms) is predicted with that whole hop at 4 and growing
    as (1 - c/k) beyond; another strategy with the wait."""
    from opentikz_dt.predict.predict import costs_for
    from opentikz_dt.spec import spec_from_data

    path = _cal_with_crowding(tmp_path, ranks=2)
    data = json.loads(path.read_text())
    data["comm"]["p2p"].update(alpha_s=1e-4, alpha_floor_s=1e-4, core_wait_s=0.0)
    data["comm"]["p2p"]["crowding"].update(alone_s=5e-4, strategy=dict(data["made_for"]["strategy"]))
    if solved_s is not None:
        data["comm"]["p2p"]["crowding"]["hop_s"] = solved_s
    path.write_text(json.dumps(data))
    spec = spec_from_data(spec_data(kind, workers=workers, steps=10))
    costs, assumed, notes = costs_for(spec, path, dedicated=False)
    assert costs.comm["p2p"][0] == pytest.approx(hop_us)
    assert assumed["message_wait_for_core_s"] == pytest.approx((hop_us - 100.0) / 1e6, abs=1e-7)
    said = "a ring hop waits" if kind == "allreduce-ring" else "a message waits"
    assert said in " ".join(notes)


def test_the_crowded_wait_replaces_the_calibration_runs_own_beyond_its_process_count(tmp_path):
    """A calibration run with 3 processes on 2 cores (a parameter server and 2 workers)
    measured its own wait per message; up to 3 processes that wait is carried as before,
    beyond 3 the crowded run's (made with 4) replaces it."""
    from opentikz_dt.predict.predict import costs_for
    from opentikz_dt.spec import spec_from_data

    path = _cal_with_crowding(tmp_path, ranks=3)
    data = json.loads(path.read_text())
    data["comm"]["p2p"].update(alpha_s=5e-4, alpha_floor_s=1e-4, core_wait_s=4e-4)
    path.write_text(json.dumps(data))
    same_count = spec_from_data(spec_data("allreduce-ring", workers=3, steps=10))
    costs, assumed, _ = costs_for(same_count, path, dedicated=False)
    assert "message_wait_for_core_s" not in assumed and costs.comm["p2p"][0] == pytest.approx(500.0)
    more = spec_from_data(spec_data("allreduce-ring", workers=6, steps=10))
    costs, assumed, _ = costs_for(more, path, dedicated=False)
    wait = 1e-3 * (1 - 2 / 6) / (1 - 2 / 4)  # a ring's hops: (1 - c/k) / (1 - c/2c)
    assert assumed["message_wait_for_core_s"] == pytest.approx(wait, rel=1e-4)  # run.json rounds it
    assert costs.comm["p2p"][0] == pytest.approx(100.0 + 1e6 * wait)     # the floor + the crowded wait


@pytest.mark.parametrize("kind, workers, dedicated, crowded_s, growth", [
    ("allreduce-ring", 4, False, 2.5e-3, 2.5),           # the crowded run's own process count
    ("allreduce-ring", 8, False, 2.5e-3, 1 + 1.5 * 1.5),  # (1 - 2/8) / (1 - 2/4): 1.5x the growth at 4
    ("allreduce-ring", 8, False, 0.5e-3, 1.0),           # a crowded run that measured less: noise, not shrunk
    ("allreduce-ring", 2, False, 2.5e-3, None),          # no more processes than cores
    ("allreduce-ring", 8, True, 2.5e-3, None),           # a core per rank
    ("ps-sync", 4, False, 2.5e-3, None),                 # the crowded ring says nothing of a server's gaps
])
def test_a_rings_untraced_time_grows_as_its_crowded_run_did(tmp_path, kind, workers, dedicated, crowded_s, growth):
    """A ring calibration made with 2 processes on 2 cores (1 ms untraced per step) whose
    crowded ring run (4 processes) measured `crowded_s`: a prediction of the ring at more
    processes scales each untraced gap as the chance of finding a core taken grows from 2
    processes to 4 (1 - c/k); another strategy, or a core per rank, keeps the calibration's own."""
    from opentikz_dt.predict.predict import costs_for
    from opentikz_dt.spec import spec_from_data

    path = _cal_with_crowding(tmp_path)
    data = json.loads(path.read_text())
    data["compute"]["step_overhead_s"] = 1e-3
    data["noise"] = {"overhead_s": [0.5e-3, 1.5e-3]}
    data["comm"]["p2p"]["crowding"].update(untraced_s=crowded_s, strategy=dict(data["made_for"]["strategy"]))
    path.write_text(json.dumps(data))
    spec = spec_from_data(spec_data(kind, workers=workers, steps=10))
    costs, assumed, notes = costs_for(spec, path, dedicated=dedicated)
    assert assumed.get("untraced_growth") == (None if growth is None else pytest.approx(growth))
    if kind == "allreduce-ring" and not dedicated:
        assert costs.overhead_us == pytest.approx(1000.0 * (growth or 1.0))
        assert costs.overheads == pytest.approx([500.0 * (growth or 1.0), 1500.0 * (growth or 1.0)])
    said = "its untraced time per step grows as the crowded run's did (1.00 ms with 2 processes"
    assert (said in " ".join(notes)) == (growth is not None)


def test_the_crowded_runs_untraced_time_is_carried_only_to_its_own_strategy(tmp_path):
    """A crowded run of another strategy than the calibration's (a tree calibration, a ring
    crowded run) grows nothing."""
    from opentikz_dt.predict.predict import costs_for
    from opentikz_dt.spec import spec_from_data

    path = _cal_with_crowding(tmp_path)
    data = json.loads(path.read_text())
    ring = dict(data["made_for"]["strategy"])
    data["made_for"]["strategy"] = dict(ring, algorithm="tree")
    data["comm"]["p2p"]["crowding"].update(untraced_s=5e-3, strategy=ring)
    path.write_text(json.dumps(data))
    for kind in ("allreduce-tree", "allreduce-ring"):
        _, assumed, _ = costs_for(spec_from_data(spec_data(kind, workers=8, steps=10)), path, dedicated=False)
        assert "untraced_growth" not in assumed


def test_a_malformed_crowding_names_the_file_and_key(tmp_path):
    from opentikz_dt.predict.calibration import CalibrationError, load_calibration

    path = _cal_with_crowding(tmp_path)
    data = json.loads(path.read_text())
    data["comm"]["p2p"]["crowding"]["processes"] = 2
    path.write_text(json.dumps(data))
    with pytest.raises(CalibrationError, match=r"split.json: comm.p2p.crowding.processes: 2 must be more than "
                                               r"comm.p2p.crowding.cores \(2\)"):
        load_calibration(path)
    data["comm"]["p2p"]["crowding"]["wait_s"] = "long"
    path.write_text(json.dumps(data))
    with pytest.raises(CalibrationError, match=r"comm.p2p.crowding.wait_s: 'long' is not a number"):
        load_calibration(path)
    data["comm"]["p2p"]["crowding"].update(wait_s=1e-3, processes=4, untraced_s=[1])
    path.write_text(json.dumps(data))
    with pytest.raises(CalibrationError, match=r"comm.p2p.crowding.untraced_s: \[1\] is not a number"):
        load_calibration(path)
    data["comm"]["p2p"]["crowding"]["untraced_s"] = 1e-3  # without the strategy it was measured on
    path.write_text(json.dumps(data))
    with pytest.raises(CalibrationError, match=r"comm.p2p.crowding.strategy: expected the crowded run's"):
        load_calibration(path)


def test_another_strategy_carries_the_floor_of_the_untraced_time_and_bounds_the_rest(tmp_path):
    """A ring run's untraced time per step holds its ranks' waits for a core between spans,
    which another strategy's ranks do not pay as the ring's do: only its low quantile is
    carried, and the interval's upper end is the prediction with its median (its mean holds
    the ring's long waits, which the other strategies measured here never reached)."""
    from opentikz_dt.predict.predict import costs_for, predict

    path = _cal_with_split(tmp_path)
    data = json.loads(path.read_text())
    gaps = [100e-6] * 4 + [1e-3] * 4 + [3e-3, 5e-3]          # 4 steps at the floor, 4 typical, 2 long waits
    data["noise"] = {"overhead_s": gaps}
    data["compute"]["step_overhead_s"] = sum(gaps) / len(gaps)
    path.write_text(json.dumps(data))
    from opentikz_dt.spec import spec_from_data

    ring = spec_from_data(spec_data("allreduce-ring", workers=4, steps=10))
    costs, assumed, _ = costs_for(ring, path)                 # the calibrated strategy: everything as measured
    assert costs.overheads and costs.upper is None and "untraced_per_step_s" not in assumed
    costs, _, _ = costs_for(ring, path, dedicated=True)        # a core per rank waits for none
    assert costs.overhead(1) == pytest.approx(100.0) and not costs.overheads and costs.upper is None
    ps = spec_file(tmp_path, "ps-sync", 3)
    costs, assumed, notes = costs_for(spec_from_data(yaml.safe_load(ps.read_text())), path)
    assert costs.overhead(1) == pytest.approx(100.0) and not costs.overheads
    assert assumed["untraced_per_step_s"] == pytest.approx(100e-6)
    assert "only the floor (0.10 ms of 1.24 ms" in notes[0]
    out, _ = predict(ps, tmp_path / "pred", calibration=path)
    metrics = json.loads((out / "metrics.json").read_text())
    step = sum(metrics["step_time_s"].values()) / len(metrics["step_time_s"])
    low, high = metrics["step_time_interval_s"]
    assert low <= step < high and high - step > 0.5e-3          # the median's 0.9 ms more, in the upper end
    assert high - step < 1.05e-3                                # not the mean's 1.14 ms more
    assert ("the calibrated strategy's median untraced time per step (1.00 ms) carried (upper end)"
            in metrics["interval_sources"])


@pytest.mark.parametrize("cores, ranks, workers", [
    (2, 2, 4), (2, 3, 4),   # fewer processes than 2 x cores: a ring of 2 x cores
    (2, 4, None),           # the calibration's own run crowds the cores as much
    (1, 1, None),           # one core: no uncrowded run to tell the wait from
    (8, 2, 16), (16, 2, None),   # 32 processes: past the bound
])
def test_the_crowded_run_is_made_where_the_calibration_does_not_crowd_as_much(cores, ranks, workers):
    from opentikz_dt.runner.crowding import crowded_workers

    assert crowded_workers(cores, ranks) == workers


def test_the_crowded_run_keeps_the_specs_model_and_training_under_a_ring():
    from opentikz_dt.runner.crowding import STEPS, crowded_spec_data
    from opentikz_dt.spec import spec_from_data

    data = spec_data("pipeline-gpipe", workers=3, steps=50)
    data["training"]["precision"] = "bf16"
    data["topology"]["workers"]["slowdown"] = {"w2": 3.0}
    spec = spec_from_data(data)
    crowded = spec_from_data(crowded_spec_data(spec, 4))      # a valid spec
    assert crowded.strategy.kind == "allreduce" and crowded.strategy.algorithm == "ring"
    assert crowded.topology.workers.count == 4 and not crowded.topology.workers.slowdown
    assert crowded.training.model == spec.training.model and crowded.training.precision == "bf16"
    assert crowded.training.steps == STEPS and crowded.runtime.device == "cpu"


def test_a_gossip_exchange_pays_a_wait_for_a_core_per_message_it_receives(tmp_path):
    """With 2 peers a rank waits on 2 receives, one after the other (runner/strategies/gossip.py):
    one latency (the messages travel at once) and a second wait for a core, and its 2 sends'
    bytes one after the other on its link."""
    from opentikz_dt.predict.blocks import model_blocks
    from opentikz_dt.predict.contention import Contention
    from opentikz_dt.predict.costs import Costs
    from opentikz_dt.predict.predict import costs_for
    from opentikz_dt.predict.simulate import simulate
    from opentikz_dt.spec import spec_from_data

    data = spec_data("gossip", workers=4, steps=3)
    data["strategy"]["peers"] = 2
    spec = spec_from_data(data)
    costs, _, _ = costs_for(spec, _cal_with_split(tmp_path), dedicated=False)  # 900 us of 1 ms a wait
    params = sum(b.params for b in model_blocks(spec))
    alpha, beta = costs.comm["p2p"]
    assert costs.contention.p2p_wait == pytest.approx(900.0) and alpha == pytest.approx(1000.0)
    expected = alpha + 900.0 + 2 * 4 * params * beta + 1e6 * costs.add_s * params * 2
    spans = [e for e in simulate(spec, costs).events[0] if e["name"] == "gossip"]
    assert spans and all(e["dur"] == pytest.approx(expected, rel=1e-6) for e in spans)
    alone = Costs(costs.cal, spec, contention=Contention.none(costs.cal))  # a core per rank: no second wait
    spans = [e for e in simulate(spec, alone).events[0] if e["name"] == "gossip"]
    assert alone.contention.p2p_wait == 0.0 and spans[0]["dur"] == pytest.approx(
        alone.comm["p2p"][0] + 2 * 4 * params * beta + 1e6 * alone.add_s * params * 2, rel=1e-6)


def test_a_gossip_exchange_from_a_ring_calibration_draws_each_receive_from_its_messages_spread(tmp_path):
    """A ring calibration holds its hops' spread (message_ratios); a gossip exchange carried
    from it draws one ratio per receive and pays their mean, so a long message delays the
    exchange, and the neighbours after it, as in a run."""
    from opentikz_dt.predict.blocks import model_blocks
    from opentikz_dt.predict.predict import costs_for
    from opentikz_dt.predict.simulate import simulate
    from opentikz_dt.spec import spec_from_data

    data = spec_data("gossip", workers=4, steps=40)
    data["strategy"]["peers"] = 2
    spec = spec_from_data(data)
    plain, _, _ = costs_for(spec, _cal_with_split(tmp_path), dedicated=False)
    params = sum(b.params for b in model_blocks(spec))
    alpha, beta = plain.comm["p2p"]
    constant = alpha + 900.0 + 2 * 4 * params * beta + 1e6 * plain.add_s * params * 2
    cal = json.loads((tmp_path / "split.json").read_text())
    cal["noise"] = {"message_ratios": [0.5, 1.5]}
    (tmp_path / "spread.json").write_text(json.dumps(cal))
    costs, _, _ = costs_for(spec, tmp_path / "spread.json", dedicated=False)
    assert exchanges(simulate(spec, costs), spec, constant) == {0.5, 1.0, 1.5}  # (0.5+0.5)/2, (0.5+1.5)/2, (1.5+1.5)/2
    assert exchanges(simulate(spec, plain), spec, constant) == {1.0}
    # its own exchanges' spread, where the calibration has one, is drawn whole instead
    cal["noise"]["exchange_ratios"] = [2.0]
    (tmp_path / "own.json").write_text(json.dumps(cal))
    own, _, _ = costs_for(spec, tmp_path / "own.json", dedicated=False)
    assert exchanges(simulate(spec, own), spec, constant) == {2.0}


def exchanges(result, spec, unit) -> set:
    """Each simulated gossip exchange from the moment its rank and every neighbour were
    ready (their spans' starts) to its end, over `unit`."""
    from opentikz_dt.strategies.gossip.strategy import neighbours

    spans = {(rank, e["args"]["step"]): e for rank, events in result.events.items() for e in events
             if e["name"] == "gossip"}
    out = set()
    for (rank, step), e in spans.items():
        to, frm = neighbours(rank, spec.topology.workers.count, spec.strategy.peers)
        begin = max(spans[(p, step)]["ts"] for p in [rank] + to + frm)
        out.add(round((e["ts"] + e["dur"] - begin) / unit, 6))
    return out


def test_a_ring_fit_records_its_messages_spread(tmp_path):
    ring = fit_from_run(write_synthetic_run(tmp_path / "ring", "allreduce-ring", workers=3, steps=12))
    ratios = ring.data["noise"]["message_ratios"]
    assert len(ratios) >= 5 and sum(ratios) / len(ratios) == pytest.approx(1.0, abs=0.02) and min(ratios) > 0
    native = fit_from_run(write_synthetic_run(tmp_path / "native", "allreduce-native", workers=3, steps=12))
    assert "message_ratios" not in native.data["noise"]  # no message shows alone


def _ring_on_two_cores(latency_s: float, workers: int = 8):
    from opentikz_dt.predict.calibration import Calibration, illustrative_calibration
    from opentikz_dt.predict.costs import Costs
    from opentikz_dt.spec import spec_from_data

    spec = spec_from_data(spec_data("allreduce-ring", workers=workers, steps=10))
    data = json.loads(json.dumps(illustrative_calibration(spec, latency_s=latency_s).data))
    data["cores_effective"] = 2.0
    return spec, Costs(Calibration(data, "two-cores.json"), spec)


@pytest.mark.parametrize("latency_s, duty_range", [(2e-2, (0.0, 0.2)), (1e-7, (0.9, 1.0))])
def test_compute_is_shared_by_the_ranks_computing_at_once(latency_s, duty_range):
    """8 ranks on 2 cores: where messages take most of a step a rank computes a small share of
    it and compute runs nearly as alone; where compute is all there is, 4 times slower."""
    from opentikz_dt.predict.simulate import simulate

    spec, costs = _ring_on_two_cores(latency_s)
    alone = costs.forward(64)  # before settling: every rank computing at once
    assert alone == pytest.approx(costs.contention.share(8) * costs.forward(64) / costs.contention.share(8))
    simulate(spec, costs)
    lo, hi = duty_range
    assert lo <= costs.contention.duty <= hi
    assert costs.contention.share(8) == pytest.approx(max(1.0, (1 + 7 * costs.contention.duty) / 2))
    assert costs.forward(64, active=8) == pytest.approx(costs.contention.share(8) * costs.forward(64, active=1))


def test_a_runs_duty_leaves_out_the_waits_its_compute_spans_hold():
    """A DDP backward holding the last bucket's all-reduce computes only until the bucket
    is ready; a straggler's slowdown sleeps."""
    from types import SimpleNamespace

    from opentikz_dt.predict.phases import duty

    def span(pid, tid, name, ts, dur, step=1):
        return {"pid": pid, "tid": tid, "name": name, "ts": ts, "dur": dur, "args": {"step": step}}

    events = [span(0, 0, "forward", 0, 10, step=0),                      # the first step: left out
              span(0, 0, "forward", 100, 20), span(0, 0, "backward", 120, 60),
              span(0, 1, "allreduce", 150, 30),                          # inside the backward: a wait
              span(0, 0, "slowdown", 180, 20),
              span(1, 0, "forward", 100, 20), span(1, 0, "backward", 120, 30), span(1, 1, "allreduce", 150, 50)]
    run = SimpleNamespace(trace=SimpleNamespace(events=events, steps=[0, 1]))
    # rank 0 computes 20 + 30, rank 1 20 + 30, over 100 us (100 to 200)
    assert duty(run) == pytest.approx(0.5)


def test_a_pipeline_fit_keeps_the_latency_its_trace_shows_for_another_schedule(tmp_path):
    """A synthetic GPipe run's messages take the synthetic latency and bytes (x its jitter of
    0.85-1.25; the messages a receiver waited for lean long). 1F1B from its fit is predicted
    with the traced latency, the interval's upper end and GPipe itself with the solved one."""
    from opentikz_dt.predict.predict import costs_for
    from opentikz_dt.spec import spec_from_data

    run_dir = write_synthetic_run(tmp_path / "run", "pipeline-gpipe", workers=3, steps=20)
    fitted = fit_from_run(run_dir)
    p2p = fitted.data["comm"]["p2p"]
    assert 2.5e-4 * 0.85 <= p2p["alpha_traced_s"] <= 2.5e-4 * 1.4  # synthetic_calibration's latency, jittered
    path = fitted.save(tmp_path / "gpipe.json")
    other = spec_from_data(spec_data("pipeline-1f1b", workers=3, steps=20))
    costs, assumed, notes = costs_for(other, path, dedicated=False)
    assert costs.comm["p2p"][0] == pytest.approx(p2p["alpha_traced_s"] * 1e6)
    assert costs.upper.comm["p2p"][0] == pytest.approx(p2p["alpha_s"] * 1e6)
    assert assumed["message_latency_traced_s"] == pytest.approx(p2p["alpha_traced_s"], abs=1e-7)
    assert any("its message latency as its trace showed it" in n for n in notes)
    same, assumed, _ = costs_for(load_run(run_dir).spec, path, dedicated=False)  # GPipe itself: the solved one
    assert same.comm["p2p"][0] == pytest.approx(p2p["alpha_s"] * 1e6) and "message_latency_traced_s" not in assumed


def test_a_fit_of_a_run_on_shared_cores_predicts_it_back(tmp_path):
    from opentikz_dt.predict.costs import Costs

    """A ring simulated on 2 cores (its compute shared by the ranks computing at once), written
    as a run and fitted: the fit takes its compute alone as the simulator shares it."""
    from opentikz_dt.predict.rundir import metrics_of, write_run_dir
    from opentikz_dt.predict.simulate import simulate

    spec, costs = _ring_on_two_cores(3e-3, workers=4)
    made = simulate(spec, costs, steps=12)
    assert 0.2 < costs.contention.duty < 0.8  # compute and messages both matter
    run_dir = write_run_dir(tmp_path / "run", spec, made, 12, predicted={"calibration": "two-cores.json"})
    fitted = fit_from_run(run_dir, base=costs.cal)
    assert fitted.data["compute"]["blocks"][0]["forward"][1] == pytest.approx(
        costs.cal.data["compute"]["blocks"][0]["forward"][1], rel=0.1)
    predicted = metrics_of(simulate(spec, Costs(fitted, spec), steps=12), spec, 12)["step_time_s"]
    measured = load_run(run_dir).metrics["step_time_s"]
    for w in measured:
        assert predicted[w] == pytest.approx(measured[w], rel=0.1), w


def test_a_tree_hop_waits_for_a_core_as_the_ranks_runnable_then(tmp_path):
    """4 ranks on 2 cores, 900 us of a message's 1 ms a wait: going up, the last level runs
    with the 2 leaves blocked (2 runnable on 2 cores: no wait); coming down, the first hop
    with 1 rank still blocked (3 runnable: a third of the wait left)."""
    from opentikz_dt.predict.predict import costs_for
    from opentikz_dt.spec import spec_from_data

    data = spec_data("allreduce-ring", workers=4, steps=4)
    data["strategy"]["algorithm"] = "tree"
    spec = spec_from_data(data)
    costs, _, _ = costs_for(spec, _cal_with_split(tmp_path), dedicated=False)
    per = costs.p2p(4000) + costs.p2p_bytes(4000)  # a parent's link shared by its 2 children
    assert costs.contention.p2p_wait == pytest.approx(900.0)
    assert costs.tree_pass(4000, 4) == pytest.approx(2 * per - 900.0)
    assert costs.tree_pass(4000, 4, down=True) == pytest.approx(2 * per - 900.0 * (1 - (1 - 2 / 3) / (1 - 2 / 4)))
    alone, _, _ = costs_for(spec, _cal_with_split(tmp_path), dedicated=True)  # no wait to take off
    assert alone.tree_pass(4000, 4) == pytest.approx(2 * (alone.p2p(4000) + alone.p2p_bytes(4000)))


@pytest.mark.parametrize("kind, says", [("allreduce-native", True), ("ps-sync", False)])
def test_the_probed_collectives_wait_is_said_only_where_the_strategy_runs_one(tmp_path, kind, says):
    """A parameter server sends messages only: its prediction from a ring calibration does not
    speak of collectives; the native all-reduce's does, in run.json and the figures' note."""
    from opentikz_dt.predict.predict import predict

    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(spec_data(kind, workers=3, steps=6)))
    out, warnings = predict(spec, tmp_path / "pred", calibration=_cal_with_probed_collectives(tmp_path))
    predicted = json.loads((out / "run.json").read_text())["predicted"]
    assert ("collective_wait_for_core_s" in predicted) == says
    note = "probed collectives wait for a core as the run's messages do"
    assert any(n.startswith(note) for n in predicted["transfer"]) == says
    assert (note in predicted["transfer_note"]) == says
    assert any(w.startswith(note) for w in warnings) == says
    assert predicted["transfer"][0].startswith("calibrated on allreduce ring")  # the strategy's caveat stays


def _ps_cal(tmp_path, workers=2, per_send_s=400e-6):
    """A calibration as a fit of a sync parameter server with `workers` workers on 2 cores
    leaves it: its server's untraced time after an update is its sends, one per worker."""
    from opentikz_dt.predict.calibration import illustrative_calibration
    from opentikz_dt.spec import spec_from_data

    spec = spec_from_data(spec_data("ps-sync", workers=workers, steps=10))
    data = json.loads(json.dumps(illustrative_calibration(spec).data))
    data.update(source="run", cores_effective=2.0, made_for={"strategy": dict(spec.data["strategy"]),
                                                            "workers": workers, "ranks": workers + 1, "hosts": 1})
    data["compute"]["server_overhead_s"] = workers * per_send_s
    data["comm"]["p2p"]["beta_s_per_byte"] = 1e-11  # a shard's bytes: far less than its send
    path = tmp_path / "ps.json"
    path.write_text(json.dumps(data))
    return path


def _fetch_and_server_gap(result, n):
    """Per worker, its mean steady fetch (µs); the server's mean untraced time after an update."""
    fetch = [[e["dur"] for e in result.events[k] if e.get("name") == "fetch" and e["args"]["step"] > 0]
             for k in range(n)]
    server = sorted((e["ts"], e["ts"] + e["dur"], e["name"]) for e in result.events[n] if "dur" in e)
    gaps = [b[0] - a[1] for a, b in zip(server, server[1:]) if a[2] == "update"]
    return [sum(f) / len(f) for f in fetch], sum(gaps) / len(gaps)


@pytest.mark.parametrize("workers, per_send_us", [
    (2, 400.0),  # the calibrated size: its sends as they were
    (4, 400.0),  # 5 processes on 2 cores: as measured too (a send 464-738 us at 4 workers, 476-620 at 2)
    (8, 400.0),
])
def test_a_sync_server_posts_its_sends_one_after_another(tmp_path, workers, per_send_us):
    """runner/strategies/parameter_server.py: after its update a sync server posts a send to
    each worker in turn, and each takes its CPU (measured on 2 cores: 476-620 us a send at 2 workers,
    560-752 at 8, parameter_server._send_us); the k-th worker's weights leave once k + 1 were posted, the
    message's own latency (300 us here, less than a send) running meanwhile."""
    from opentikz_dt.predict.predict import costs_for
    from opentikz_dt.predict.simulate import simulate
    from opentikz_dt.spec import spec_from_data

    spec = spec_from_data(spec_data("ps-sync", workers=workers, steps=6))
    costs, _, _ = costs_for(spec, _ps_cal(tmp_path))
    fetch, gap = _fetch_and_server_gap(simulate(spec, costs), workers)
    assert gap == pytest.approx(workers * per_send_us, rel=1e-6)
    assert fetch[-1] - fetch[0] == pytest.approx((workers - 1) * per_send_us, rel=0.02)
    assert fetch[-1] == pytest.approx(workers * per_send_us, rel=0.02)  # not 300 us more: they overlap
    # a calibration made on another strategy shows no server's sends: none is assumed
    ring, _, _ = costs_for(spec, _cal_with_split(tmp_path))
    assert _fetch_and_server_gap(simulate(spec, ring), workers)[1] == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("message_us, send_us, workers, seen", [
    (420.0, 80.0, 2, True),     # 2 workers on 2 cores: the fetch is the message's (a push: 100 us)
    (2500.0, 450.0, 8, True),   # 8 workers: the message, and the later fetches behind the sends
    (300.0, 400.0, 4, False),   # every fetch waits for the sends: they say nothing of the message
])
def test_a_sync_fit_counts_the_fetches_as_the_message_behind_the_sends(message_us, send_us, workers, seen):
    """The fit inverts the simulator's fetch (`_fetch_us`): the mean of n fetches gives back
    the message that made them. Fitting from the pushes alone instead ran 35-44% low on the
    2-worker self-fit here, where a fetch took 420 us and a push 100."""
    from opentikz_dt.strategies.parameter_server import predict as ps

    queued = 35.0
    mean_fetch = sum(ps._fetch_us(message_us, queued, send_us, k) for k in range(workers)) / workers
    found = ps._message_behind_sends(mean_fetch, queued, send_us, workers)
    if seen:
        assert found == pytest.approx(message_us, rel=1e-6)
    else:
        assert found is None


def test_a_sync_server_fit_takes_its_sends_out_of_the_message_latency(tmp_path):
    """Simulated with 400 us a send, written as a run and fitted: the fit finds the sends in
    the server's untraced time, and the message latency without them, so the run predicts back."""
    from opentikz_dt.predict.calibration import Calibration
    from opentikz_dt.predict.costs import Costs
    from opentikz_dt.predict.rundir import metrics_of, write_run_dir
    from opentikz_dt.predict.simulate import simulate
    from opentikz_dt.spec import spec_from_data

    spec = spec_from_data(spec_data("ps-sync", workers=4, steps=12))
    data = json.loads(_ps_cal(tmp_path, workers=4).read_text())
    costs = Costs(Calibration(data, "ps.json"), spec)
    made = simulate(spec, costs, steps=12)
    run_dir = write_run_dir(tmp_path / "run", spec, made, 12, predicted={"calibration": "ps.json"})
    fitted = fit_from_run(run_dir, base=costs.cal)
    assert fitted.data["compute"]["server_overhead_s"] == pytest.approx(4 * 400e-6, rel=0.01)
    assert fitted.data["comm"]["p2p"]["alpha_s"] == pytest.approx(data["comm"]["p2p"]["alpha_s"], rel=0.05)
    predicted = metrics_of(simulate(spec, Costs(fitted, spec), steps=12), spec, 12)["step_time_s"]
    measured = load_run(run_dir).metrics["step_time_s"]
    for w in measured:
        assert predicted[w] == pytest.approx(measured[w], rel=0.05), w


def _gpu_cal(tmp_path, ranks=2, gpus=1):
    """A fit of a ring run, as if made with `ranks` ranks sharing `gpus` GPUs of one node."""
    path = tmp_path / "gpu.json"
    fit_from_run(write_synthetic_run(tmp_path / "run", "allreduce-ring", workers=ranks, steps=10)).save(path)
    data = json.loads(path.read_text())
    data["device"] = {"kind": "cuda", "name": "NVIDIA H100 80GB HBM3", "count": gpus}
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("kind, workers, gpus, said", [
    ("allreduce-ring", 4, 1, "calibrated with 2 ranks per GPU, predicted with 4: "),
    ("ps-sync", 2, 1, "calibrated with 2 ranks per GPU, predicted with 3: "),  # + its server
    ("allreduce-ring", 2, 1, None),     # the calibrated sharing itself
    ("allreduce-ring", 4, 4, None),     # a GPU per rank both ways: nothing shared
    ("allreduce-ring", 8, 4, "calibrated with 1 rank per GPU, predicted with 2: "),
])
def test_another_number_of_ranks_per_gpu_is_said_not_scaled(tmp_path, kind, workers, gpus, said):
    from opentikz_dt.predict.predict import costs_for
    from opentikz_dt.spec import spec_from_data

    data = spec_data(kind, workers=workers, steps=10)
    made_with = 2 if gpus == 1 else gpus  # 2 ranks on 1 GPU, or a GPU each
    _, assumed, warnings = costs_for(spec_from_data(data), _gpu_cal(tmp_path, made_with, gpus))
    shared = [n for n in assumed.get("transfer", []) if "per GPU" in n]
    if said is None:
        assert shared == []
    else:
        assert len(shared) == 1 and shared[0].startswith(said) and shared[0] in warnings
        assert "not scaled" in shared[0]
        assert said.split(":")[0] in assumed["transfer_note"]  # the figures' note names it
