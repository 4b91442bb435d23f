"""The words a timeline prints: set in the spec's language, legible where boxes are narrow,
measured on the compiled PDF (pdftotext word boxes, the geometry probe)."""

from __future__ import annotations

import re

import pytest

from opentikz_dt.errors import SpecError
from opentikz_dt.figures.bbox import parse_bboxes
from opentikz_dt.figures.checks import check_figure_geometry
from opentikz_dt.figures.compile import compile_pdf, pdf_text
from opentikz_dt.figures.fit import COLUMN_CM, MIN_TEXT_PT, target_width_cm, with_width
from opentikz_dt.figures.names import BOX_KINDS
from opentikz_dt.figures.pdfwords import overlapping_words, pdf_words, smallest_text_pt
from opentikz_dt.figures.render import render_timeline, render_topology
from opentikz_dt.predict.expected import illustrative_timeline as expected_timeline
from opentikz_dt.figures.texts import timeline_words
from opentikz_dt.figures.timeline import KIND_NAMES, draw_timeline
from opentikz_dt.resources import spec_schema
from opentikz_dt.spec import load_spec, spec_from_data

from conftest import REPO

SEED_ZH = REPO / "examples" / "seed-001-zh.yaml"
PT_PER_CM = 72.27 / 2.54
# What the seed-001-zh figures print in English unless the spec sets the words.
ENGLISH = ("synchronous", "asynchronous", "fetch", "forward", "backward", "server update", "push", "idle",
           "time (relative units)", "expected from the spec", "this spec", "Parameter server")


def _flat(pdf: bytes) -> str:
    return re.sub(r"\s+", "", pdf_text(pdf))  # pdftotext spaces CJK glyphs apart


def test_the_legend_defaults_are_the_schemas_and_cover_every_box_kind():
    legend = spec_schema()["properties"]["figure"]["properties"]["labels"]["properties"]["legend"]["properties"]
    assert {kind: node["default"] for kind, node in legend.items()} == KIND_NAMES
    assert set(legend) == set(BOX_KINDS)


def test_figure_words_are_checked_like_labels_and_pick_the_cjk_path():
    english = spec_from_data({"strategy": {"kind": "parameter-server"}})
    assert "CJKutf8" not in render_timeline(english)
    # one word in Chinese, everything else English: the figure still loads CJKutf8
    spec = spec_from_data({"strategy": {"kind": "parameter-server"}, "figure": {"labels": {"legend": {"wait": "空闲"}}}})
    assert r"\usepackage{CJKutf8}" in render_timeline(spec)
    bad = {"strategy": {"kind": "parameter-server"},
           "figure": {"labels": {"time_axis": r"$\input{/etc/passwd}$", "legend": {"push": "50% & #1"}}}}
    with pytest.raises(SpecError) as err:
        spec_from_data(bad)
    assert ("<spec>:1:1: figure.labels.time_axis: command '\\input' is not allowed in math (allowed: Greek letters, "
            "\\nabla, \\partial, \\mathbf, \\frac, ...) [invariant labels-safe]") in str(err.value)
    escaped = render_timeline(spec_from_data({**bad, "figure": {"labels": {"legend": {"push": "50% & #1"}}}}))
    assert r"50\% \& \#1" in escaped


def test_the_shard_group_caption_counts_the_shards_in_the_spec_words():
    spec = spec_from_data({"strategy": {"kind": "parameter-server"}, "topology": {"servers": {"count": 3, "label": "分片"}},
                           "figure": {"labels": {"server_group": "参数服务器（{n} 个分片）"}}})
    tex = render_topology(spec)
    assert "参数服务器（3 个分片）" in tex and "Parameter server" not in tex


@pytest.mark.latex
def test_the_seed_001_zh_figures_read_in_chinese():
    spec = load_spec(SEED_ZH)
    timeline = compile_pdf(render_timeline(spec))
    text = _flat(timeline.pdf)
    assert text.count("(a)同步更新") == 2  # the spec's title, then the panel's
    for words in ("(b)异步更新", "取参数", "前向", "反向", "服务器更新", "推送梯度", "空闲", "时间（相对单位）"):
        assert words in text, (words, text[:300])
    topology = _flat(compile_pdf(render_topology(spec)).pdf)
    assert "参数服务器(2个分片)" in topology.replace("（", "(").replace("）", ")")
    for english in ENGLISH:
        assert english.replace(" ", "") not in text + topology, english
    assert check_figure_geometry(timeline.log) == []


