"""The pipeline schedules torch ships: their order comes from torch's own schedule class,
played with balanced stages it has the bubble their papers state, and a run executes the
order the schedule issues (docs/pipeline-schedules.md)."""

from __future__ import annotations

import importlib.util
import json
import re

import pytest

from opentikz_dt.predict.expected import illustrative_timeline, schedules_timeline
from opentikz_dt.spec import spec_from_data
from opentikz_dt.strategies.pipeline_schedules import (SCHEDULES, ScheduleOrderError, play, rank_orders,
                                                       reference_bubble, stages_per_rank)

needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="the multi-stage orders come from torch's schedule classes")
# Equal forward and backward costs (the check): F = B, a split backward's halves
# I = W = B/2.
EQUAL = {"F": 1.0, "B": 1.0, "I": 0.5, "W": 0.5}


def _spec(schedule: str, p: int, m: int, v: int | None = None):
    strategy = {"kind": "pipeline", "schedule": schedule, "microbatches": m}
    if v is not None:
        strategy["stages_per_rank"] = v
    return spec_from_data({"strategy": strategy, "topology": {"workers": {"count": p}},
                           "training": {"model": {"layers": [64] * (p * (v or 2) + 1)}, "batch_size": 8 * m}})


def _bubble(schedule: str, p: int, m: int, v: int | None = None) -> float:
    """The idle share of the ranks up to the flush, the order played as early as its
    dependencies allow (`play`, which the simulator plays too) with balanced stages, EQUAL
    costs and free messages: the ideal pipeline the papers' bubbles describe."""
    s = _spec(schedule, p, m, v).strategy
    v = stages_per_rank(s)
    played = play(rank_orders(s.schedule, p, m, v), p, p * v, s.schedule, lambda r, op, st: EQUAL[op],
                  lambda op, src, dst: 0.0)
    flush = max(a.end for a in played)
    return 1 - sum(a.end - a.start for a in played) / (p * flush)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("p, m", [(2, 4), (4, 8), (3, 5)])
def test_gpipe_and_1f1b_bubble_is_p_minus_1_over_m_plus_p_minus_1(schedule, p, m):
    assert _bubble(schedule, p, m) == pytest.approx((p - 1) / (m + p - 1), abs=1e-9)


@needs_torch
@pytest.mark.parametrize("schedule", ["interleaved-1f1b", "looped-bfs"])
def test_interleaved_bubble_is_p_minus_1_over_vm_plus_p_minus_1(schedule):
    """Megatron's (1/v)(p-1)/m of the ideal time is (p-1)/(vm+p-1) of the whole step (the
    form the caption states); measured 0.1579 at p=4, m=8, v=2."""
    p, m, v = 4, 8, 2
    drawn = _bubble(schedule, p, m, v)
    assert drawn == pytest.approx((p - 1) / (v * m + p - 1), abs=1e-9)
    assert drawn == pytest.approx(reference_bubble(schedule, p, m, v)[0], abs=1e-9)


@needs_torch
@pytest.mark.parametrize("schedule", ["interleaved-zero-bubble", "zbv-zero-bubble", "dualpipev"])
def test_zero_bubble_schedules_stay_below_1f1b(schedule):
    """Measured (p=4, m=8): interleaved ZB and DualPipeV 0.0857, ZB-V 0.1111, against
    1F1B's 0.2727."""
    p, m = 4, 8
    assert _bubble(schedule, p, m) < _bubble("1f1b", p, m) - 0.05


@needs_torch
def test_the_order_is_torch_s_own_table():
    """The multi-stage order is what torch's class computes (its pipeline_order, F/I/W/B
    only, DualPipeV's overlapped pairs as their parts)."""
    from torch.distributed.pipelining import schedules

    from opentikz_dt.runner.schedule_order import _StandInStage

    ours = rank_orders("interleaved-zero-bubble", 2, 4, 2)
    stages = [_StandInStage(i, 4, 2, 0) for i in (0, 2)]
    table = schedules.ScheduleInterleavedZeroBubble(stages, 4, loss_fn=lambda o, t: o).pipeline_order
    for r in range(2):
        theirs = [(a.computation_type.value, a.microbatch_index, a.stage_index) for a in table[r] if a is not None]
        assert list(ours[r]) == theirs
    assert {op for rank in ours for op, _, _ in rank} == {"F", "I", "W"}


@needs_torch
def test_torch_s_refusal_is_one_line():
    with pytest.raises(ScheduleOrderError) as caught:
        rank_orders("dualpipev", 4, 4, 2)
    assert str(caught.value) == ("torch's dualpipev schedule refused: DualPipeV requires at least as many "
                                 "microbatches as stages, but got 4 microbatches and 8 stages.")


