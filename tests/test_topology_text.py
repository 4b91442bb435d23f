"""The words a topology prints, expected from the spec or measured from a run: set in the
spec's language through figure.labels, none of dtgen's English left, and a Chinese figure
still legible at one column's width (measured on the compiled PDF)."""

from __future__ import annotations

import json
import random
import re
from dataclasses import replace

import pytest

from opentikz_dt.figures.checks import check_figure_geometry
from opentikz_dt.figures.compile import compile_pdf, pdf_page_size, pdf_text, pdf_words
from opentikz_dt.figures.fit import COLUMN_CM, MIN_TEXT_PT, with_width
from opentikz_dt.figures.render import render_topology
from opentikz_dt.figures.topology import build_layout
from opentikz_dt.measured.annotate import annotate_layout, measured_hosts, render_annotated_topology
from opentikz_dt.measured.run import load_run
from opentikz_dt.spec import load_spec, spec_from_data

from conftest import REPO

SEED_ZH = REPO / "examples" / "seed-001-zh.yaml"
PT_PER_CM = 72.27 / 2.54

# Every word a topology prints itself, set to a distinct Chinese phrase a key.
WORDS = {
    "model_note": "模型 {model}：{params} 参数，{bytes} 梯度", "python_model_note": "自定义模型 {entry}",
    "workers_brace": "共 {n} 个节点", "on_hosts": "在 {n} 台主机上", "hosts_brace": "共 {n} 台主机", "host_box": "主机 {i}",
    "host_workers": "主机 {i}：{n} 个节点", "allreduce_box": "全归约", "allreduce_mean": "{grad} 的均值",
    "ring_chunks": "环形全归约 {grad}：{n} 块", "ring_steps": "散射后收集：{steps} 步", "tree_box": "树形全归约，{n} 个节点",
    "tree_more": "另 {n} 个节点，{levels} 层", "leader_allreduce": "主节点间全归约",
    "gossip_box": "闲聊：{n} 个节点与 {peers} 个邻居平均 {weight}", "stage_layer": "第 {i} 层", "stage_layers": "第 {first}–{last} 层",
    "stage_block": "第 {i} 块", "stage_blocks": "第 {first}–{last} 块", "stage_part": "第 {i} 部分", "activations": "激活",
    "activation_grads": "$\\nabla$激活", "pipeline_note": "{schedule} 调度，{microbatches} 个微批，各 {samples} 样本，{stages} 级",
    "sync_note": "同步：等待全部 {n} 个\n{grad}，再更新", "async_note": "异步：各自推送\n和拉取，无屏障",
    "central_storage_note": "变量 {weight} 在一台设备上；\n梯度 {grad} 在那里求和", "unknown_tensors": "运行时才知道的张量",
    "stage_lane": "第 {i} 级", "phases": {"reduce": "归约", "broadcast": "广播", "intra_host_reduce": "机内归约"},
    "measured_title": "实测：{title}", "step_time": "{ms} 毫秒/步", "link_bytes": "{bytes}/步",
    "measured_note": "实测 {steps} 步平均：链路流量与步长", "alike_note": "各链路相同：只标一次",
    "worker_traffic": "{worker} 每步：发 {sent}，收 {recv}", "straggler_note": "掉队者：{workers}", "ran_on": "{n} 台机器",
    "rank_memory": "内存 {bytes}", "memory_note": "内存：各级参数、梯度、优化器状态与激活（第一步）",
}
# What dtgen prints in English unless the spec sets its words (the topologies below set
# every label of their own in Chinese, so any of these is dtgen's).
ENGLISH = ("parameters", "per gradient", "python model", "workers", "hosts", "Host", "all-reduce", "mean of", "chunks",
           "reduce-scatter", "all-gather", "steps", "reduce", "broadcast", "levels", "more", "leaders", "gossip",
           "averages", "peers", "Stage", "layer", "block", "part ", "act.", "schedule", "microbatches", "samples",
           "stages", "sync", "waits", "update", "pushes", "barrier", "variables", "device", "summed", "tensors",
           "built model", "Measured", "measured", "/step", "traffic", "labelled", "per step", " out,", "straggler",
           "ran on", "machines")
