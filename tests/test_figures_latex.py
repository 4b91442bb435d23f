"""Figures through real pdflatex: every example compiles, nothing overlaps, labels print literally."""

from __future__ import annotations

import dataclasses
import re

import pytest
from click.testing import CliRunner

from opentikz_dt.cli import main
from opentikz_dt.errors import CompileError, ToolMissingError
from opentikz_dt.figures.bbox import parse_bboxes
from opentikz_dt.figures.checks import check_figure_compiles, check_figure_geometry, check_no_overlaps
from opentikz_dt.figures import compile as compile_module
from opentikz_dt.figures.compile import compile_cached, compile_pdf, pdf_text, tool
from opentikz_dt.figures.render import render_timeline, render_topology
from opentikz_dt.figures.topology import build_layout
from opentikz_dt.spec import load_spec, spec_from_data

from conftest import EXAMPLES

pytestmark = pytest.mark.latex
BIG = {"training": {"dataset": {"samples": 2000000}}}


def _compiled(tex):
    result = compile_pdf(tex)
    return result, parse_bboxes(result.log)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_compiles_without_overlaps(path):
    spec = load_spec(path)
    for tex in (render_topology(spec), render_timeline(spec)):
        result, boxes = _compiled(tex)
        assert result.pdf.startswith(b"%PDF")
        names = {b.name for b in boxes}
        assert "title" in names and len(boxes) >= 5
        assert check_no_overlaps(boxes) == []


def _spaced(spec, colsep, rowsep):
    return spec_from_data({**spec.data, "figure": {**spec.data["figure"], "colsep": colsep, "rowsep": rowsep}})


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_the_tightest_allowed_spacing_gives_no_overlaps(path):
    """colsep 1 and rowsep 1.2 are valid (the schema's minimums): dtgen widens them as needed."""
    spec = _spaced(load_spec(path), 1, 1.2)
    for tex in (render_topology(spec), render_timeline(spec)):
        assert check_figure_geometry(compile_pdf(tex).log) == []


@pytest.mark.parametrize("name", ["allreduce-hierarchical", "ps-sharded"])
def test_the_widest_allowed_spacing_stays_within_tex_limits(name):
    spec = _spaced(load_spec(next(p for p in EXAMPLES if p.stem == name)), 20, 20)
    assert check_figure_geometry(compile_pdf(render_topology(spec)).log) == []


def test_a_tight_spacing_with_1024_workers_and_hosts_gives_no_overlaps():
    for data in ({"strategy": {"kind": "parameter-server"}, "topology": {"workers": {"count": 1024}}, **BIG},
                 {"strategy": {"kind": "allreduce"}, "topology": {"workers": {"count": 6}, "hosts": 2}}):
        spec = spec_from_data({**data, "figure": {"colsep": 1, "rowsep": 1.2}})
        assert check_figure_geometry(compile_pdf(render_topology(spec)).log) == []


def test_the_sharded_server_is_labelled_as_one_server_of_shards():
    spec = load_spec(next(p for p in EXAMPLES if p.stem == "ps-sharded"))  # servers.label: Shard
    text = re.sub(r"\s+", " ", pdf_text(compile_pdf(render_topology(spec)).pdf))
    assert "Parameter server (2 shards)" in text
    assert "Shard 1" in text and "Shard 2" in text and len(re.findall(r"\bShard\b", text)) == 2


def test_the_edit_checks_compile_each_figure_once(monkeypatch):
    from opentikz_dt.edit.texcheck import check_tex_invariants

    runs = []
    real = compile_module._run
    monkeypatch.setattr(compile_module, "_run", lambda argv, *a, **k: runs.append(argv[0]) or real(argv, *a, **k))
    monkeypatch.setattr(compile_module, "_CACHE", compile_module.OrderedDict())
    spec = spec_from_data({"strategy": {"kind": "allreduce", "algorithm": "ring"}, "title": "compiled once"})
    assert check_tex_invariants(spec) == []
    assert len(runs) == 2  # topology and timeline; figure-compiles and no-overlaps share each run
    bad = "\\documentclass{standalone}\\begin{document}\\undefinedmacro\\end{document}\n"
    assert check_figure_compiles(bad) == check_figure_compiles(bad) != []
    assert len(runs) == 3  # a failure is remembered too
    with pytest.raises(CompileError, match="Undefined control sequence"):
        compile_cached(bad)


