"""The agent-facing side of `dtgen edit`: notes on side effects, edits no figure shows
and stale comments; atomic batches (`--ops`); `--list`; suggestions only for likely
typos; refusals located at spec keys; coverage of every spec key; the width invariant."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from opentikz_dt.cli import main
from opentikz_dt.contract import load_contract
from opentikz_dt.contract_check import check_coverage
from opentikz_dt.edit import EditArgumentError, EditRefusal, edit_batch, edit_file
from opentikz_dt.edit.nodepaths import locate_figure_problem
from opentikz_dt.spec import load_spec

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def example(tmp_path: Path, name: str) -> Path:
    target = tmp_path / name
    shutil.copyfile(EXAMPLES / name, target)
    return target


def cli(*words, stdin=None):
    return CliRunner().invoke(main, ["edit", *map(str, words)], input=stdin)


def test_set_strategy_names_its_side_effects(tmp_path):
    path = example(tmp_path, "ps-async.yaml")
    result = edit_file(path, "set-strategy", {"kind": "allreduce"}, compile=False)
    assert "side effect: strategy.sync changed from 'async' to 'sync'" in result.notes
    assert "side effect: topology.servers.count changed from 1 to 0" in result.notes
    # what the operation was asked to do is not a side effect
    assert not [n for n in result.notes if n.startswith("side effect: strategy.kind")]


def test_a_recolour_the_figure_does_not_draw_says_so(tmp_path):
    path = example(tmp_path, "allreduce-ring.yaml")  # all-reduce draws no weight flow
    result = edit_file(path, "recolor", {"flow": "weight", "color": "otblue"}, compile=False)
    assert result.written
    assert [n for n in result.notes if n.startswith("no figure changes") and "figure.colors.weight" in n]
    shown = edit_file(path, "recolor", {"flow": "grad", "color": "otteal"}, compile=False)
    assert not [n for n in shown.notes if n.startswith("no figure changes")]


def test_comments_mentioning_an_old_value_are_flagged(tmp_path):
    path = example(tmp_path, "ps-sync.yaml")  # header: "Three GPU workers ... all three", "3 x 256"
    result = edit_file(path, "add-worker", {}, compile=False)
    stale = [n for n in result.notes if n.startswith("comment on line")]
    assert [n.split(" ")[3] for n in stale] == ["2", "3", "14"], stale
    assert "mentions 'Three', the old value of topology.workers.count (now 4)" in stale[0]
    # the end-of-line comment of a changed key is flagged even without the old value
    path = example(tmp_path, "ps-sync.yaml")  # sync: sync   # every step waits for the slowest worker
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if text.lstrip().startswith("sync:"))
    notes = edit_file(path, "set-sync", {"mode": "async"}, compile=False).notes
    assert [n for n in notes if n.startswith(f"comment on line {line} ")], notes


def test_batch_is_all_or_none(tmp_path):
    path = example(tmp_path, "ps-sync.yaml")
    before = path.read_bytes()
    ops = [("recolor", {"flow": "data", "color": "otblue"}), ("add-worker", {}),
           ("recolor", {"flow": "weight", "color": "otblue"})]  # the third clashes with the first
    with pytest.raises(EditRefusal) as refused:
        edit_batch(path, ops, compile=False)
    assert refused.value.result.invariant == "distinct-flow-colors"
    assert path.read_bytes() == before
    with pytest.raises(EditArgumentError, match="batch step 2: set-slowdown: missing --factor"):
        edit_batch(path, [("add-worker", {}), ("set-slowdown", {"worker": "w1"})], compile=False)
    assert path.read_bytes() == before
    result = edit_batch(path, ops[:2] + [("set-slowdown", {"worker": "w4", "factor": 2})], compile=False)
    spec = load_spec(path)
    assert result.written and spec.figure.colors["data"] == "otblue" and spec.topology.workers.slowdown == {"w4": 2}


def test_cli_ops_from_stdin_and_list(tmp_path):
    path = example(tmp_path, "ps-sync.yaml")
    before = path.read_bytes()
    bad = "set-worker-labels --pattern 'GPU {i}'\nremove-server\n"  # one server: cannot remove it
    result = cli(path, "--ops", "-", "--no-compile", stdin=bad)
    assert result.exit_code == 1 and "batch step 2: remove-server refused" in result.output
    assert path.read_bytes() == before
    good = "- {op: set-worker-labels, pattern: 'GPU {i}'}\n- {op: set-name, name: fig-2}\n"
    result = cli(path, "--ops", "-", "--json", "--no-compile", stdin=good)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["args"]["ops"][1] == {"op": "set-name", "args": {"name": "fig-2"}}
    spec = load_spec(path)
    assert (spec.name, spec.topology.workers.label_of("w3")) == ("fig-2", "GPU 3")
    listed = CliRunner().invoke(main, ["edit", "--list", "--json"])
    ids = [op["id"] for op in json.loads(listed.stdout)]
    assert ids == list(load_contract()["edit_contract"]["operations"])


@pytest.mark.parametrize("typed, hint", [("set-slowdwn", "did you mean 'set-slowdown'?"),
                                         ("set-speed", None), ("make-it-fit", None)])
def test_suggestions_only_for_likely_typos(tmp_path, typed, hint):
    result = cli(example(tmp_path, "ps-sync.yaml"), typed)
    assert result.exit_code == 2
    assert ("did you mean" in result.output) == (hint is not None)
    assert hint is None or hint in result.output


def test_a_title_or_label_mentioning_an_old_value_is_flagged(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text("strategy: {kind: parameter-server}\ntitle: Sync PS over 3 workers\n"
                    "topology:\n  workers: {count: 3}\n  servers: {label: 3D server}\n")
    notes = edit_file(path, "add-worker", {}, compile=False).notes
    assert ("title on line 2 mentions '3', the old value of topology.workers.count (now 4); check it still holds: "
            "'Sync PS over 3 workers'") in notes
    assert not [n for n in notes if "servers.label" in n]  # '3D' is not the number 3


def test_a_refused_edit_points_into_the_file_as_it_is_at_the_key_it_changed(tmp_path):
    path = example(tmp_path, "ps-sync.yaml")  # no figure section: a recolor adds it past the file's end
    lines = len(path.read_text().splitlines())
    with pytest.raises(EditRefusal) as caught:
        edit_file(path, "recolor", {"flow": "weight", "color": "otgray"}, compile=False)
    issues = caught.value.result.issues
    assert issues and all(issue.line <= lines for issue in issues), issues
    # the colour-vision invariant speaks of the flows' section; the edit changed one key of it
    assert {issue.path for issue in issues} == {"figure.colors.weight"}, issues
    assert "point into the file as it is" in str(caught.value).splitlines()[0]


def test_figure_problems_name_spec_keys_and_lines(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text("strategy: {kind: parameter-server}\ntopology:\n  workers:\n    count: 3\n"
                    "    labels: {w1: A very long first label}\nfigure:\n  labels: {grad: g}\n")
    spec = load_spec(path)
    issue = locate_figure_problem(spec, "no-overlaps", "topology figure: 'w1-label' and 'w1-w2-grad-label' overlap (3.0 pt^2)")
    assert (issue.line, issue.path) == (5, "topology.workers.labels.w1")
    assert "w1-label comes from topology.workers.labels.w1 (line 5)" in issue.message
    assert "w1-w2-grad-label comes from figure.labels.grad (line 7)" in issue.message
    assert issue.message.endswith("[invariant no-overlaps]") and "change-spacing" in issue.message


def test_coverage_check_finds_an_unreachable_spec_key():
    contract = load_contract()["edit_contract"]
    assert check_coverage(contract) == []
    broken = copy.deepcopy(contract)
    broken["operations"]["set-size"]["writes"] = []
    assert check_coverage(broken) == [
        "spec key figure.width: no operation reaches it (add one, or list it under an operation's 'writes' in contract.exec.json)"]


@pytest.mark.latex
def test_set_size_is_checked_against_the_compiled_width(tmp_path):
    path = example(tmp_path, "ps-sync.yaml")
    before = path.read_bytes()
    with pytest.raises(EditRefusal) as refused:
        edit_file(path, "set-size", {"fit": "5cm"})
    result = refused.value.result
    assert result.invariant == "figure-fits-width" and path.read_bytes() == before
    assert all(i.path == "figure.width" and "cm wide but figure.width '5cm' allows 5.00 cm" in i.message
               for i in result.issues), result.issues
    assert edit_file(path, "set-size", {"fit": "page"}).written
    assert load_spec(path).figure.width == "page"


def _no_blue_data(spec):  # a spec invariant registered by the test below
    if spec.figure.colors["data"] == "otblue":
        yield ("figure", "colors", "data"), "the data flow may not be blue here"


def _no_batch_label(tex):  # a TeX invariant registered by the test below
    return ["the batch label is drawn"] if "\\batchlabel}" in tex.split("\\begin{tikzpicture}", 1)[-1] else []


def test_an_invariant_is_one_line_in_meta_json_and_one_entry_in_the_exec_file(tmp_path, monkeypatch):
    import opentikz_dt.contract as contract
    from opentikz_dt.contract_check import check_contract
    from opentikz_dt.resources import contract_exec, contract_meta

    meta, executable = copy.deepcopy(contract_meta()), copy.deepcopy(contract_exec())
    meta["edit_contract"]["invariants"] += ["no-blue-data: test only", "no-batch-label: test only"]
    executable["invariants"]["no-blue-data"] = {"applies_to": "spec", "check": f"{__name__}:_no_blue_data"}
    executable["invariants"]["no-batch-label"] = {"applies_to": "tex", "check": f"{__name__}:_no_batch_label"}
    monkeypatch.setattr(contract, "contract_meta", lambda: meta)
    monkeypatch.setattr(contract, "contract_exec", lambda: executable)
    assert not [p for p in check_contract() if "invariant" in p]
    path = example(tmp_path, "ps-sync.yaml")
    with pytest.raises(EditRefusal) as refused:
        edit_file(path, "recolor", {"flow": "data", "color": "otblue"}, compile=False)
    assert refused.value.result.invariant == "no-blue-data"
    with pytest.raises(EditRefusal) as refused:
        edit_file(path, "set-label", {"which": "batch", "text": "shard"}, compile=False)
    assert refused.value.result.invariant == "no-batch-label"


@pytest.mark.latex
def test_what_dtgen_figure_fits_to_a_column_set_size_accepts(tmp_path):
    # `dtgen figure --width column` and `dtgen edit set-size --fit column` measure the same
    # thing (the compiled page, border included): the flagship example passes both.
    path = example(tmp_path, "ps-sync.yaml")
    assert edit_file(path, "set-size", {"fit": "column"}).written


def test_zero_and_one_count_only_next_to_what_the_key_counts(tmp_path):
    """'one process each' and '1-based index' are not the server count 1 (a starter's comments)."""
    path = tmp_path / "spec.yaml"
    path.write_text("# one parameter server and 1 data source\n"
                    "strategy: {kind: parameter-server}\n"
                    "topology:\n"
                    "  workers:\n"
                    "    count: 3                  # w1..wN, one process each\n"
                    '    label: "Worker {i}"         # {i} = 1-based index\n'
                    "  servers: {count: 1}\n")
    notes = edit_file(path, "set-strategy", {"kind": "allreduce", "algorithm": "ring"}, compile=False).notes
    stale = [n for n in notes if n.startswith("comment on line")]
    assert [n.split(" ")[3] for n in stale] == ["1"], stale
    assert "mentions 'one parameter server', the old value of topology.servers.count" in stale[0]