@pytest.mark.latex
def test_a_cjk_title_keeps_its_glyphs_together():
    """The timeline's wrapped, centred title must set CJK text as the topology does: glyph
    after glyph, not spread over the width (TikZ's align=center lets the CJK glue stretch)."""
    spec = load_spec(SEED_ZH)
    pitches = {}
    for kind, tex in (("topology", render_topology(spec)), ("timeline", render_timeline(spec))):
        words = pdf_words(compile_pdf(tex).pdf)
        glyphs = [w for w in words if w.text in "同步更新：参数服务器训练" and w.y0 < min(x.y0 for x in words) + 4]
        pitches[kind] = max(b.x0 - a.x1 for a, b in zip(glyphs, glyphs[1:]))
    assert pitches["timeline"] < 1.0 and pitches["topology"] < 1.0, pitches


def _letters_of_every_fetch_and_push(spec) -> int:
    """Every F and P the timeline prints sits inside a fetch or push box (none floats between
    the lanes, where it reads as the lane's neighbour's), and the legend names the letter
    exactly when a box holds one. Returns how many letters are printed."""
    drawing = draw_timeline(expected_timeline(spec), target_width_cm(spec), timeline_words(spec))  # as rendered
    boxes = [b for p in drawing.panels for b in p.boxes]
    inside = {"F": sum(b.style == "tl-fetch" and str(b.text) == "F" for b in boxes),
              "P": sum(b.style == "tl-push" and str(b.text) == "P" for b in boxes)}
    result = compile_pdf(render_timeline(spec))
    words = pdf_words(result.pdf)
    assert {letter: sum(w.text == letter for w in words) for letter in inside} == inside, spec.name
    legend = {str(entry.name) for entry in drawing.legend}
    for letter, kind in (("F", "fetch"), ("P", "push")):
        named = any(name.endswith(f"({letter})") for name in legend)
        assert named or not inside[letter], (spec.name, letter, legend)  # a spec's own legend may name it anyway
        if not inside[letter] and not timeline_words(spec).legend[kind].endswith(f"({letter})"):
            assert not named, (spec.name, letter, legend)  # no letter drawn: none explained
    assert overlapping_words(words) == [] and smallest_text_pt(words) >= MIN_TEXT_PT
    assert check_figure_geometry(result.log) == []
    return sum(inside.values())


@pytest.mark.latex
def test_fetch_and_push_letters_sit_in_their_boxes_or_nowhere():
    ps = load_spec(REPO / "examples" / "ps-sync.yaml")
    _letters_of_every_fetch_and_push(with_width(ps, "column"))  # narrow: where one does not fit, no stray letter
    _letters_of_every_fetch_and_push(ps)
    _letters_of_every_fetch_and_push(with_width(load_spec(SEED_ZH), "column"))
    wide = _letters_of_every_fetch_and_push(with_width(ps, "40cm"))
    assert wide > 0  # room in the boxes: the letters are drawn, and the legend explains them


def test_a_zero_length_push_at_the_window_start_draws_nothing():
    from opentikz_dt.figures.timeline import Box, Lane, Panel, Timeline

    boxes = (Box(0, 0, "push", "P"), Box(0, 0.5, "wait"), Box(0.5, 0.6, "fetch", "F"), Box(0.6, 20, "forward", "fwd"))
    drawing = draw_timeline(Timeline("t", (Panel("main", "p", (Lane("w1", "W1", boxes),)),)))
    assert [b.style for b in drawing.panels[0].boxes] == ["tl-wait", "tl-fetch", "tl-forward"]


# ---------------------------------------------------------------- runs: measured and predicted timelines

# Every word a run's timeline prints itself, set in Chinese (one distinct phrase a key).
RUN_WORDS = {
    "measured_panel": "实测第 {steps} 步", "predicted_panel": "预测第 {steps} 步", "measured_axis": "时间自 {t0} 毫秒",
    "window_note": "代表窗口 {steps}", "requested_note": "指定窗口 {steps}", "aggregated_note": "合并 {spans} 段，每道 {budget}",
    "bubble_panel": "气泡 {bubble}，理论 {theory}", "bubble_note": "气泡 {bubble}，均值 {run_mean}，{ideal} = {theory}",
    "stage_lane": "第 {i} 级", "comm_lane": "{lane} 通信", "more_workers": "另 {n} 个工作节点", "more_stages": "另 {n} 级",
    "legend": {kind: f"图例{k}" for k, kind in enumerate(BOX_KINDS)},
    "phases": {"reduce_scatter": "规约散射", "all_gather": "全收集"},
}
# The English dtgen prints where the spec does not set its words (a run's figure, any kind).
RUN_ENGLISH = ("measured", "predicted", "time (ms)", "into the run", "representative", "as requested", "steps ",
               "bubble", "run mean", "balanced", "aggregated", "Stage", "(comm)", "more workers", "more stages",
               "reduce-scatter", "all-gather", "fwd", "bwd", "opt", "slow", "Update")