@pytest.mark.parametrize("kind, extra", [
    ("parameter-server", {}),
    ("parameter-server", {"topology": {"servers": {"count": 6}}}),
    ("allreduce", {"strategy": {"algorithm": "tree"}}),
    ("allreduce", {"strategy": {"algorithm": "hierarchical"}, "topology": {"hosts": 128}}),
    ("gossip", {}),
    ("allreduce", {"strategy": {"algorithm": "ring"}, "figure": {"palette": "dark"}}),
])
def test_1024_workers_give_a_clean_figure(kind, extra):
    data = {"strategy": {"kind": kind, **extra.get("strategy", {})},
            "topology": {"workers": {"count": 1024}, **extra.get("topology", {})}, **BIG}
    if "figure" in extra:
        data["figure"] = extra["figure"]
    spec = spec_from_data(data)
    for tex in (render_topology(spec), render_timeline(spec)):
        assert check_figure_geometry(compile_pdf(tex).log) == []


def test_pipeline_with_many_stages_and_microbatches_compiles():
    spec = spec_from_data({"strategy": {"kind": "pipeline", "microbatches": 64},
                           "topology": {"workers": {"count": 16}},
                           "training": {"model": {"layers": [8] * 17}, "batch_size": 256}})
    for tex in (render_topology(spec), render_timeline(spec)):
        assert check_figure_geometry(compile_pdf(tex).log) == []


def test_the_probe_catches_an_overlap():
    spec = spec_from_data({"strategy": {"kind": "parameter-server"}})
    layout = build_layout(spec)
    nodes = tuple(dataclasses.replace(n, y=0.0) if n.name == "w1" else n for n in layout.nodes)  # w1 onto w2
    log = compile_pdf(render_topology(spec, layout=dataclasses.replace(layout, nodes=nodes))).log
    problems = check_figure_geometry(log)
    assert "'w1' and 'w2' overlap" in " ".join(problems)


@pytest.mark.parametrize("payload", [r"\input{/etc/passwd}", r"}\immediate\write18{x}", r"50% & #1 ~ ^_^ \$5 {x}"])
def test_injection_payloads_print_literally(payload):
    spec = spec_from_data({"strategy": {"kind": "parameter-server"}, "title": payload,
                           "topology": {"data": {"label": payload}}})
    for tex in (render_topology(spec), render_timeline(spec)):
        text = pdf_text(compile_pdf(tex).pdf)
        flat = re.sub(r"\s+", " ", text)
        assert payload.replace(r"\$", "$") in flat
        assert "root:" not in text


def test_compile_is_byte_identical():
    tex = render_topology(spec_from_data({"strategy": {"kind": "gossip"}}))
    assert compile_pdf(tex).pdf == compile_pdf(tex).pdf


def test_a_failed_compile_quotes_the_first_error_line(tmp_path):
    bad = "\\documentclass{standalone}\\begin{document}\\undefinedmacro\\end{document}\n"
    with pytest.raises(CompileError, match=r"pdflatex failed: ! Undefined control sequence\. l\.1 \(log: .*bad\.log\)"):
        compile_pdf(bad, keep_log=tmp_path / "bad.log")
    assert check_figure_compiles(bad)[0].startswith("pdflatex failed: ! Undefined control sequence.")
    assert check_figure_compiles(render_topology(spec_from_data({"strategy": {"kind": "single"}}))) == []


