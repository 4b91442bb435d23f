"""Measured timelines draw what happened when: a push ends where the server received it, a
ring's first reduce-scatter hop starts after the previous rank's backward, and time inside
a step that no span explains is drawn as wait, not left blank; likewise the tree's first
reduce and broadcast chunks start once the children's (the parent's) data arrived."""

from __future__ import annotations

import os

import pytest

from opentikz_dt.figures.timeline import MIN_VISIBLE_CM, WIDTH_CM
from opentikz_dt.measured.run import load_run
from opentikz_dt.measured.timeline import measured_timeline, received_pushes
from opentikz_dt.measured.trace import Span


def _span(rank, name, start, end, step=0, ident="w1", **args):
    return Span(rank, 1, name, start, end, step, ident, {"step": step, "id": ident, **args})


def test_a_push_whose_send_returned_after_the_update_began_ends_where_the_server_received_it():
    ids = {0: "w1", 1: "w2", 2: "ps"}
    spans = [_span(0, "push", 10.0, 30.0), _span(1, "push", 12.0, 16.0, ident="w2"),
             _span(2, "update", 20.0, 25.0, ident="ps", received_us={"w1": 18.0, "w2": 19.0})]
    drawn = sorted((s.rank, s.name, s.start, s.end) for s in received_pushes(spans, ids))
    assert drawn == [(0, "push", 10.0, 18.0), (0, "wait", 18.0, 30.0),  # the sender still in its call: a wait
                     (1, "push", 12.0, 16.0),  # over before the server saw it: as traced
                     (2, "update", 20.0, 25.0)]
    assert received_pushes(spans[:2], ids) == spans[:2]  # a trace without `received_us` (older runs) as it was


def test_a_span_the_figure_does_not_draw_does_not_split_a_lane():
    from opentikz_dt.measured.timeline import _lane_spans

    update = Span(2, 0, "update", 0.0, 10.0, 0, "ps", {"step": 0, "id": "ps"})
    spans = [update, _span(2, "marker", 5.0, 5.0, ident="ps"), _span(2, "wait", 10.0, 12.0, ident="ps")]
    assert _lane_spans(spans) == (spans, None)  # one lane: an unknown span is not drawn, so it overlaps nothing


def _real_run(kind, **overrides):
    pytest.importorskip("torch")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from opentikz_dt.runner.testing import run_small, small_spec_data

    return load_run(run_small(small_spec_data(kind, **overrides)).run_dir)


PS_RUNS = {"sync": {"topology": {"workers": {"count": 2}, "servers": {"count": 1}}},
           # as test_measured_dist's: a 2x straggler, so the fast worker takes more of the budget
           "async": {"topology": {"workers": {"count": 2, "slowdown": {"w2": 2.0}}, "servers": {"count": 1}},
                     "strategy": {"sync": "async"}}}


@pytest.mark.dist
@pytest.mark.parametrize("mode", sorted(PS_RUNS))
def test_no_push_of_a_real_ps_run_is_drawn_ending_after_the_update_it_fed_began(mode):
    run = _real_run("parameter-server", **PS_RUNS[mode])
    spans = run.trace.spans
    pushes = [s for s in spans if s.name == "push"]

    def key(s, worker):  # an async push and its update share the ticket; a sync step has one of each
        return worker, s.step, s.args.get("ticket")

    received, update = {}, {}
    for s in spans:
        if s.name == "update":
            for w, at in s.args["received_us"].items():
                received[key(s, w)], update[key(s, w)] = at, s.start
    assert set(received) == {key(s, s.id) for s in pushes}  # every push, on the server's clock
    m = measured_timeline(run.spec, run.trace, (0, run.trace.steps[-1]))
    drawn = [s for s in m.spans if s.name == "push"]
    # Async workers drift apart, so the first worker's steps bound the window (measured/window.py):
    # a straggler's last pushes may come after it (how many depends on the load on the machine).
    # Every push inside the window is drawn; the only ones left out are another worker's, after it.
    inside = [s for s in pushes if s.end >= m.window.t0 and s.start <= m.window.t1]
    outside = [s for s in pushes if s not in inside]
    reference = m.window.reference if mode == "async" else None
    assert all(s.id != reference and s.start > m.window.t1 for s in outside), outside
    assert not outside if mode == "sync" else {s.id for s in inside} == {"w1", "w2"}
    assert len(drawn) == len(inside)
    for s in drawn:
        assert s.end <= received[key(s, s.id)] <= update[key(s, s.id)], s
    for raw in inside:  # whatever the sender spent in its call after that is drawn as a wait
        if raw.end > received[key(raw, raw.id)]:
            cut = max(raw.start, received[key(raw, raw.id)])
            assert any(w.name == "wait" and w.rank == raw.rank and w.start == cut and w.end == raw.end for w in m.spans)