def test_play_refuses_a_deadlocked_order():
    orders = ((("B", 0, 0), ("F", 0, 0)), (("F", 0, 1), ("B", 0, 1)))
    with pytest.raises(ScheduleOrderError, match="deadlocked"):
        play(orders, 2, 2, "1f1b", lambda r, op, s: 1.0, lambda op, a, b: 0.0)


def test_every_schedule_names_a_torch_class_and_a_paper():
    assert set(SCHEDULES) == {"gpipe", "1f1b", "interleaved-1f1b", "looped-bfs", "interleaved-zero-bubble",
                              "zbv-zero-bubble", "dualpipev"}
    for s in SCHEDULES.values():
        assert s.torch_class.startswith("Schedule") and s.paper


# ---------------------------------------------------------------- real runs


@pytest.fixture(scope="module")
def torch_mod():
    return pytest.importorskip("torch")


MODEL = {"layers": [16, 32, 32, 32, 4]}  # 4 layers: 2 workers x 2 chunks


def _compute_order(run_dir, rank: int, step: int) -> list:
    events = json.loads((run_dir / "trace.json").read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    out = []
    for e in events:
        a = e.get("args", {})
        if e.get("pid") == rank and e.get("name") in ("forward", "backward") and a.get("step") == step:
            op = "F" if e["name"] == "forward" else {"both": "B", "input": "I", "weight": "W"}[a["grad"]]
            out.append((op, a["mb"], a["stage"] - 1))
    return out


@pytest.mark.dist
@needs_torch
@pytest.mark.parametrize("schedule", ["interleaved-1f1b", "looped-bfs", "interleaved-zero-bubble",
                                      "zbv-zero-bubble", "dualpipev"])
def test_run_equals_single_and_executes_the_schedule_s_order(schedule, torch_mod, tmp_path):
    """Numerics: the parameters after 3 steps equal `single`'s on the global batch
    (measured max abs difference 1.5e-8 for every schedule, fp32; tolerance as the
    pipeline numerics test's). Order: each rank's traced compute, in time order, is the
    schedule's own table."""
    from opentikz_dt.runner.testing import run_small, single_reference, small_spec_data

    run = run_small(small_spec_data("pipeline", topology={"workers": {"count": 2}},
                                    strategy={"schedule": schedule, "microbatches": 4},
                                    training={"model": MODEL, "steps": 3}), root=tmp_path)
    ref = single_reference(1, steps=3, root=tmp_path, training={"model": MODEL})
    got, want = (torch_mod.load(r.run_dir / "model.pt") for r in (run, ref))
    assert sorted(got) == sorted(want)
    for name in want:
        torch_mod.testing.assert_close(got[name], want[name], atol=1e-5, rtol=1e-4)
    orders = rank_orders(schedule, 2, 4, 2)
    for rank in (0, 1):
        assert _compute_order(run.run_dir, rank, 1) == list(orders[rank])


def test_a_schedule_this_torch_lacks_is_refused_in_one_located_line(torch_mod, monkeypatch, tmp_path):
    """torch 2.10, the oldest supported, may lack a newer schedule class: the preflight's
    model check refuses it at strategy.schedule before any rank starts."""
    from torch.distributed.pipelining import schedules

    from opentikz_dt.errors import InputError
    from opentikz_dt.runner.strategies import pipeline as runner_pipeline
    from opentikz_dt.spec import load_spec

    path = tmp_path / "s.yaml"
    path.write_text("topology: {workers: {count: 2}}\n"
                    "strategy: {kind: pipeline, schedule: dualpipev, microbatches: 4}\n"
                    "training: {model: {layers: [8, 8, 8, 8, 4]}}\n")
    spec = load_spec(path)
    monkeypatch.delattr(schedules, "ScheduleDualPipeV")
    with pytest.raises(InputError) as caught:
        runner_pipeline.check_model(spec, None, [], "training.model")
    assert str(caught.value) == (f"{path}:2:38: strategy.schedule: dualpipev runs through "
                                 "torch.distributed.pipelining.ScheduleDualPipeV from torch 2.13 on; this is torch "
                                 f"{torch_mod.__version__} (use gpipe or 1f1b, or torch 2.13 or newer)")


def test_multi_stage_schedules_are_refused_before_torch_2_13(torch_mod, monkeypatch):
    """torch 2.10 has the classes but fails their runs (a V's self-send over gloo) or draws no
    microbatch (other chunk methods): before 2.13 they are refused as if absent."""
    from opentikz_dt.runner.schedule_order import schedule_class

    monkeypatch.setattr(torch_mod, "__version__", "2.10.0+cu128")
    assert schedule_class("dualpipev") is None and schedule_class("interleaved-1f1b") is None
    assert schedule_class("1f1b") is not None and schedule_class("gpipe") is not None


@needs_torch
def test_expected_zero_bubble_draws_each_w_as_a_weight_gradient_box():
    (panel,) = illustrative_timeline(_spec("zbv-zero-bubble", 2, 4)).panels
    for lane in ("w1", "w2"):
        boxes = next(x for x in panel.lanes if x.id == lane).boxes
        kinds = [b.kind for b in boxes]
        assert kinds.count("wgrad") == 4 * 2  # one step: every microbatch on both of the worker's stages
        assert kinds.count("forward") == 4 * 2
    labels = {b.label for b in panel.lanes[0].boxes if b.kind == "forward"}
    assert labels == {"1a", "2a", "3a", "4a", "1b", "2b", "3b", "4b"}


@needs_torch
def test_schedules_figure_puts_the_five_on_one_axis_and_names_what_it_leaves_out():
    timeline = schedules_timeline(_spec("1f1b", 2, 4))
    assert [p.title for p in timeline.panels] == ["GPipe pipeline", "1F1B pipeline", "Interleaved 1F1B pipeline",
                                                  "ZB-V pipeline", "DualPipeV pipeline"]
    ends = [max(b.end_ms for lane in p.lanes for b in lane.boxes) for p in timeline.panels]
    assert timeline.end_ms == pytest.approx(max(ends))
    assert all(p.note.startswith("bubble ") and p.note.endswith("expected") is False for p in timeline.panels)
    assert timeline.axis_unit_ms == pytest.approx(timeline.end_ms - timeline.start_ms)  # relative units
    short = schedules_timeline(_spec("1f1b", 2, 2))  # DualPipeV needs 2p = 4 microbatches
    assert len(short.panels) == 4
    assert short.note.endswith("not drawn (the spec's shape does not fit): DualPipeV")


def test_schedules_figure_refuses_another_kind(tmp_path):
    from click.testing import CliRunner

    from opentikz_dt.cli import main

    path = tmp_path / "s.yaml"
    path.write_text("strategy: {kind: allreduce}\n")
    result = CliRunner().invoke(main, ["figure", str(path), "--kind", "schedules", "-o", str(tmp_path / "f")])
    assert result.exit_code == 1
    assert result.output.splitlines()[-1] == ("dtgen: error: strategy.kind: --kind schedules draws the pipeline "
                                              "schedules of a kind: pipeline spec, not allreduce")
    assert not (tmp_path / "f").exists() or not any((tmp_path / "f").iterdir())


@pytest.mark.dist
@needs_torch
@pytest.mark.parametrize("schedule", ["dualpipev", "interleaved-1f1b"])
def test_tied_embedding_equals_single_with_both_ends_on_one_worker_or_two(schedule, torch_mod, tmp_path):
    """The transformer's tied embedding: a V puts the first and last stage on worker 0 (a
    copy summed locally), a loop on workers 0 and 1 (all-reduced). Measured 1.5e-8 off
    `single` for both; one Parameter shared by a V's two stages was 3.4e-2 off."""
    from opentikz_dt.runner.testing import TINY_TRANSFORMER, run_small, small_spec_data

    training = {"model": {**TINY_TRANSFORMER, "layers": 4}, "steps": 3, "dataset": {"samples": 512},
                "batch_size": 16}
    run = run_small(small_spec_data("pipeline", topology={"workers": {"count": 2}},
                                    strategy={"schedule": schedule, "microbatches": 4}, training=training),
                    root=tmp_path)
    ref = run_small(small_spec_data("single", training=training), root=tmp_path)
    got, want = (torch_mod.load(r.run_dir / "model.pt") for r in (run, ref))
    assert sorted(got) == sorted(want)
    for name in want:
        torch_mod.testing.assert_close(got[name], want[name], atol=1e-5, rtol=1e-4)


@needs_torch
def test_schedules_figure_draws_the_papers_bubbles_with_free_messages():
    """The side-by-side figure plays each order with free messages, as the papers do: with
    balanced stages GPipe and 1F1B idle (p-1)/(m+p-1), interleaved 1F1B (p-1)/(vm+p-1), the
    zero-bubble schedules less than 1F1B (the backward being 2F here, not F, they are not 0)."""
    p, m = 3, 6
    notes = {panel.title: panel.note for panel in schedules_timeline(_spec("1f1b", p, m)).panels}
    drawn = {title: float(re.match(r"bubble (\d+)% expected", note).group(1)) / 100 for title, note in notes.items()}
    assert drawn["GPipe pipeline"] == pytest.approx((p - 1) / (m + p - 1), abs=0.01)
    assert drawn["1F1B pipeline"] == pytest.approx((p - 1) / (m + p - 1), abs=0.01)
    assert drawn["Interleaved 1F1B pipeline"] == pytest.approx((p - 1) / (2 * m + p - 1), abs=0.01)
    assert drawn["ZB-V pipeline"] < drawn["1F1B pipeline"] and drawn["DualPipeV pipeline"] < drawn["1F1B pipeline"]
