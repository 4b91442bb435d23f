"""Measured figures: trace loading, windows, the truth of the drawn timeline, crashes, bad input."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from measured_helpers import covers, expected_lane_boxes, parse_timeline_tex

from opentikz_dt.errors import TraceError
from opentikz_dt.figures.render import render_timeline
from opentikz_dt.figures.timeline import WIDTH_CM, ZERO_CM
from opentikz_dt.measured.annotate import annotate_layout, human_bytes
from opentikz_dt.measured.compare import default_loss_target, render_summary_table, summarize, time_to_loss
from opentikz_dt.measured.figures import render_run_figures
from opentikz_dt.measured.run import load_run
from opentikz_dt.predict.synthetic import write_synthetic_run
from opentikz_dt.measured.timeline import measured_timeline, pipeline_bubble
from opentikz_dt.measured.trace import load_trace
from opentikz_dt.measured.window import (MAX_BOXES, Cell, StepsOptionError, bound_boxes, parse_steps,
                                         select_window)

KINDS = ["ps-sync", "ps-async", "allreduce-ring", "pipeline-1f1b"]
STOCK_COLORS = re.compile(r"\b(red|green|blue|cyan|magenta|yellow|black|white|gray|grey|darkgray|lightgray|brown|"
                          r"lime|olive|orange|pink|purple|teal|violet)\b")


def synth(tmp_path: Path, kind: str, **kw) -> Path:
    slow = {"w3": 2.0} if kind.startswith("ps") else None
    return write_synthetic_run(tmp_path / kind, kind, steps=kw.pop("steps", 12), slowdown=slow, **kw)


def rank_of(trace, lane_id: str) -> int:
    return {ident: rank for rank, ident in trace.ids.items()}[lane_id.removesuffix("-comm")]


# ---------------------------------------------------------------- truth


@pytest.mark.parametrize("steps", [None, "2:3"])
@pytest.mark.parametrize("kind", KINDS)
def test_model_boxes_are_the_trace_spans_of_every_rank(tmp_path, kind, steps):
    run_dir = synth(tmp_path, kind)
    run = load_run(run_dir)
    m = measured_timeline(run.spec, run.trace, parse_steps(steps))
    pipeline = kind.startswith("pipeline")
    lanes = [lane for lane in m.timeline.panels[0].lanes if lane.role != "gap"]
    assert {rank_of(run.trace, lane.id) for lane in lanes} == set(run.trace.ids)  # every rank drawn
    for lane in lanes:
        expected = expected_lane_boxes(run_dir, rank_of(run.trace, lane.id), m.window.t0, m.window.t1, pipeline)
        drawn = [(b.kind, b.start_ms, b.end_ms) for b in lane.boxes if b.label not in ("bubble", "idle")]
        assert len(drawn) == len(expected) > 0, lane.id
        for got, want in zip(sorted(drawn, key=lambda b: (b[1], b[2])), expected):
            assert got[0] == want[0] and got[1] == pytest.approx(want[1], abs=1e-9) and \
                got[2] == pytest.approx(want[2], abs=1e-9), (lane.id, got, want)


@pytest.mark.parametrize("kind", KINDS)
def test_tex_boxes_start_and_end_where_the_trace_says(tmp_path, kind):
    run_dir = synth(tmp_path, kind)
    run = load_run(run_dir)
    m = measured_timeline(run.spec, run.trace)
    tex = render_timeline(run.spec, m.timeline)
    start, end = m.timeline.span()
    scale = WIDTH_CM / (end - start)
    drawn = parse_timeline_tex(tex)
    lanes = [lane for lane in m.timeline.panels[0].lanes if lane.role != "gap"]
    assert set(drawn) == {lane.id for lane in lanes}
    # TeX coordinates carry 3 decimals (cm); a box is drawn at least 0.01 cm wide.
    tol_start, tol_end = 0.0006 / scale, 0.0106 / scale
    for lane in lanes:
        expected = expected_lane_boxes(run_dir, rank_of(run.trace, lane.id), m.window.t0, m.window.t1,
                                       kind.startswith("pipeline"))
        # A span with no length once clipped to the window (it ends where the window starts)
        # or drawn (a nanosecond of float residue) shows nothing that happened: no box.
        expected = [e for e in expected if (e[2] - e[1]) * scale >= ZERO_CM]
        boxes = [(k, start + x0 / scale, start + x1 / scale) for k, x0, x1 in drawn[lane.id]]
        if kind.startswith("pipeline"):
            boxes = [b for b in boxes if b[0] != "wait"]  # derived bubbles, checked in the model test
        assert covers(boxes, expected, tol_start, tol_end) == [], lane.id


@pytest.mark.parametrize("kind", ["ps-sync", "central-storage", "gossip"])
def test_a_span_with_no_length_draws_nothing_and_no_box_passes_the_plot_edge(tmp_path, kind):
    """Spans that touch the window's edge (a push that ended where it starts, an update that
    starts where it ends) are clipped to nothing: they draw no hairline, at the left edge or
    past the right one; a short span's 0.01 cm hairline stays inside the plot."""
    run = load_run(synth(tmp_path, kind))
    m = measured_timeline(run.spec, run.trace)
    start, end = m.timeline.span()
    scale = WIDTH_CM / (end - start)
    drawn = parse_timeline_tex(render_timeline(run.spec, m.timeline))
    edges = 0
    for lane in (lane for lane in m.timeline.panels[0].lanes if lane.role != "gap"):
        spans = [(b.kind, (b.start_ms - start) * scale, (b.end_ms - start) * scale) for b in lane.boxes]
        edges += sum(1 for _, a, b in spans if b - a < ZERO_CM)
        for kind_drawn, x0, x1 in drawn[lane.id]:
            assert 0 <= x0 < x1 <= WIDTH_CM, (lane.id, kind_drawn, x0, x1)
            # the box shows some time of a span of its kind (TeX rounds to 0.001 cm)
            assert any(k == kind_drawn and b - a >= ZERO_CM and a < x1 + 0.001 and b > x0 - 0.001
                       for k, a, b in spans), (lane.id, kind_drawn, x0, x1)
    assert edges > 0 or kind == "gossip"  # the case is there to be drawn (gossip: a short span at the end)