def test_shell_escape_and_reading_files_are_off():
    escape = "\\documentclass{standalone}\\begin{document}\\immediate\\write18{touch pwned}x\\end{document}\n"
    result = compile_pdf(escape)
    assert "runsystem(touch pwned)...disabled" in result.log
    outside = "\\documentclass{standalone}\\begin{document}\\input{/etc/hostname}\\end{document}\n"
    with pytest.raises(CompileError, match="pdflatex failed: ! "):
        compile_pdf(outside)


def test_a_missing_tool_names_the_debian_package(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(ToolMissingError, match=r"'pdflatex' is not installed; on Debian/Ubuntu: sudo apt-get install texlive-latex-base"):
        tool("pdflatex")
    with pytest.raises(ToolMissingError, match="apt-get install poppler-utils"):
        tool("pdftoppm")


def test_cli_writes_tex_pdf_svg_png(tmp_path):
    spec = EXAMPLES[0]
    out = tmp_path / "figs"
    result = CliRunner().invoke(main, ["figure", str(spec), "-o", str(out), "--format", "pdf", "--format", "svg",
                                       "--format", "png"])
    assert result.exit_code == 0, result.output
    name = load_spec(spec).name
    files = sorted(p.name for p in out.iterdir())
    assert files == sorted(f"{name}-{kind}.{ext}" for kind in ("topology", "timeline") for ext in ("tex", "pdf", "svg", "png"))
    assert (out / f"{name}-topology.svg").read_text().lstrip().startswith("<?xml")
    assert (out / f"{name}-timeline.png").read_bytes().startswith(b"\x89PNG")


def test_cli_kind_body_only_and_default_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = EXAMPLES[0]
    result = CliRunner().invoke(main, ["figure", str(spec), "--kind", "topology", "--body-only"])
    assert result.exit_code == 0, result.output
    name = load_spec(spec).name
    assert result.output == f"wrote figures/{name}/{name}-topology.tex\n"
    body = (tmp_path / "figures" / name / f"{name}-topology.tex").read_text()
    assert body.count(r"\documentclass") == 0
    # the body \input into a paper compiles
    paper = ("\\documentclass{article}\\usepackage[T1]{fontenc}\\usepackage{lmodern}\\usepackage{tikz}\\usetikzlibrary{positioning, "
             "arrows.meta, calc, fit, backgrounds, decorations.pathreplacing}\\begin{document}\n" + body + "\\end{document}\n")
    assert compile_pdf(paper).pdf.startswith(b"%PDF")


def test_cli_reports_a_bad_spec_without_a_traceback(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("strategy: {kind: parameter-server}\ntopology: {workers: {count: 0}}\n")
    result = CliRunner().invoke(main, ["figure", str(bad), "-o", str(tmp_path)])
    assert result.exit_code == 1
    assert "topology.workers.count: 0 is less than the minimum of 1" in result.output


def test_every_icon_compiles_in_its_role_colour():
    spec = spec_from_data({"strategy": {"kind": "parameter-server"},
                           "figure": {"icons": {"data": "database", "worker": "cpu", "server": "none"},
                                      "colors": {"worker": "otorange", "server": "otgray"}}})
    tex = render_topology(spec)
    assert r"\databasepic{otorange}" in tex and r"\cpupic{otorange}" in tex and r"\nonepic{otgray}" in tex
    assert r"\newcommand{\gpupic}" not in tex  # only the icons drawn are defined
    assert check_figure_geometry(compile_pdf(tex).log) == []
    gpu = render_topology(spec_from_data({"strategy": {"kind": "gossip"}, "figure": {"icons": {"worker": "server"}}}))
    assert check_figure_geometry(compile_pdf(gpu).log) == []


def test_edges_clear_every_text_in_the_figures_a_reviewer_flagged():
    """PS 16 / 1,024 (arrows through "Parameter server"), tree 16 (labels on edges), hierarchical 1,024,
    gossip: every edge is sampled along its drawn path and kept out of every text and icon it does not join."""
    cases = [{"strategy": {"kind": "parameter-server"}, "topology": {"workers": {"count": 16}}, **BIG},
             {"strategy": {"kind": "allreduce", "algorithm": "tree"}, "topology": {"workers": {"count": 16}}, **BIG},
             {"strategy": {"kind": "allreduce", "algorithm": "hierarchical"},
              "topology": {"workers": {"count": 1024}, "hosts": 128}, **BIG},
             {"strategy": {"kind": "gossip"}}]
    for data in cases:
        log = compile_pdf(render_topology(spec_from_data(data))).log
        assert "PATH " in log and check_figure_geometry(log) == [], data["strategy"]


def test_the_path_probe_catches_an_edge_through_a_label():
    spec = spec_from_data({"strategy": {"kind": "parameter-server"}, "topology": {"workers": {"count": 16}}, **BIG})
    layout = build_layout(spec)
    # the seed's weakness: the server's label centred under it, where the last worker's arrows arrive
    nodes = tuple(dataclasses.replace(n, label_flush="") if n.name == "ps" else n for n in layout.nodes)
    problems = check_figure_geometry(compile_pdf(render_topology(spec, layout=dataclasses.replace(layout, nodes=nodes))).log)
    assert any("runs through 'ps-label'" in p for p in problems), problems


def test_hierarchical_hosts_exchange_between_their_leaders():
    spec = spec_from_data({"strategy": {"kind": "allreduce", "algorithm": "hierarchical"},
                           "topology": {"workers": {"count": 4}, "hosts": 2}})
    inter = [e for e in build_layout(spec).edges if e.style in ("bus", "ring")]
    assert sorted(e.dst.node for e in inter if e.style == "ring") == ["w1", "w3"]  # one arrow into each leader
    assert [(e.src.node, e.dst.node) for e in inter if e.style == "bus"] == [("h1-bus", "h2-bus")]


def test_a_body_in_sbox_is_exactly_as_wide_as_its_picture():
    """--body-only inside \\sbox or \\resizebox: no stray spaces from the palette and icon definitions."""
    from opentikz_dt.figures.compile import pdf_page_size

    spec = load_spec(next(p for p in EXAMPLES if p.stem == "ps-sync"))
    body = render_topology(spec, body_only=True)
    paper = ("\\documentclass{article}\\usepackage[T1]{fontenc}\\usepackage{lmodern}\\usepackage{tikz}\\usetikzlibrary{"
             "positioning, arrows.meta, calc, fit, backgrounds, decorations.pathreplacing}\\begin{document}\n"
             "\\sbox0{" + body + "}\\typeout{BOXWIDTH \\the\\wd0}\\end{document}\n")
    boxed = float(re.search(r"BOXWIDTH ([\d.]+)pt", compile_pdf(paper).log).group(1))
    page, _ = pdf_page_size(compile_pdf(render_topology(spec)).pdf)  # standalone, border=8pt each side
    assert abs(boxed - (page - 16)) < 0.5, (boxed, page - 16)


def test_set_sync_async_changes_the_parameter_server_topology(tmp_path):
    """Seed 002's distinction: sync's note says the server is a barrier (said, not drawn: a
    bar crossed every arrow into the server, unexplained); async says the workers push and
    pull at their own pace. Both figures are clean."""
    from opentikz_dt.edit import edit_file

    path = tmp_path / "ps.yaml"
    path.write_text("strategy: {kind: parameter-server}\n")
    sync = render_topology(load_spec(path))
    edit_file(path, "set-sync", {"mode": "async"}, compile=False)  # compiled below
    asynchronous = render_topology(load_spec(path))
    assert r"\draw[barrier]" not in sync and r"\draw[barrier]" not in asynchronous
    assert "a barrier waits for all" in sync and "barrier waits" not in asynchronous
    assert "own pace" in asynchronous and "own pace" not in sync
    for tex in (sync, asynchronous):
        assert check_figure_geometry(compile_pdf(tex).log) == []


def test_chinese_and_japanese_labels_compile_through_cjk_only_when_needed():
    spec = load_spec(next(p for p in EXAMPLES if p.stem == "seed-001-zh"))  # seed 001's Chinese caption
    japanese = spec_from_data({"strategy": {"kind": "gossip"}, "title": "ゴシップ学习 (非同期)",
                               "topology": {"data": {"label": "ひらがなとカタカナ"}}})
    for figure, words in ((render_topology(spec), ["同步更新", "训练数据", "处理器"]),
                          (render_timeline(spec), ["处理器"]), (render_topology(japanese), ["ゴシップ学习", "ひらがなとカタカナ"])):
        assert r"\usepackage{CJKutf8}" in figure
        result = compile_pdf(figure)
        assert check_figure_geometry(result.log) == []
        text = re.sub(r"\s+", "", pdf_text(result.pdf))
        assert all(word in text for word in words), (words, text[:200])
    assert "CJK" not in render_topology(spec_from_data({"strategy": {"kind": "gossip"}}))
    # a glyph the Arphic fonts lack (the Japanese long-vowel mark) is an error naming it, not a blank
    with pytest.raises(CompileError, match=r"no glyph for 'ー' \(U\+30FC\)"):
        compile_pdf(render_topology(spec_from_data({"strategy": {"kind": "gossip"}, "title": "データ"})))


def test_topologies_fit_one_column_with_legible_text():
    """--width column: PS, sharded (its math labels and subscripts as the example has them, in
    English and Chinese), pipeline, gossip and ring are at most 8.5 cm wide at final size and no
    word is smaller than 6 pt (pdftotext word boxes); the layout adapted (compact gaps, fewer
    workers, shard tensors and long labels on several lines), only the rest is scaled."""
    from opentikz_dt.figures.compile import pdf_page_size, pdf_words
    from opentikz_dt.figures.fit import with_width

    specs = [load_spec(next(p for p in EXAMPLES if p.stem == stem))
             for stem in ("ps-sync", "pipeline-1f1b", "gossip", "allreduce-ring", "ps-sharded", "seed-001-zh")]
    # two workers: a fan too flat for its label to sit above the data icon
    specs.append(spec_from_data({"name": "two", "topology": {"workers": {"count": 2}},
                                 "strategy": {"kind": "parameter-server", "sync": "async"}}))
    assert "_{new}" in specs[4].figure.labels["weight"] and r"\frac" in specs[5].figure.labels["grad"]
    for spec in specs:
        result = compile_pdf(render_topology(with_width(spec, "column")))
        width, _ = pdf_page_size(result.pdf)
        assert width / 72.27 * 2.54 <= 8.5 + 0.02, (spec.name, width)  # the page, border included
        words = pdf_words(result.pdf)
        smallest = min(words, key=lambda w: w[1])
        assert smallest[1] >= 6.0 - 0.05, (spec.name, smallest)
        assert check_figure_geometry(result.log) == [], spec.name
        if spec.topology.servers.count == 2:  # every tensor of both shards, and the subscript, printed
            assert {"new", "W1,", "b1,", "b2,", "W2", "W3,", "b3"} <= {w for w, _ in words}, spec.name
    natural, _ = pdf_page_size(compile_pdf(render_topology(specs[0])).pdf)
    assert (natural - 16) / 72.27 * 2.54 > 9.0  # the natural figure is wider: the fit did something


def test_a_steep_data_fan_stays_clear_of_the_data_label():
    # 8 workers drawn: the arrow to the last leaves the data icon steeply enough to cut a
    # centred "Training data" label where it reaches past the icon; the label moves aside.
    data = {"name": "fan", "topology": {"workers": {"count": 8}}, "strategy": {"kind": "parameter-server"}}
    tex = render_topology(spec_from_data(data))
    assert check_figure_geometry(compile_pdf(tex).log) == []
    assert re.search(r"south east, anchor=north east\] \(data-label\)", tex)