def _ring_run():
    return _real_run("allreduce", topology={"workers": {"count": 3}}, strategy={"algorithm": "ring"})


@pytest.mark.dist
def test_a_ring_reduce_scatter_starts_after_the_previous_ranks_backward_and_waits_for_it_as_wait():
    run = _ring_run()
    spans = run.trace.spans
    bound = {int(r): c["bound_us"] for r, c in run.trace.metadata["clock"].items()}
    n = len(run.trace.ranks)
    backward_end = {(s.rank, s.step): s.end for s in spans if s.name == "backward"}
    first_hops = [s for s in spans
                  if s.name == "allreduce" and s.args["phase"] == "reduce-scatter" and s.args["chunk"] == 0]
    assert len(first_hops) == n * len(run.trace.steps)
    for hop in first_hops:
        prev = (hop.rank - 1) % n
        assert hop.start >= backward_end[(prev, hop.step)] - bound[hop.rank] - bound[prev], hop
        waited = [s for s in spans if s.name == "wait" and s.rank == hop.rank and s.step == hop.step
                  and s.start <= hop.start and s.end <= hop.start + 1.0]
        assert waited and abs(max(s.end for s in waited) - hop.start) < 1.0, hop  # the wait runs up to the hop


@pytest.mark.dist
def test_a_tree_reduce_starts_after_the_childrens_backward_and_waits_for_them_as_wait():
    """The tree's first reduce chunk used to cover waiting for the children's backward (w2, a
    2x straggler, is the root's child): that wait is a `wait` span of its own, as is a
    child's wait for the parent's first broadcast chunk (the root reducing the whole tree)."""
    run = _real_run("allreduce", topology={"workers": {"count": 3, "slowdown": {"w2": 2.0}}},
                    strategy={"algorithm": "tree"})
    spans = run.trace.spans
    bound = {int(r): c["bound_us"] for r, c in run.trace.metadata["clock"].items()}
    n = len(run.trace.ranks)
    ready = {}  # a rank's gradients are ready when its backward (and its straggler's sleep) ended
    for s in spans:
        if s.name in ("backward", "slowdown"):
            ready[(s.rank, s.step)] = max(ready.get((s.rank, s.step), 0.0), s.end)
    reduce_end = {}
    for s in spans:
        if s.name == "allreduce" and s.args["phase"] == "reduce":
            reduce_end[(s.rank, s.step)] = max(reduce_end.get((s.rank, s.step), 0.0), s.end)

    def waited_up_to(rank, step, start):
        return [w for w in spans if w.name == "wait" and w.rank == rank and w.step == step
                and w.start <= start and abs(w.end - start) < 1.0]

    firsts = [s for s in spans if s.name == "allreduce" and s.args["chunk"] == 0]
    assert len(firsts) == 2 * n * len(run.trace.steps)  # reduce and broadcast, every rank, every step
    for first in firsts:
        me, step = first.rank, first.step
        peers = [c for c in (2 * me + 1, 2 * me + 2) if c < n] if first.args["phase"] == "reduce" else \
            ([(me - 1) // 2] if me else [])
        for peer in peers:  # the children's gradients, or the parent's reduced chunk
            after = ready[(peer, step)] if first.args["phase"] == "reduce" else reduce_end[(peer, step)]
            assert first.start >= after - bound[me] - bound[peer], (first, peer)
        if peers:
            assert waited_up_to(me, step, first.start), first  # the time before it: a wait


@pytest.mark.dist
def test_gaps_inside_a_step_of_a_real_ring_are_drawn_as_wait():
    run = _ring_run()
    m = measured_timeline(run.spec, run.trace, (1, 3))
    visible_ms = (m.window.t1 - m.window.t0) / 1000 * MIN_VISIBLE_CM / WIDTH_CM
    ids = {ident: rank for rank, ident in run.trace.ids.items()}
    lanes = [lane for lane in m.timeline.panels[0].lanes if lane.role != "gap"]
    assert lanes and not m.aggregated
    for lane in lanes:
        rank = ids[lane.id]
        for step in (1, 2, 3):
            first, last, _ = run.trace.extents[(rank, step)]
            lo, hi = max(first, m.window.t0) / 1000, min(last, m.window.t1) / 1000
            covered = sorted((b.start_ms, b.end_ms) for b in lane.boxes if b.end_ms > lo and b.start_ms < hi)
            reach = lo
            for start, end in covered:
                assert start - reach <= visible_ms + 1e-9, (lane.id, step, reach, start)  # no blank gap
                reach = max(reach, end)


def test_idle_is_filled_inside_a_workers_step_but_not_between_an_async_servers_updates(tmp_path):
    """An async server's spans carry the pushing workers' steps: two updates of one step
    number from different workers have the server's reply work between them, not idle."""
    import json

    from opentikz_dt.measured.trace import load_trace
    from opentikz_dt.spec import spec_from_data

    def x(pid, ident, name, ts, dur, tid=0, **args):
        return {"ph": "X", "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
                "args": {"step": 3, "id": ident, **args}}

    events = [x(0, "w1", "forward", 0.0, 50.0), x(0, "w1", "backward", 80.0, 20.0), x(0, "w1", "push", 100.0, 300.0, 1),
              x(1, "w2", "forward", 0.0, 200.0), x(1, "w2", "push", 200.0, 10.0, 1),
              x(2, "ps", "update", 120.0, 30.0, worker="w1", received_us={"w1": 110.0}),
              x(2, "ps", "update", 300.0, 30.0, worker="w2", received_us={"w2": 210.0})]
    (tmp_path / "trace.json").write_text(json.dumps({"traceEvents": events}))
    spec = spec_from_data({"strategy": {"kind": "parameter-server", "sync": "async"},
                           "topology": {"workers": {"count": 2}}})
    timeline = measured_timeline(spec, load_trace(tmp_path / "trace.json"), (3, 3)).timeline
    lanes = {lane.id: lane for lane in timeline.panels[0].lanes}
    idle = {lane: [(b.start_ms, b.end_ms) for b in lanes[lane].boxes if b.label == "idle"] for lane in lanes}
    assert idle["w1"] == [(0.05, 0.08)] and idle["ps"] == []
    assert [(b.kind, b.start_ms, b.end_ms) for b in lanes["w1"].boxes if b.start_ms >= 0.1] == [
        ("push", 0.1, 0.11), ("wait", 0.11, 0.4)]  # received at 110 µs: the rest of the send call is a wait


def test_a_push_cut_to_end_before_the_window_is_not_drawn_backwards(tmp_path):
    """w1's step-2 push overlaps the step-3 window as traced (40-150 µs), but the server had
    it at 50 µs: cut there, it ends before the window, so only its wait is drawn (it was a
    box from the window's edge back to 50 µs, once in a real run: clocks of two ranks)."""
    import json

    from opentikz_dt.measured.trace import load_trace
    from opentikz_dt.spec import spec_from_data

    def x(pid, ident, name, ts, dur, step, tid=0, **args):
        return {"ph": "X", "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
                "args": {"step": step, "id": ident, **args}}

    events = [x(0, "w1", "forward", 0.0, 40.0, 2), x(0, "w1", "push", 40.0, 110.0, 2, 1),
              x(1, "w2", "forward", 0.0, 30.0, 2), x(1, "w2", "push", 30.0, 10.0, 2, 1),
              x(2, "ps", "update", 60.0, 30.0, 2, worker="w1", received_us={"w1": 50.0}),
              x(0, "w1", "forward", 130.0, 40.0, 3), x(1, "w2", "forward", 100.0, 40.0, 3),
              x(2, "ps", "update", 140.0, 20.0, 3, worker="w2", received_us={"w2": 135.0})]
    (tmp_path / "trace.json").write_text(json.dumps({"traceEvents": events}))
    spec = spec_from_data({"strategy": {"kind": "parameter-server", "sync": "async"},
                           "topology": {"workers": {"count": 2}}})
    m = measured_timeline(spec, load_trace(tmp_path / "trace.json"), (3, 3))
    assert (m.window.t0, m.window.t1) == (130.0, 170.0)
    lanes = {lane.id: lane for lane in m.timeline.panels[0].lanes}
    assert [(b.kind, b.start_ms, b.end_ms) for b in lanes["w1-comm"].boxes] == [("wait", 0.13, 0.15)]
    assert all(b.end_ms >= b.start_ms for lane in lanes.values() for b in lane.boxes)


@pytest.mark.dist
@pytest.mark.parametrize("target_cm", [None, 8.5])
def test_no_push_of_a_30_step_sync_ps_run_is_drawn_ending_inside_the_update_it_fed(target_cm):
    """All 30 steps in one figure: a push is a hairline there, and one grown to the right past
    its arrival was drawn ending inside the server's update (6 of 90 at natural width, 17 at
    column width). Checked on the drawn geometry: each push's right edge against the first
    update the server began at or after the push began."""
    from opentikz_dt.figures.timeline import draw_timeline

    run = _real_run("parameter-server", topology={"workers": {"count": 3}, "servers": {"count": 1}},
                    training={"steps": 30})
    m = measured_timeline(run.spec, run.trace, (0, run.trace.steps[-1]))
    (panel,) = draw_timeline(m.timeline, target_cm).panels
    updates = sorted(b.x0 for b in panel.boxes if b.style == "tl-update")
    pushes = [b for b in panel.boxes if b.style == "tl-push"]
    assert len(pushes) == 90 and len(updates) >= 29  # the last update may start past the workers' last step
    for push in pushes:
        fed = next((x0 for x0 in updates if x0 >= push.x0 - 1e-9), None)
        assert fed is None or push.x1 <= fed + 1e-9, (push, fed)