def test_pipeline_bubbles_are_derived_idle_gaps_labelled_bubble(tmp_path):
    run = load_run(synth(tmp_path, "pipeline-1f1b"))
    m = measured_timeline(run.spec, run.trace)
    bubbles = 0
    for lane in m.timeline.panels[0].lanes:
        others = [b for b in lane.boxes if b.label != "bubble"]
        for bubble in (b for b in lane.boxes if b.label == "bubble"):
            bubbles += 1
            assert bubble.kind == "wait"
            assert any(abs(c.end_ms - bubble.start_ms) < 1e-9 for c in others)
            assert any(abs(c.start_ms - bubble.end_ms) < 1e-9 for c in others)
            assert not any(c.start_ms < bubble.end_ms - 1e-9 and c.end_ms > bubble.start_ms + 1e-9 for c in others)
    assert bubbles > 0


def test_bubble_fraction_of_a_perfect_gpipe_schedule_is_the_theory():
    # 2 stages, 2 microbatches, unit forward and backward: makespan 6, busy 4 per stage.
    def x(pid, name, ts):
        return {"ph": "X", "name": name, "pid": pid, "tid": 0, "ts": ts, "dur": 1.0, "args": {"step": 0, "id": f"w{pid+1}"}}
    events = [x(0, "forward", 0), x(0, "forward", 1), x(1, "forward", 1), x(1, "forward", 2),
              x(1, "backward", 3), x(1, "backward", 4), x(0, "backward", 4), x(0, "backward", 5)]
    assert pipeline_bubble(events) == pytest.approx(1 / 3)  # (p-1)/(m+p-1) = 1/3