# The keys only a run's topology prints.
RUN_KEYS = {"measured_title", "step_time", "link_bytes", "measured_note", "alike_note", "worker_traffic", "straggler_note",
            "ran_on", "rank_memory", "memory_note"}
ZH_LABELS = {"title": "拓扑", "topology": {"data": {"label": "数据"}, "workers": {"label": "节点 {i}"},
                                          "servers": {"label": "服务器"}}}
BIG = {"training": {"dataset": {"samples": 2_000_000}}}
TOPOLOGIES = {  # spec data: every topology word drawn by at least one of them
    "ps-sync": {"strategy": {"kind": "parameter-server", "sync": "sync"}},
    "ps-async": {"strategy": {"kind": "parameter-server", "sync": "async"}},
    "ps-1024-on-hosts": {"strategy": {"kind": "parameter-server"}, "topology": {"workers": {"count": 1024}, "hosts": 64},
                         **BIG},
    "ps-hosts": {"strategy": {"kind": "parameter-server"}, "topology": {"workers": {"count": 4}, "hosts": 2}},
    "central-storage": {"strategy": {"kind": "central-storage"}},
    "python-shards": {"strategy": {"kind": "parameter-server"}, "topology": {"servers": {"count": 2}},
                      "training": {"model": {"kind": "python", "entry": "model.py:Net"},
                                   "dataset": {"kind": "python", "entry": "model.py:data"}}},
    "allreduce": {"strategy": {"kind": "allreduce"}},
    "ring": {"strategy": {"kind": "allreduce", "algorithm": "ring"}, "topology": {"workers": {"count": 4}}},
    "tree": {"strategy": {"kind": "allreduce", "algorithm": "tree"}, "topology": {"workers": {"count": 40}}, **BIG},
    "hierarchical": {"strategy": {"kind": "allreduce", "algorithm": "hierarchical"},
                     "topology": {"workers": {"count": 4}, "hosts": 2}},
    "hierarchical-elided": {"strategy": {"kind": "allreduce", "algorithm": "hierarchical"},
                            "topology": {"workers": {"count": 256}, "hosts": 128}, **BIG},
    "gossip": {"strategy": {"kind": "gossip"}, "topology": {"workers": {"count": 4}}},
    "pipeline-mlp": {"strategy": {"kind": "pipeline", "microbatches": 4}, "topology": {"workers": {"count": 3}},
                     "training": {"model": {"kind": "mlp", "layers": [16, 16, 16, 16, 16]}}},
    "pipeline-transformer": {"strategy": {"kind": "pipeline", "microbatches": 4, "schedule": "gpipe"},
                             "topology": {"workers": {"count": 2}}, "training": {"model": {"kind": "transformer"}}},
    "pipeline-python": {"strategy": {"kind": "pipeline", "microbatches": 2}, "topology": {"workers": {"count": 2}},
                        "training": {"model": {"kind": "python", "entry": "model.py:Net"},
                                     "dataset": {"kind": "python", "entry": "model.py:data"}}},
}


def _spec(data: dict, labels: dict | None = WORDS, width: str | None = None):
    data = {**data, "title": ZH_LABELS["title"], "figure": {**data.get("figure", {}), "labels": labels or {}},
            "topology": {**data.get("topology", {})}}
    for part, value in ZH_LABELS["topology"].items():
        data["topology"][part] = {**data["topology"].get(part, {}), **value}
    spec = spec_from_data(data, name="zh")
    return with_width(spec, width) if width else spec


def _drawn_text(layout) -> str:
    """Every word a topology Layout prints: node texts and labels, edge, group and brace labels,
    the label macros' values."""
    parts = list(layout.macros.values()) + [layout.title]
    parts += [part for node in layout.nodes for part in (node.text, node.label)]
    parts += [e.label for e in layout.edges] + [g.label for g in layout.groups] + [b.label for b in layout.braces]
    return " ".join(str(part) for part in parts if part)