def _with_words(run_dir, labels: dict, spec_zh: bool = False):
    """The run's spec.yaml with these figure.labels (as a run of a spec that sets them has),
    and with seed-001-zh's title and topology labels when spec_zh."""
    import yaml

    path = run_dir / "spec.yaml"
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data["figure"]["labels"] = {**data["figure"]["labels"], **labels}
    if spec_zh:
        seed = yaml.safe_load(SEED_ZH.read_text(encoding="utf-8"))
        data["title"] = seed["title"]
        for part in ("data", "workers", "servers"):
            data["topology"][part]["label"] = seed["topology"][part]["label"]
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return run_dir


def _drawn_text(drawing) -> str:
    """Every word a drawn timeline prints: titles, lane names, box texts, legend, axis, note."""
    parts = [drawing.title, drawing.axis_label, drawing.note] + [entry.name for entry in drawing.legend]
    for panel in drawing.panels:
        parts += [panel.title] + [lane.label for lane in panel.lanes] + [box.text for box in panel.boxes]
    return " ".join(parts).replace("~", " ")  # a tie prints as a space (a typed ~ is \textasciitilde{})


@pytest.mark.parametrize("kind, options", [
    ("pipeline-1f1b", {"steps": "2:3"}),  # stages, the bubble in the title and the note, steps asked for
    ("allreduce-ring", {"workers": 12}),  # phases, elided workers, the representative window
    ("allreduce-native", {"max_boxes": 60}),  # a comm lane beside compute, binned lanes
])
def test_a_runs_timeline_prints_only_the_specs_words(tmp_path, kind, options):
    from opentikz_dt.measured.run import load_run
    from opentikz_dt.measured.timeline import measured_timeline
    from opentikz_dt.measured.window import MAX_BOXES, parse_steps
    from opentikz_dt.predict.synthetic import write_synthetic_run

    run_dir = write_synthetic_run(tmp_path / kind, kind, workers=options.get("workers", 3), steps=8)
    run = load_run(_with_words(run_dir, RUN_WORDS))
    measured = measured_timeline(run.spec, run.trace, parse_steps(options.get("steps")),
                                 options.get("max_boxes", MAX_BOXES))
    text = _drawn_text(draw_timeline(measured.timeline, None, timeline_words(run.spec)))
    for english in RUN_ENGLISH:
        assert english not in text, (english, text)
    window = measured.window
    numbers = f"{window.first}" if window.first == window.last else f"{window.first}\u2013{window.last}"
    assert f"实测第 {numbers} 步" in text and f"时间自 {window.t0 / 1000:,.1f} 毫秒" in text
    wanted = {"pipeline-1f1b": ["第 1 级", "第 2 级", "气泡", "均值"],  # the bubble's note, not the window's
              "allreduce-ring": ["另 ", " 个工作节点", "规约散射 (RS)", "全收集 (AG)", f"代表窗口 {numbers}"],
              "allreduce-native": [" 通信", "合并 "]}[kind]
    for words in wanted:
        assert words in text, (words, text)


@pytest.mark.latex
def test_a_run_of_the_seed_001_zh_spec_draws_its_timelines_in_chinese(tmp_path):
    """dtgen figure RUN_DIR of a measured and of a predicted run of the spec: its words, no English."""
    from opentikz_dt.measured.figures import write_run_figures
    from opentikz_dt.predict.predict import predict
    from opentikz_dt.predict.synthetic import write_synthetic_run

    measured = write_synthetic_run(tmp_path / "measured", "ps-sync", workers=3, steps=8)
    _with_words(measured, load_spec(SEED_ZH).data["figure"]["labels"], spec_zh=True)
    predicted, _ = predict(SEED_ZH, tmp_path / "predicted", steps=8)
    texts = {}
    for name, run_dir, steps in (("measured", measured, None), ("predicted", predicted, "2:3")):
        written = write_run_figures(run_dir, tmp_path / f"{name}-fig", ("pdf",), steps, only=("measured-timeline",))
        texts[name] = _flat(next(p for p in written if p.suffix == ".pdf").read_bytes())
    assert "实测：同步参数服务器，第" in texts["measured"] and "有代表性的一段" in texts["measured"]
    assert "预测：同步参数服务器，第2–3步" in texts["predicted"] and "第2–3步：按要求选取" in texts["predicted"]
    for text in texts.values():
        assert re.search(r"时间\(ms\)，从运行第[0-9,.]+ms起算", text), text
        for words in ("取参数", "前向", "反向", "推送梯度", "空闲"):
            assert words in text, (words, text)
        for english in ("measured", "predicted", "time(ms)", "intotherun", "representative", "requested", "steps",
                        "Parameter", "Worker", "fetch", "forward", "backward", "push", "idle", "Update"):
            assert english not in text, (english, text)