def test_pipeline_note_prints_measured_beside_theoretical_bubble(tmp_path):
    run = load_run(synth(tmp_path, "pipeline-1f1b"))
    m = measured_timeline(run.spec, run.trace)
    assert m.bubble.theory == pytest.approx(2 / 6)
    assert 0 < m.bubble.measured < 1
    assert f"measured bubble {m.bubble.measured:.1%}" in m.timeline.note
    assert "vs 2/6 = 33.3% for balanced stages" in m.timeline.note
    # the same words and formula as the expected timeline's caption
    assert m.timeline.panels[0].note == f"bubble {m.bubble.measured:.0%} measured; $(p-1)/(m+p-1)$ = 33%"


def test_sync_server_draws_one_update_per_step_above_the_workers(tmp_path):
    run = load_run(synth(tmp_path, "ps-sync"))
    m = measured_timeline(run.spec, run.trace, (4, 6))
    lanes = m.timeline.panels[0].lanes
    assert [lane.id for lane in lanes] == ["ps", "w1", "w2", "w3"]
    assert [b.label for b in lanes[0].boxes if b.kind == "update"] == ["Update"] * 3
    assert {b.kind for b in lanes[1].boxes} == {"fetch", "forward", "backward", "push", "wait"}


# ---------------------------------------------------------------- windows and bounds


@pytest.mark.parametrize("text, expected", [("10:14", (10, 14)), ("12", (12, 12)), ("10:", (10, None)),
                                            (":14", (None, 14)), (None, None)])
def test_parse_steps(text, expected):
    assert parse_steps(text) == expected


@pytest.mark.parametrize("text, message", [
    ("a:b", "--steps 'a:b': expected FIRST:LAST, both included (e.g. 10:14), or one step (12)"),
    ("14:10", "--steps '14:10': the last step comes before the first"),
])
def test_parse_steps_errors(text, message):
    with pytest.raises(StepsOptionError) as info:
        parse_steps(text)
    assert str(info.value) == message


def test_requested_steps_outside_the_trace_are_one_clear_error(tmp_path):
    trace = load_trace(synth(tmp_path, "ps-sync"))
    with pytest.raises(TraceError) as info:
        select_window(trace, (40, 50))
    assert str(info.value) == "steps 40:50 are not in the trace (it has steps 0 to 11)"


def test_default_window_skips_warm_up_and_sits_near_the_median_step(tmp_path):
    trace = load_trace(synth(tmp_path, "ps-sync", steps=40))
    window = select_window(trace)
    assert window.chosen == "default" and window.last - window.first == 2
    assert window.first >= 1  # step 0 is the (slow) warm-up step


def test_bound_boxes_is_exact_under_budget_and_bounded_over_it():
    cells = [Cell(i * 10.0, i * 10.0 + 6, "forward" if i % 2 else "push") for i in range(1000)]
    assert bound_boxes(cells[:50], 0, 10_000, 50) == (cells[:50], False)
    bounded, merged = bound_boxes(cells, 0, 10_000, 100)
    assert merged and len(bounded) <= 100
    assert all(a.end <= b.start for a, b in zip(bounded, bounded[1:]))


def test_a_long_window_stays_under_the_box_budget(tmp_path):
    run = load_run(synth(tmp_path, "ps-sync", steps=1500, workers=4))
    m = measured_timeline(run.spec, run.trace, (0, 1499))
    boxes = sum(len(lane.boxes) for lane in m.timeline.panels[0].lanes)
    assert m.aggregated and boxes <= MAX_BOXES
    assert "aggregated" in m.timeline.note
    drawn = parse_timeline_tex(render_timeline(run.spec, m.timeline))
    assert 0 < sum(len(boxes) for boxes in drawn.values()) <= MAX_BOXES


# ---------------------------------------------------------------- crashed and bad traces


