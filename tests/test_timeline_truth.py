"""The expected timelines draw what the strategies do: measured on the drawn boxes."""

from __future__ import annotations

import re

import pytest

from opentikz_dt.predict.expected import illustrative_timeline as expected_timeline
from opentikz_dt.figures.timeline import ZERO_CM, draw_timeline, fit_lanes
from opentikz_dt.spec import spec_from_data


def _spec(kind="parameter-server", workers=3, **extra):
    data = {"strategy": {"kind": kind, **extra.pop("strategy", {})}, "topology": {"workers": {"count": workers}}}
    data.update(extra)
    return spec_from_data(data)


def _drawn(timeline, panel=0):
    """lane id -> [(style, x0, x1)] of the drawn boxes."""
    drawing = draw_timeline(timeline)
    p = drawing.panels[panel]
    out = {lane.name.rsplit("-", 1)[0]: [] for lane in p.lanes}
    for box in p.boxes:
        lane = min(p.lanes, key=lambda lane: abs(lane.y - box.yc))
        out[lane.name.rsplit("-", 1)[0]].append((box.style, box.x0, box.x1))
    return drawing, out


@pytest.mark.parametrize("stages, micro", [(3, 4), (4, 8), (2, 16)])
def test_the_drawn_pipeline_bubble_is_the_captions(stages, micro):
    """The caption's bubble is the drawn step's (idle share of the stages' compute span),
    beside the paper's (p-1)/(m+p-1) for balanced stages, which it cannot beat."""
    for schedule in ("gpipe", "1f1b"):
        timeline = expected_timeline(_spec("pipeline", stages, strategy={"schedule": schedule, "stages": stages,
                                                                          "microbatches": micro},
                                           training={"model": {"layers": [16] * 5}}))
        lanes = timeline.panels[0].lanes
        passes = [b for lane in lanes for b in lane.boxes if b.kind in ("forward", "backward")]
        begin, end = min(b.start_ms for b in passes), max(b.end_ms for b in passes)
        drawn = 1 - sum(b.end_ms - b.start_ms for b in passes) / (stages * (end - begin))
        shown, theory = re.fullmatch(r"bubble (\d+)% expected; \$\(p-1\)/\(m\+p-1\)\$ = (\d+)%",
                                     timeline.panels[0].note).groups()
        assert int(shown) == round(100 * drawn)
        assert int(theory) == round(100 * (stages - 1) / (micro + stages - 1)) <= int(shown)


def test_a_straggler_stage_grows_the_bubble_the_caption_gives():
    def bubble(**topology):
        timeline = expected_timeline(_spec("pipeline", 3, strategy={"microbatches": 4},
                                           topology={"workers": {"count": 3, **topology}}))
        return int(re.match(r"bubble (\d+)% expected; \$\(p-1\)/\(m\+p-1\)\$ = 33%$",
                            timeline.panels[0].note).group(1))

    assert bubble(slowdown={"w2": 2.0}) > bubble()


def test_sync_and_async_parameter_servers_share_one_link_model_and_every_update_is_visible():
    timeline = expected_timeline(_spec(workers=16))
    lanes = {p.id: {lane.id: lane for lane in p.lanes} for p in timeline.panels}
    fetch = {panel: [b.end_ms - b.start_ms for b in lanes[panel]["w1"].boxes if b.kind == "fetch"][0]
             for panel in ("sync", "async")}
    assert fetch["sync"] == pytest.approx(fetch["async"])
    drawing = draw_timeline(timeline)
    for panel, source in zip(drawing.panels, timeline.panels):
        server = next(lane for lane in source.lanes if lane.role == "server")
        updates = [b for b in panel.boxes if b.style == "tl-update"]
        assert len(updates) == sum(1 for b in server.boxes if b.kind == "update")  # none merged
        assert min(b.x1 - b.x0 for b in updates) >= 0.12 - 1e-9  # at least 1.2 mm (x0 + MIN_EVENT_CM - x0 in floats), not a hairline
        assert all(a.x1 <= b.x0 + 1e-9 for a, b in zip(updates, updates[1:]))  # one after another


def test_tree_leaves_wait_while_inner_levels_reduce_and_broadcast():
    timeline = expected_timeline(_spec("allreduce", 8, strategy={"algorithm": "tree"}))
    hops = {lane.id: sum(1 for b in lane.boxes if b.kind == "allreduce") for lane in timeline.panels[0].lanes}
    waits = {lane.id: sum(b.end_ms - b.start_ms for b in lane.boxes if b.kind == "wait")
             for lane in timeline.panels[0].lanes}
    # the leaves send up and receive down, once a level: the inner ranks have more to do,
    # and the leaves wait while they do it
    leaves, inner = [w for w in hops if hops[w] == min(hops.values())], [w for w in hops if hops[w] > min(hops.values())]
    assert leaves and inner
    assert min(waits[w] for w in leaves) > 0
    assert min(waits[w] for w in leaves) >= max(waits[w] for w in inner if w != "w1") - 1e-6


def test_gossip_workers_wait_only_for_the_neighbours_they_average_with():
    """No global barrier: with a straggler, its ring neighbours' exchange (a blocking
    receive: the wait is inside it, as the runner traces it) lasts until the straggler's
    parameters come; a worker farther away waits less."""
    timeline = expected_timeline(_spec("gossip", 6, strategy={"peers": 2},
                                       topology={"workers": {"count": 6, "slowdown": {"w1": 2.0}}}))
    lanes = {lane.id: lane for lane in timeline.panels[0].lanes}
    waited = {w: sum(b.end_ms - b.start_ms for b in lanes[w].boxes if b.kind in ("wait", "gossip")) for w in lanes}
    assert waited["w2"] > waited["w4"] and waited["w6"] > waited["w4"]