# ---------------------------------------------------------------- the words inside: phases, elided and narrow lanes


def _expected_drawing(data: dict, width: str | None = None):
    spec = spec_from_data(data)
    spec = with_width(spec, width) if width else spec
    return draw_timeline(expected_timeline(spec), target_width_cm(spec), timeline_words(spec))


def test_phase_names_and_elided_lanes_are_the_specs_words():
    phases = {"reduce_scatter": "规约散射", "all_gather": "全收集", "reduce": "归约", "broadcast": "广播",
              "intra_host_reduce": "机内归约", "inter_host_allreduce": "机间全归约", "intra_host_broadcast": "机内广播"}
    # (the boxes print the phases' abbreviations, which the legend names beside the spec's words;
    # a hierarchical all-reduce's host broadcast is traced as a broadcast)
    for algorithm, hosts, names in (("ring", 1, ["规约散射 (RS)", "全收集 (AG)"]), ("tree", 1, ["归约 (R)", "广播 (B)"]),
                                    ("hierarchical", 2, ["广播 (B)", "机内归约 (intra)", "机间全归约 (inter)"])):
        drawing = _expected_drawing({"strategy": {"kind": "allreduce", "algorithm": algorithm},
                                     "topology": {"workers": {"count": 4}, "hosts": hosts},
                                     "figure": {"labels": {"phases": phases}}})
        legend = [entry.name for entry in drawing.legend if entry.style.startswith("tl-allreduce")]
        assert sorted(legend) == sorted(names), algorithm
    # a phase box wide enough for its full name prints the spec's; an abbreviation (RS) stays
    from opentikz_dt.figures.timeline import Box, Lane, Panel, Timeline, Words

    boxes = (Box(0, 10, "allreduce", "reduce-scatter", "reduce-scatter"), Box(10, 11, "allreduce", "AG", "all-gather"))
    drawing = draw_timeline(Timeline("t", (Panel("main", "p", (Lane("w1", "W1", boxes),)),)), None,
                            Words(phases={"reduce-scatter": "规约散射", "all-gather": "全收集"}))
    assert [str(b.text) for b in drawing.panels[0].boxes] == ["规约散射", "AG"]
    assert [entry.name for entry in drawing.legend] == ["规约散射", "全收集 (AG)"]
    many = _drawn_text(_expected_drawing({"strategy": {"kind": "parameter-server"}, "topology": {"workers": {"count": 1024}},
                                          "training": {"dataset": {"samples": 2_000_000}},
                                          "figure": {"labels": {"more_workers": "另 {n} 个工作节点"}}}))
    assert "另 1,020 个工作节点" in many and "more" not in many
    stages = _drawn_text(_expected_drawing({"strategy": {"kind": "pipeline", "microbatches": 8},
                                            "topology": {"workers": {"count": 8}},
                                            "training": {"model": {"kind": "mlp", "layers": [64] * 9}},
                                            "figure": {"max_workers_drawn": 4,
                                                       "labels": {"stage_lane": "第 {i} 级", "more_stages": "另 {n} 级"}}}))
    assert "第 1 级" in stages and "另 5 级" in stages and "Stage" not in stages and "more" not in stages


def _lane_labels(data: dict, width: str) -> list:
    return [lane.label for lane in _expected_drawing(data, width).panels[0].lanes]


def test_a_narrow_timeline_abbreviates_lanes_in_the_specs_words():
    """Too long to sit beside the lanes of a column-wide figure, a label gives way to the spec's
    short form of it (seed-001-zh: GPU1 for 处理器 1 (GPU1), 分片 1 for 参数分片 1); a single
    server's has no number."""
    seed = load_spec(SEED_ZH).data
    assert _lane_labels(seed, "column") == ["分片 1", "分片 2", "GPU1", "GPU2", "GPU3"]
    one = {**seed, "topology": {**seed["topology"], "servers": {"count": 1, "label": "参数服务器进程"}}}
    assert _lane_labels(one, "column") == ["分片", "GPU1", "GPU2", "GPU3"]
    english = {"strategy": {"kind": "parameter-server"},
               "topology": {"workers": {"count": 3, "label": "Worker process {i}"}, "servers": {"label": "Parameter store"}}}
    assert _lane_labels(english, "column") == ["PS", "W1", "W2", "W3"]  # the defaults


