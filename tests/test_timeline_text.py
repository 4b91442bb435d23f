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
from opentikz_dt.figures.pdfwords import overlapping_words, page_size_cm, pdf_words, smallest_text_pt
from opentikz_dt.figures.render import render_timeline, render_topology
from opentikz_dt.figures.schedule import expected_timeline
from opentikz_dt.figures.timeline import KIND_NAMES, draw_timeline
from opentikz_dt.resources import spec_schema
from opentikz_dt.spec import load_spec, spec_from_data

from conftest import REPO

SEED_ZH = REPO / "examples" / "seed-001-zh.yaml"
PT_PER_CM = 72.27 / 2.54
# What the seed-001-zh figures print in English unless the spec sets the words.
ENGLISH = ("synchronous", "asynchronous", "fetch", "forward", "backward", "server update", "push", "idle",
           "time (ms)", "expected from the spec", "this spec", "Parameter server")


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
    for words in ("(b)异步更新", "取参数", "前向", "反向", "服务器更新", "推送梯度", "空闲", "时间(ms)"):
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


def test_letters_that_would_touch_spread_apart_and_one_too_far_from_its_box_is_left_out():
    from opentikz_dt.figures.timeline_tags import TAG_PITCH, place_tags, spread

    assert spread([1.0, 1.1], 0.32, 0.0, 10.0) == pytest.approx([0.89, 1.21])  # centred on their wishes
    assert spread([9.95, 9.96], 0.32, 0.0, 10.0) == pytest.approx([9.68, 10.0])  # kept inside the plot
    assert spread([1.0, 3.0], 0.32, 0.0, 10.0) == [1.0, 3.0]  # apart already: untouched
    crowded = place_tags([(5.0, "P", f"w1-main-push{k}") for k in range(1, 6)], 10.0, 0.0)
    assert [t.name for t in crowded] == ["w1-main-push2", "w1-main-push3", "w1-main-push4"]
    assert all(abs(t.x - 5.0) <= TAG_PITCH + 1e-9 for t in crowded)


def _letters_of_every_fetch_and_push(spec) -> None:
    """Every fetch and push box of the drawn timeline prints its letter (F, P): inside, or
    above the box in the lane gap, touching no box, no other text, at least 6 pt."""
    drawing = draw_timeline(expected_timeline(spec), target_width_cm(spec))
    boxes = [b for p in drawing.panels for b in p.boxes]
    wanted = {"F": sum(b.style == "tl-fetch" for b in boxes), "P": sum(b.style == "tl-push" for b in boxes)}
    result = compile_pdf(render_timeline(spec))
    words = pdf_words(result.pdf)
    assert {letter: sum(w.text == letter for w in words) for letter in wanted} == wanted, spec.name
    assert overlapping_words(words) == [] and smallest_text_pt(words) >= MIN_TEXT_PT
    assert check_figure_geometry(result.log) == []  # letters against labels, legend, titles
    tags = [b for b in parse_bboxes(result.log) if re.search(r"-(fetch|push)[0-9]+$", b.name)]
    assert tags or all(str(b.text) for b in boxes if b.style in ("tl-fetch", "tl-push"))
    for tag in tags:
        kind = re.search(r"-(fetch|push)[0-9]+$", tag.name).group(1)
        hits = [b for b in boxes if min(tag.x1, b.x1 * PT_PER_CM) - max(tag.x0, b.x0 * PT_PER_CM) > 0.3
                and min(tag.y1, b.y1 * PT_PER_CM) - max(tag.y0, b.y0 * PT_PER_CM) > 0.3]
        assert hits == [], (tag, hits)
        below = [b for b in boxes if b.style == f"tl-{kind}" and 0 <= tag.y0 - b.y1 * PT_PER_CM < 3
                 and abs((tag.x0 + tag.x1) / 2 - b.xc * PT_PER_CM) < 8]
        assert below, tag  # just above a box of its own kind
    return page_size_cm(result.pdf)[0], len(tags)


@pytest.mark.latex
def test_narrow_fetch_and_push_boxes_keep_their_letters():
    ps = load_spec(REPO / "examples" / "ps-sync.yaml")
    width, tags = _letters_of_every_fetch_and_push(with_width(ps, "column"))
    assert width <= COLUMN_CM and tags > 0
    _letters_of_every_fetch_and_push(ps)  # natural width: the async panel's last push is cut by the window
    width, tags = _letters_of_every_fetch_and_push(with_width(load_spec(SEED_ZH), "column"))
    assert width <= COLUMN_CM and tags > 0


def test_a_zero_length_push_at_the_window_start_gets_no_letter():
    from opentikz_dt.figures.timeline import Box, Lane, Panel, Timeline

    boxes = (Box(0, 0, "push", "P"), Box(0, 0.5, "wait"), Box(0.5, 0.6, "fetch", "F"), Box(0.6, 20, "forward", "fwd"))
    drawing = draw_timeline(Timeline("t", (Panel("main", "p", (Lane("w1", "W1", boxes),)),)))
    assert [(t.name, str(t.text)) for t in drawing.panels[0].tags] == [("w1-main-fetch1", "F")]


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
