"""The round-trip document under `dtgen edit`: untouched files dump byte-identical, and
set/delete keep comments, blank lines, flow/block style and quoting."""

from __future__ import annotations

from pathlib import Path

import pytest

from ruamel.yaml.error import YAMLError

from opentikz_dt.edit.yamldoc import YamlDoc
from opentikz_dt.starter import render_starter

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.yaml"))
KINDS = ["single", "parameter-server", "central-storage", "allreduce", "gossip", "pipeline"]


def edited(text: str, *changes) -> str:
    doc = YamlDoc(text)
    for change in changes:
        change(doc)
    return doc.text()


@pytest.mark.parametrize("text", [p.read_text() for p in EXAMPLES] + [render_starter(k) for k in KINDS]
                         + ["---\na:\n    - 1\n    - 2\nb: 'x'  # c\n", "a:\n- 1\nb:\n    c: 2\n", "a: 1\r\nb: {c: 2}\r\n"],
                         ids=[p.name for p in EXAMPLES] + KINDS + ["indented-seq", "flush-seq", "crlf"])
def test_untouched_document_dumps_byte_identical(text):
    assert YamlDoc(text).text() == text


def test_new_keys_take_their_parents_style():
    text = "topology:\n  workers: {count: 3}\nstrategy:\n  kind: allreduce\n"
    assert edited(text, lambda d: d.set(("topology", "workers", "labels", "w1"), "GPU 0"),
                  lambda d: d.set(("strategy", "algorithm"), "ring"),
                  lambda d: d.set(("figure", "colors", "grad"), "otorange")) == (
        "topology:\n  workers: {count: 3, labels: {w1: GPU 0}}\nstrategy:\n  kind: allreduce\n  algorithm: ring\n"
        "figure:\n  colors:\n    grad: otorange\n")


def test_replaced_values_keep_quoting_and_tex_goes_in_single_quotes():
    text = 'a: "x"\nb: \'y\'\nc: z\nd: "w"\n'
    assert edited(text, lambda d: d.set(("a",), "X"), lambda d: d.set(("b",), "Y"),
                  lambda d: d.set(("c",), r"$\theta$"), lambda d: d.set(("d",), r"$\nabla$")) == (
        "a: \"X\"\nb: 'Y'\nc: '$\\theta$'\nd: '$\\nabla$'\n")


def test_appending_keeps_the_blank_line_and_comments_of_the_next_section():
    text = "strategy:\n  kind: pipeline   # k\n\n# training next\ntraining: {steps: 3}\n"
    assert edited(text, lambda d: d.set(("strategy", "stages"), 3)) == (
        "strategy:\n  kind: pipeline   # k\n  stages: 3\n\n# training next\ntraining: {steps: 3}\n")


def test_appending_after_a_block_sequence_keeps_the_next_sections_lines():
    text = "training:\n  layers:\n    - 32\n    - 10   # out\n\n# figure next\nfigure: {colsep: 3}\n"
    assert edited(text, lambda d: d.set(("training", "steps"), 5)) == (
        "training:\n  layers:\n    - 32\n    - 10   # out\n  steps: 5\n\n# figure next\nfigure: {colsep: 3}\n")


@pytest.mark.parametrize("text, path, expected", [
    # the removed key's own comment goes; the lines introducing the next key stay
    ("s:\n  kind: a\n  algorithm: ring   # r\n\n  # about x\n  x: 1\nt: 2\n", ("s", "algorithm"),
     "s:\n  kind: a\n\n  # about x\n  x: 1\nt: 2\n"),
    ("s:\n  algorithm: ring   # r\n\n  # about kind\n  kind: a\nt: 2\n", ("s", "algorithm"),
     "s:\n\n  # about kind\n  kind: a\nt: 2\n"),
    ("w:\n  labels:\n    w3: x   # third\n\n# next\ns: {kind: a}\n", ("w", "labels", "w3"),
     "w:\n  labels: {}\n\n# next\ns: {kind: a}\n"),
    ("s: {kind: pipeline, stages: 3, schedule: gpipe}  # flow\n", ("s", "stages"),
     "s: {kind: pipeline, schedule: gpipe}             # flow\n"),  # ruamel keeps a comment's column
    ("s: {kind: a}\n", ("s", "missing"), "s: {kind: a}\n"),
])
def test_delete_keeps_what_belongs_to_the_next_key(text, path, expected):
    assert edited(text, lambda d: d.delete(path)) == expected


@pytest.mark.parametrize("deep", ["x: " + "[" * 3000 + "]" * 3000 + "\n",
                                  "x:\n" + "".join(" " * i + f"k{i}:\n" for i in range(1, 200))], ids=["flow", "block"])
def test_deep_nesting_is_refused_before_ruamel_composes(deep):
    with pytest.raises(YAMLError, match=r"^line \d+, column \d+: x: nested more than 64 levels deep$"):
        YamlDoc(deep)