def _model_note(tex: str) -> str:
    return re.search(r"\(model\) at [^{]*\{(.*)\};", tex).group(1)


def _english_in(text: str) -> list:
    printed = re.sub(r"\\[A-Za-z]+", " ", text)  # macro names (\workersevenlabel) do not print
    return [word for word in ENGLISH if word in printed]


def _phrases(words: dict) -> set:
    """The fixed parts of each phrase (what is left between its placeholders)."""
    out = set()
    for value in words.values():
        for text in (value.values() if isinstance(value, dict) else [value]):
            out |= {part for part in re.split(r"\{[a-z_]+\}|\$[^$]*\$|\n", text) if len(part.strip(" ：，；")) > 1}
    return out


def test_every_topology_prints_the_specs_words():
    drawn = []
    for name, data in TOPOLOGIES.items():
        for width in (None, "column"):
            spec = _spec(data, width=width)
            text = _drawn_text(build_layout(spec)) + " " + _model_note(render_topology(spec))
            assert _english_in(text) == [], (name, width, _english_in(text), text)
            drawn.append(text)
    unused = {phrase for phrase in _phrases({k: v for k, v in WORDS.items() if k not in RUN_KEYS})
              if not any(phrase in text for text in drawn)}
    assert unused == set()
    # the counts are filled in
    joined = " ".join(drawn)
    for words in ("共 1,024 个节点", "在 64 台主机上", "共 128 台主机", "主机 1：2 个节点", "环形全归约 \\gradlabel：4 块",
                  "散射后收集：6 步", "树形全归约，40 个节点", "另 32 个节点，6 层", "第 1 级", "第 1–2 层", "第 3 层", "第 1 块",
                  "第 1 部分", "GPipe 调度，4 个微批，各 64 样本，2 级", "同步：等待全部 3 个\\\\\\gradlabel，再更新",
                  "自定义模型 model.py:Net", "运行时才知道的张量", "模型 mlp：22.0 k 参数，88.1 kB 梯度"):
        assert words in joined, words


def _run_of(path, data: dict, labels: dict = WORDS, width: str | None = None, slower: str | None = None,
            machines: int = 0):
    """A synthetic run of the spec (the predictor's simulator, made-up loss), with these
    figure.labels and Chinese labels of its own (labels None: the data as it is): `slower`
    makes that worker twice as slow as measured (a straggler), `machines` spreads the ranks
    over that many addresses (a multi-machine run)."""
    from opentikz_dt.predict.costs import Costs
    from opentikz_dt.predict.rundir import write_run_dir
    from opentikz_dt.predict.simulate import simulate
    from opentikz_dt.predict.synthetic import synthetic_calibration, synthetic_loss

    spec = _spec(data, labels) if labels is not None else spec_from_data(data, name="zh")
    result = simulate(spec, Costs(synthetic_calibration(spec), spec, jitter=random.Random(0)), 6)
    write_run_dir(path, spec, result, 6, loss=synthetic_loss(6), dtgen="synthetic")
    if slower:
        metrics = json.loads((path / "metrics.json").read_text())
        metrics["step_time_s"][slower] *= 2
        (path / "metrics.json").write_text(json.dumps(metrics))
    if machines:
        info = json.loads((path / "run.json").read_text())
        for rank in info["ranks"]:
            rank["addr"] = f"198.18.0.{rank['rank'] % machines}"
        (path / "run.json").write_text(json.dumps(info))
    run = load_run(path)
    return replace(run, spec=with_width(run.spec, width)) if width else run


RUNS = {  # a run of each: the step times, bytes on links, totals, straggler, hosts' machines
    "ps-sync": ({"strategy": {"kind": "parameter-server", "sync": "sync"}}, {"slower": "w2"}),
    "ring": ({"strategy": {"kind": "allreduce", "algorithm": "ring"}}, {}),
    "pipeline": (TOPOLOGIES["pipeline-mlp"], {}),
    "hierarchical": (TOPOLOGIES["hierarchical"], {"machines": 3}),
}


