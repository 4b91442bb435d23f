"""The words a timeline prints, set in the spec's language: measured on the compiled PDF
(pdftotext, the geometry probe)."""

from __future__ import annotations

import re

import pytest

from opentikz_dt.errors import SpecError
from opentikz_dt.figures.checks import check_figure_geometry
from opentikz_dt.figures.compile import compile_pdf, pdf_text
from opentikz_dt.figures.names import BOX_KINDS
from opentikz_dt.figures.pdfwords import pdf_words
from opentikz_dt.figures.render import render_timeline, render_topology
from opentikz_dt.figures.timeline import KIND_NAMES
from opentikz_dt.resources import spec_schema
from opentikz_dt.spec import load_spec, spec_from_data

from conftest import REPO

SEED_ZH = REPO / "examples" / "seed-001-zh.yaml"
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