def test_a_narrow_figure_draws_the_first_workers_an_ellipsis_counting_the_rest_and_the_last():
    timeline = expected_timeline(_spec(workers=1024, figure={"max_workers_drawn": 8},
                                       training={"dataset": {"samples": 2000000}}))
    lanes = fit_lanes(timeline.panels[0].lanes, 5)
    assert [lane.id for lane in lanes] == ["ps", "w1", "w2", "w3", "w4-more", "w1024"]
    assert lanes[4].label == "1,020 more workers"
    assert [lane.id for lane in fit_lanes(lanes, 4)][-3:] == ["w2", "w3-more", "w1024"]
    assert fit_lanes(lanes, 4)[-2].label == "1,021 more workers"


def test_all_reduce_phases_get_their_own_fill_and_a_legend_entry_naming_the_abbreviation():
    from opentikz_dt.figures.timeline import Box, Lane, Panel, Timeline

    boxes = (Box(0, 1, "allreduce", "AG", "all-gather"), Box(1, 1.001, "allreduce", "AG", "all-gather"),
             Box(2, 3, "allreduce", "RS", "reduce-scatter"), Box(3, 4, "wait"))
    drawing = draw_timeline(Timeline("t", (Panel("main", "p", (Lane("w1", "W1", boxes),)),)))
    legend = {entry.style: entry.name for entry in drawing.legend}
    # the window starts in all-gather, yet reduce-scatter (first in the algorithm) keeps the plain fill
    assert legend == {"tl-allreduce": "reduce-scatter (RS)", "tl-allreduce-b": "all-gather (AG)", "tl-wait": "idle / wait"}
    assert {b.style for b in drawing.panels[0].boxes} == {"tl-allreduce", "tl-allreduce-b", "tl-wait"}


def test_a_predicted_sync_server_update_is_drawn_as_visibly_as_the_expected_one(tmp_path):
    """A calibration's server update can be a hundredth of the step: the predicted timeline,
    like the expected one, draws every update at least MIN_EVENT_CM wide, over the server's
    idle time and never over another box; a measured trace keeps its true widths."""
    from opentikz_dt.figures.timeline import MIN_EVENT_CM
    from opentikz_dt.measured.run import load_run
    from opentikz_dt.measured.timeline import measured_timeline
    from opentikz_dt.predict.calibration import illustrative_calibration
    from opentikz_dt.predict.expected import predicted_timeline
    from opentikz_dt.predict.synthetic import write_synthetic_run

    spec = _spec(workers=3)
    timeline, _ = predicted_timeline(spec, illustrative_calibration(spec).save(tmp_path / "cal.json"))
    drawing, lanes = _drawn(timeline)
    server = [lane for lane in timeline.panels[0].lanes if lane.role == "server"][0]
    updates = [(x0, x1) for style, x0, x1 in lanes["ps"] if style == "tl-update"]
    true_cm = min(b.end_ms - b.start_ms for b in server.boxes if b.kind == "update") * drawing.width / (
        timeline.span()[1] - timeline.span()[0])
    assert true_cm < MIN_EVENT_CM / 2  # the calibration's update alone would be a hairline
    assert len(updates) == sum(1 for b in server.boxes if b.kind == "update")
    assert min(x1 - x0 for x0, x1 in updates) >= MIN_EVENT_CM - 1e-9
    spans = sorted((x0, x1) for _, x0, x1 in lanes["ps"])  # the server's waits give way: nothing overlaps
    assert all(a[1] <= b[0] + 1e-9 for a, b in zip(spans, spans[1:]))
    run = load_run(write_synthetic_run(tmp_path / "run", "ps-sync", workers=3, steps=8))
    measured = measured_timeline(run.spec, run.trace).timeline
    _, measured_lanes = _drawn(measured)
    server = [lane for lane in measured.panels[0].lanes if lane.role == "server"][0]
    scale = draw_timeline(measured).width / (measured.span()[1] - measured.span()[0])
    drawn = sorted(x1 - x0 for style, x0, x1 in measured_lanes["ps"] if style == "tl-update")
    widths = [(b.end_ms - b.start_ms) * scale for b in server.boxes if b.kind == "update"]
    # true widths, a short one a 0.01 cm hairline; one with no length in the window (it ended
    # where the window starts) is no box at all
    assert drawn == pytest.approx(sorted(max(0.01, w) for w in widths if w >= ZERO_CM), abs=1e-6)


@pytest.mark.parametrize("example", ["ps-sync", "ps-async"])
def test_the_expected_panels_end_with_their_last_update_and_cut_no_box(example):
    """The axis ends where the later panel's last update does: no push is cut at the right
    edge (a cut push was a sliver with a stray "P" above it, in the demo's async panel);
    each worker's drawn steps end with their push, whole."""
    from pathlib import Path

    from opentikz_dt.spec import load_spec

    spec = load_spec(Path(__file__).parent.parent / "examples" / f"{example}.yaml")
    timeline = expected_timeline(spec)
    for panel in timeline.panels:
        server = next(lane for lane in panel.lanes if lane.role == "server")
        updates = [b.end_ms for b in server.boxes if b.kind == "update"]
        assert max(updates) <= timeline.end_ms + 1e-9
        for lane in panel.lanes:
            if lane.role == "worker":
                last = lane.boxes[-1]
                assert last.kind == "push" and last.end_ms <= max(updates) + 1e-9, (panel.id, lane.id)
    if example == "ps-sync":  # the demo at natural width: every fetch and push box holds its letter
        boxes = [b for panel in draw_timeline(timeline).panels for b in panel.boxes]
        assert all(str(b.text) in ("F", "P") for b in boxes if b.style in ("tl-fetch", "tl-push"))