@pytest.mark.parametrize("name", RUNS)
def test_a_runs_topology_prints_the_specs_words(tmp_path, name):
    data, options = RUNS[name]
    for width in (None, "column"):
        run = _run_of(tmp_path / f"{name}-{width}", data, width=width, **options)
        tex = render_annotated_topology(run)
        layout = measured_hosts(run.spec, annotate_layout(run.spec, run.metrics).layout, run.info.get("ranks") or [])
        text = _drawn_text(layout) + " " + _model_note(tex)
        assert _english_in(text) == [], (name, width, _english_in(text), text)
        assert "实测：" in text and "毫秒/步" in text and "步平均" in text
        wanted = {"ps-sync": ["掉队者：w2"], "ring": ["/步"], "pipeline": ["第 2 级 每步：发 "],
                  "hierarchical": ["台机器"]}[name]
        for words in wanted:
            assert words in text.replace("\\\\", " "), (words, text)


def test_a_runs_model_note_is_what_it_built_in_the_specs_words(tmp_path):
    run = _run_of(tmp_path / "run", RUNS["ring"][0])
    built = {"kind": "python", "params": 1_234_567, "grad_bytes": 4_938_268,
             "description": "model.py:Net: 1.2 M parameters, 4.94 MB per gradient"}
    data = {**RUNS["ring"][0], "training": TOPOLOGIES["python-shards"]["training"]}
    run = replace(run, spec=_spec(data), info={**run.info, "model": built})
    assert _model_note(render_annotated_topology(run)) == "模型 model.py:Net：1.2 M 参数，4.94 MB 梯度"


def _flat(pdf: bytes) -> str:
    return re.sub(r"\s+", "", pdf_text(pdf))  # pdftotext spaces CJK glyphs apart


# What the seed-001-zh topologies would print in English (none of it may be left).
SEED_ENGLISH = ("parameters", "pergradient", "Measured", "measured", "meanof", "traffic", "step", "worker",
                "labelled", "straggler", "highlighted", "Parameter", "shards", "hosts")


def _assert_legible_at_column(result, fits: bool = True) -> None:
    width, _ = pdf_page_size(result.pdf)
    assert not fits or width / PT_PER_CM <= COLUMN_CM + 0.02, width / PT_PER_CM
    words = pdf_words(result.pdf)
    assert min(size for _, size in words) >= MIN_TEXT_PT - 0.05, min(words, key=lambda w: w[1])
    assert check_figure_geometry(result.log) == []


@pytest.mark.latex
@pytest.mark.parametrize("width", [None, "column"])
def test_the_seed_001_zh_topology_reads_in_chinese(width):
    spec = load_spec(SEED_ZH)
    result = compile_pdf(render_topology(with_width(spec, width) if width else spec))
    text = _flat(result.pdf)
    assert "mlp：22.0k个参数，每个梯度88.1kB" in text, text
    for english in SEED_ENGLISH:
        assert english not in text, (english, text)
    if width:
        _assert_legible_at_column(result)
    else:
        assert check_figure_geometry(result.log) == []


@pytest.mark.latex
@pytest.mark.parametrize("width", [None, "column"])
def test_a_measured_seed_001_zh_topology_reads_in_chinese(tmp_path, width):
    """dtgen figure RUN_DIR of a run of seed-001-zh (its second worker a straggler): the title,
    step times, bytes, footer and model note in the spec's words."""
    import yaml

    data = yaml.safe_load(SEED_ZH.read_text(encoding="utf-8"))
    run = _run_of(tmp_path / "run", data, labels=None, width=width, slower="w2")
    result = compile_pdf(render_annotated_topology(run))
    text = _flat(result.pdf)
    for words in ("实测：(a)同步更新", "ms/步", "88.1kB", "步的平均值", "每条链路每步的流量", "掉队者", "mlp：22.0k个参数"):
        assert words in text, (words, text)
    for english in SEED_ENGLISH:
        assert english not in text, (english, text)
    if width:  # wider than a column, as in English: its math has subscripts, so it is not scaled down
        _assert_legible_at_column(result, fits=False)
    else:
        assert check_figure_geometry(result.log) == []