def test_a_narrow_timelines_comm_lane_takes_its_compute_lanes_short_name():
    """A column-wide FSDP timeline once named its lanes W1 beside Worker 1 (comm): the comm
    lane's long name shortened the compute lane, and kept its own long form."""
    fsdp = {"strategy": {"kind": "fsdp"}, "topology": {"workers": {"count": 2}}}
    assert _lane_labels(fsdp, "column") == ["W1", "W1 (comm)", "W2", "W2 (comm)"]
    zh = {**fsdp, "figure": {"labels": {"worker_short": "卡{i}", "comm_lane": "{lane} 通信"}}}
    assert _lane_labels(zh, "column") == ["卡1", "卡1 通信", "卡2", "卡2 通信"]  # the spec's words
    assert _lane_labels(fsdp, "page") == ["Worker 1", "Worker 1 (comm)", "Worker 2", "Worker 2 (comm)"]
    # a rank's two lanes are elided together, and the gap counts ranks: 3 workers once drew
    # W1, W1 (comm), W2, '2 more workers', W3 (comm)
    three = {**fsdp, "topology": {"workers": {"count": 3}}}
    assert _lane_labels(three, "column") == ["W1", "W1 (comm)", "W2", "W2 (comm)", "W3", "W3 (comm)"]
    four = {**fsdp, "topology": {"workers": {"count": 4}}}
    assert _lane_labels(four, "column") == ["W1", "W1 (comm)", "2 more workers", "W4", "W4 (comm)"]


def test_a_wrapped_panel_title_keeps_its_last_words_together_and_clear_of_the_legend():
    """A column-wide measured FSDP panel title wrapped as 'measured: ... (FSDP), steps' over
    '6–8', and was laid out as one line (its estimate used the width before the node's
    padding): the title grew up into the legend."""
    from opentikz_dt.figures.timeline import Box, Lane, Panel, Timeline, tied_label

    assert tied_label("measured: sharded data parallel (FSDP), steps 6–8") == \
        "measured: sharded data parallel (FSDP), steps~6–8"
    assert tied_label("bubble 33% = $(p-1)/(m+p-1)$") == r"bubble 33\% =~$(p-1)/(m+p-1)$"  # math stays whole
    assert tied_label("a $b c$") == "a~$b c$" and tied_label("one") == "one"
    title = "measured: sharded data parallel (FSDP), steps 6–8"
    lanes = (Lane("w1", "W1", (Box(0, 80, "forward"),)),)
    drawing = draw_timeline(Timeline("t", (Panel("measured", title, lanes),)), COLUMN_CM)
    panel = drawing.panels[0]
    assert str(panel.title).endswith("steps~6–8")
    width_cm = 0.155 * len(title)  # \small bold: 211.8 pt for this title, measured with pdflatex
    assert width_cm > drawing.text_width and panel.title_lines == 2


_TICK = re.compile(r"\\draw\[tick\] \((-?[\d.]+),(-?[\d.]+)\) -- \((-?[\d.]+),(-?[\d.]+)\);")


@pytest.mark.latex
def test_no_grid_line_strikes_through_the_elided_workers_text():
    """The 1,024-worker timeline: each panel's "1,020 more workers" (its probed box) is crossed
    by none of the tick lines, which still run over the lanes above and below it."""
    spec = spec_from_data({"strategy": {"kind": "parameter-server"}, "training": {"dataset": {"samples": 2_000_000}},
                           "topology": {"workers": {"count": 1024, "slowdown": {"w2": 1.5}}}})
    tex = render_timeline(spec)
    gaps = [b for b in parse_bboxes(compile_pdf(tex).log) if b.name.endswith("-more-sync-label")
            or b.name.endswith("-more-async-label")]
    assert len(gaps) == 2 and all(b.width > 20 for b in gaps)
    ticks = [tuple(float(v) * PT_PER_CM for v in m.groups()) for m in _TICK.finditer(tex)]
    for gap in gaps:
        crossing = [t for t in ticks if gap.x0 < t[0] < gap.x1 and min(t[1], t[3]) < gap.y1 and max(t[1], t[3]) > gap.y0]
        assert crossing == [], (gap, crossing)
        beside = [t for t in ticks if gap.x0 < t[0] < gap.x1]
        assert any(min(t[1], t[3]) > gap.y1 for t in beside) and any(max(t[1], t[3]) < gap.y0 for t in beside)