def test_crashed_run_renders_what_is_there_with_a_note(tmp_path):
    run_dir = write_synthetic_run(tmp_path / "crash", "ps-sync", steps=12, crash_at_ms=60, crash_rank=2)
    assert not (run_dir / "trace.json").exists()
    trace = load_trace(run_dir)
    assert trace.ended_early and trace.skipped == 1
    assert trace.note == "run failed: rank 2 (w3) exited with 1"
    run = load_run(run_dir)
    m = measured_timeline(run.spec, run.trace)
    assert "run failed: rank 2 (w3) exited with 1" in m.timeline.note
    assert "run failed: rank 2 (w3) exited with 1" in render_timeline(run.spec, m.timeline)


def test_cut_off_merged_trace_is_read_up_to_its_last_complete_event(tmp_path):
    run_dir = synth(tmp_path, "ps-sync")
    full = load_trace(run_dir / "trace.json")
    text = (run_dir / "trace.json").read_text()
    (run_dir / "trace.json").write_text(text[: len(text) * 6 // 10])
    for path in (run_dir / "trace").iterdir():
        path.unlink()
    (run_dir / "trace").rmdir()
    cut = load_trace(run_dir)
    assert cut.ended_early and cut.note == "run ended early: trace cut off"
    assert 0 < len(cut.events) < len(full.events)
    assert cut.events == full.events[: len(cut.events)]
    run = load_run(run_dir)
    tex = render_timeline(run.spec, measured_timeline(run.spec, run.trace).timeline)
    assert "run ended early: trace cut off" in tex


@pytest.mark.parametrize("content, message", [
    ("hello", "not a trace (not JSON: Expecting value at line 1 column 1)"),
    ('{"a": 1}', 'not a trace (expected a Chrome trace object with a "traceEvents" list)'),
    ('{"traceEvents": [{"ph": "X"}]}', "not a trace (no event has the Chrome trace fields ph, ts, dur, pid, tid, args)"),
    ('{"traceEvents": []}', "the trace has no spans (the run recorded nothing)"),
])
def test_a_file_that_is_not_a_trace_is_one_clear_error(tmp_path, content, message):
    path = tmp_path / "trace.json"
    path.write_text(content)
    with pytest.raises(TraceError) as info:
        load_trace(path)
    assert str(info.value) == f"{path}: {message}"


def test_jsonl_without_events_is_not_a_trace(tmp_path):
    path = tmp_path / "rank0.jsonl"
    path.write_text("not json\nstill not\n")
    with pytest.raises(TraceError) as info:
        load_trace(path)
    assert str(info.value) == f"{path}: not a trace (no line is a JSON trace event)"


def test_cli_figure_on_a_run_with_a_bad_trace_prints_one_line(tmp_path):
    run_dir = synth(tmp_path, "ps-sync")
    (run_dir / "trace.json").write_text("<html>not a trace</html>")
    for path in (run_dir / "trace").iterdir():
        path.unlink()
    result = subprocess.run([sys.executable, "-m", "opentikz_dt", "figure", str(run_dir), "-o", str(tmp_path / "o")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1  # invalid input; a bad option value (--steps x, below) is usage, 2
    assert result.stderr == (f"dtgen: error: {run_dir / 'trace.json'}: not a trace "
                             "(not JSON: Expecting value at line 1 column 1)\n")


def test_a_folder_that_is_not_a_run_is_one_clear_error(tmp_path):
    with pytest.raises(TraceError) as info:
        load_run(tmp_path)
    assert str(info.value) == f"{tmp_path}: not a run directory (no spec.yaml)"


# ---------------------------------------------------------------- annotated topology, plots, compare


def test_annotated_topology_carries_measured_bytes_and_marks_the_straggler(tmp_path):
    run = load_run(synth(tmp_path, "ps-async"))
    annotation = annotate_layout(run.spec, run.metrics)
    assert annotation.stragglers == ("w3",)
    steps = run.metrics["steps"]
    assert len(annotation.links) == 6  # a push and a fetch link per worker
    for link in annotation.links:
        rank = int(link.worker[1:]) - 1
        assert link.per_step == run.metrics["bytes"][rank][link.direction] / steps
        edge = next(e for e in annotation.layout.edges if e.name == link.edge)
        assert human_bytes(link.per_step) in edge.label
    w3 = next(n for n in annotation.layout.nodes if n.name == "w3")
    assert w3.color == "otorange"
    assert "straggler, highlighted: w3" in next(n for n in annotation.layout.nodes if n.name == "measured-note").text
    assert f"{run.metrics['step_time_s']['w3'] * 1000:.1f} ms/step" in w3.label


def test_human_bytes():
    assert [human_bytes(v) for v in (512, 88_104, 2_643_600, 3e9)] == ["512 B", "88.1 kB", "2.64 MB", "3 GB"]


def test_summary_metrics(tmp_path):
    runs = [load_run(synth(tmp_path, kind)) for kind in ("ps-sync", "ps-async")]
    target = default_loss_target(runs)
    assert target >= max(min(r.metrics["loss"]) for r in runs)
    sync, asyn = (summarize(r, target) for r in runs)
    assert sync.staleness_mean is None and asyn.staleness_max == max(runs[1].metrics["staleness"])
    assert sync.bytes_per_step == sum(b["sent"] for b in runs[0].metrics["bytes"].values()) / runs[0].metrics["steps"]
    assert time_to_loss(runs[0].metrics, 0.0) is None
    assert time_to_loss(runs[0].metrics, 100.0) == 0.0
    table = render_summary_table([sync, asyn], target, runs[0].spec)
    assert "\\toprule" in table and "\\bottomrule" in table
    assert "synth-ps-sync & PS sync &" in table and "synth-ps-async & PS async &" in table


@pytest.mark.parametrize("kind", KINDS)
def test_every_figure_uses_only_palette_colours(tmp_path, kind):
    run = load_run(synth(tmp_path, kind))
    for stem, tex in render_run_figures(run).items():
        head, marker, body = tex.partition("%% end palette")
        assert marker, stem
        assert not re.search(r"HTML|#[0-9A-Fa-f]{6}", body), stem
        assert not STOCK_COLORS.search(body), (stem, STOCK_COLORS.search(body))


def test_run_figures_of_a_run_directory_include_plots_and_table(tmp_path):
    run = load_run(synth(tmp_path, "ps-async"))
    assert sorted(render_run_figures(run)) == ["measured-timeline", "measured-topology", "plot-loss",
                                               "plot-staleness", "plot-throughput", "table-summary"]
    sync = load_run(synth(tmp_path, "ps-sync"))
    assert "plot-staleness" not in render_run_figures(sync)


def test_synthetic_run_follows_the_interface(tmp_path):
    run_dir = synth(tmp_path, "ps-async")
    for name in ("spec.yaml", "run.json", "metrics.json", "trace.json", "trace/rank0.jsonl", "trace/rank3.jsonl"):
        assert (run_dir / name).is_file(), name
    trace = json.loads((run_dir / "trace.json").read_text())
    assert trace["displayTimeUnit"] == "ms" and trace["metadata"]["ended_early"] is False
    flows = [e for e in trace["traceEvents"] if e["ph"] in "sf"]
    assert {e["cat"] for e in flows} == {"push"}
    assert sorted(e["id"] for e in flows if e["ph"] == "s") == sorted(e["id"] for e in flows if e["ph"] == "f")
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert set(metrics) == {"steps", "loss", "wall_s", "samples_per_s", "step_time_s", "bytes", "staleness",
                            "per_worker_samples_per_s", "steps_per_worker", "steps_done", "warmup_s",
                            "skipped_steps"}


def test_sampled_trace_default_window_falls_back_to_single_steps(tmp_path):
    run_dir = synth(tmp_path, "ps-sync", steps=20)
    trace = json.loads((run_dir / "trace.json").read_text())
    trace["traceEvents"] = [e for e in trace["traceEvents"] if e["ph"] != "X" or e["args"]["step"] % 5 == 0]
    (run_dir / "trace.json").write_text(json.dumps(trace))
    window = select_window(load_trace(run_dir))
    assert window.first == window.last and window.first in (5, 10, 15)


def test_run_without_a_trace_says_so(tmp_path):
    run_dir = synth(tmp_path, "ps-sync")
    (run_dir / "trace.json").unlink()
    for path in (run_dir / "trace").iterdir():
        path.unlink()
    with pytest.raises(TraceError) as info:
        load_trace(run_dir)
    assert str(info.value) == (f"{run_dir}: the run recorded no trace (runtime.trace.enabled: false?): "
                               "no trace.json and no trace/rank*.jsonl")


def test_binned_lanes_show_each_kinds_true_share_of_every_bin(tmp_path):
    from opentikz_dt.measured.window import MAX_BINS

    run_dir = synth(tmp_path, "ps-sync", steps=1500, workers=4)
    run = load_run(run_dir)
    m = measured_timeline(run.spec, run.trace, (0, 1499))
    lanes = [lane for lane in m.timeline.panels[0].lanes if lane.role != "gap"]
    budget = MAX_BOXES // len(lanes)
    t0, t1 = m.window.t0 / 1000, m.window.t1 / 1000
    for lane in lanes:
        expected = expected_lane_boxes(run_dir, rank_of(run.trace, lane.id), m.window.t0, m.window.t1, False)
        kinds = {k for k, _, _ in expected}
        group = -(-MAX_BINS * len(kinds) // budget) * (t1 - t0) / MAX_BINS  # bins per strip x bin width
        want, got = {}, {}
        for kind, a, b in expected:
            g = int((a - t0) / group)
            while a < b:  # split each span at group edges
                edge = min(b, t0 + (g + 1) * group)
                want[(g, kind)] = want.get((g, kind), 0.0) + edge - a
                a, g = edge, g + 1
        for box in lane.boxes:
            g = int((box.start_ms - t0) / group + 1e-9)
            got[(g, box.kind)] = got.get((g, box.kind), 0.0) + box.end_ms - box.start_ms
        for key in set(want) | set(got):
            assert got.get(key, 0.0) == pytest.approx(want.get(key, 0.0), abs=1e-6), (lane.id, key)


def test_expected_and_measured_timelines_share_one_template_and_axis(tmp_path):
    from opentikz_dt.figures.render import render_timeline as render

    run = load_run(synth(tmp_path, "ps-sync"))
    expected = render(run.spec)
    measured = render(run.spec, measured_timeline(run.spec, run.trace).timeline)

    def styles(tex):
        return tex[tex.index("\\tikzset{"):tex.index("\\begin{tikzpicture}")]
    assert styles(expected) == styles(measured)
    assert "time (relative units)" in expected and "time (ms) from " in measured  # illustrative costs: no ms
    assert re.search(r"node\[below[^]]*\] \{0\}", measured)  # the axis starts at 0 at the window's start


def test_many_workers_are_elided_like_the_spec_diagrams(tmp_path):
    run = load_run(write_synthetic_run(tmp_path / "r", "allreduce-ring", workers=12, steps=6))
    lanes = measured_timeline(run.spec, run.trace).timeline.panels[0].lanes
    assert [lane.id for lane in lanes] == ["w1", "w2", "w3", "more", "w12"]
    assert lanes[3].role == "gap" and lanes[3].label == "8 more workers"


def test_cli_figure_and_compare_on_run_directories(tmp_path):
    sync, asyn = synth(tmp_path, "ps-sync"), synth(tmp_path, "ps-async")
    out = tmp_path / "o"
    result = subprocess.run([sys.executable, "-m", "opentikz_dt", "figure", str(asyn), "--kind", "timeline",
                             "--steps", "2:3", "-o", str(out)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"wrote {out / 'measured-ps-async-timeline.tex'}\n"  # named by the run
    assert "steps 2\u20133" in (out / "measured-ps-async-timeline.tex").read_text()
    result = subprocess.run([sys.executable, "-m", "opentikz_dt", "compare", str(sync), str(asyn), "-o", str(out)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"wrote {out / name}.tex" for name in
                                          ("compare-loss", "compare-throughput", "compare-staleness", "compare-table")]
    bad = subprocess.run([sys.executable, "-m", "opentikz_dt", "figure", str(asyn), "--steps", "x"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2
    assert bad.stderr == "dtgen: error: --steps 'x': expected FIRST:LAST, both included (e.g. 10:14), or one step (12)\n"


def test_hostile_run_files_never_reach_tex_raw(tmp_path):
    run_dir = synth(tmp_path, "ps-sync")
    trace = json.loads((run_dir / "trace.json").read_text())
    evil = "w1\\input{/etc/passwd}"
    trace["traceEvents"].append({"ph": "X", "name": "forward", "pid": 0, "tid": 0, "ts": 1.0, "dur": 1.0,
                                 "args": {"step": 5, "id": evil}})
    trace["traceEvents"].append({"ph": "M", "name": "process_name", "pid": 9, "args": {"name": evil + " (rank 9)"}})
    (run_dir / "trace.json").write_text(json.dumps(trace))
    metrics = json.loads((run_dir / "metrics.json").read_text())
    metrics["per_worker_samples_per_s"][evil] = 1.0
    metrics["step_time_s"]["w1"] = "\\input{x}"
    metrics["bytes"]["\\input{x}"] = {"sent": 1, "recv": 1}
    (run_dir / "metrics.json").write_text(json.dumps(metrics))
    info = json.loads((run_dir / "run.json").read_text())
    info.update(status="failed", failure={"rank": 0, "id": evil, "exit_code": "\\input{x}"})
    (run_dir / "run.json").write_text(json.dumps(info))
    run = load_run(run_dir)
    assert run.trace.skipped == 1 and 9 not in run.trace.ids
    for stem, tex in render_run_figures(run).items():
        assert "\\input" not in tex, stem
    assert run.trace.note == "run failed: rank 0 (?) exited with ?"


def test_comm_overlapping_compute_gets_its_own_lane():
    from opentikz_dt.measured.timeline import _lane_spans
    from opentikz_dt.measured.trace import Span

    def span(tid, name, a, b):
        return Span(0, tid, name, a, b, 0, "w1", {})
    # A long comm span that started long before many short ones and is still open when compute runs.
    comm = [span(1, "wait", 0, 1000)] + [span(1, "push", 10 + i, 10.5 + i) for i in range(100)]
    overlapping = [span(0, "forward", 500, 600)]
    main, split = _lane_spans(comm + overlapping)
    assert split is not None and main == overlapping
    sequential = [span(0, "forward", 1000, 1100)]
    main, split = _lane_spans(comm + sequential)
    assert split is None and len(main) == 102


def test_fp16_skipped_steps_are_named_under_the_timeline(tmp_path):
    """The runner marks a skipped fp16 update's span `skipped`; the note names those steps
    of the window, and only those."""
    run_dir = synth(tmp_path, "allreduce-ring")
    path = run_dir / "trace.json"
    trace = json.loads(path.read_text())
    marked = [e for e in trace["traceEvents"] if e.get("name") == "optimizer" and e["args"].get("step") in (3, 9)]
    assert marked
    for e in marked:
        e["args"]["skipped"] = True
    path.write_text(json.dumps(trace))
    run = load_run(run_dir)
    note = measured_timeline(run.spec, run.trace, parse_steps("2:4")).timeline.note
    assert note == "fp16: no update at step 3 (gradients overflowed; step skipped)"
    assert "fp16" not in measured_timeline(run.spec, run.trace, parse_steps("5:7")).timeline.note
