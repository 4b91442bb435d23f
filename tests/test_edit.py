"""`dtgen edit`: every operation, refusals that change nothing, comments that survive,
--dry-run and --json. Compile-based invariants are skipped here (compile=False) except
in the tests marked latex; the TeX invariants that need no compile always run."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from opentikz_dt.cli import main
from opentikz_dt.contract import load_contract
from opentikz_dt.contract_check import check_contract
from opentikz_dt.edit import OPERATIONS, EditArgumentError, EditRefusal, edit_file, parse_words
from opentikz_dt.spec import load_spec

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"


def example(tmp_path: Path, name: str) -> Path:
    target = tmp_path / name
    shutil.copyfile(EXAMPLES / name, target)
    return target


def write(tmp_path: Path, text: str, name: str = "spec.yaml") -> Path:
    target = tmp_path / name
    target.write_text(text, encoding="utf-8")
    return target


def edit(path, operation, **args):
    return edit_file(path, operation, args, compile=False)


def cli(*words):
    return CliRunner().invoke(main, ["edit", *map(str, words)])


# -- every operation, checked by reloading the spec ------------------------------------

HAPPY = [
    ("ps-sync.yaml", "add-worker", {}, lambda s: s.topology.workers.count == 4 and "w4" not in s.topology.workers.labels),
    ("ps-sync.yaml", "add-worker", {"label": "GPU 3"}, lambda s: s.topology.workers.label_of("w4") == "GPU 3"),
    ("ps-sync.yaml", "remove-worker", {}, lambda s: s.topology.workers.ids == ["w1", "w2"]),
    ("ps-sharded.yaml", "add-server", {}, lambda s: s.topology.servers.ids == ["ps1", "ps2", "ps3"]),
    ("ps-sharded.yaml", "remove-server", {}, lambda s: s.topology.servers.ids == ["ps"]),
    ("ps-sync.yaml", "rename-node", {"node": "w1", "label": "GPU 0"}, lambda s: s.topology.workers.label_of("w1") == "GPU 0"),
    ("ps-sync.yaml", "rename-node", {"node": "data", "label": "ImageNet"}, lambda s: s.topology.data_label == "ImageNet"),
    ("ps-sync.yaml", "rename-node", {"node": "ps", "label": "PS"}, lambda s: s.topology.servers.label_of("ps") == "PS"),
    ("ps-sync.yaml", "rename-node", {"node": "title", "label": "Ours"}, lambda s: s.title == "Ours"),
    ("ps-sync.yaml", "change-spacing", {"colsep": 5}, lambda s: s.figure.colsep == 5 and s.figure.rowsep == 2.5),
    ("ps-sync.yaml", "change-spacing", {"colsep": 6.5, "rowsep": 3}, lambda s: (s.figure.colsep, s.figure.rowsep) == (6.5, 3)),
    ("ps-sync.yaml", "swap-icon", {"role": "worker", "icon": "cpu"}, lambda s: s.figure.icons["worker"] == "cpu"),
    ("ps-sync.yaml", "recolor", {"flow": "data", "color": "otblue"}, lambda s: s.figure.colors["data"] == "otblue"),
    ("ps-sync.yaml", "recolor", {"flow": "server", "color": "otgray"}, lambda s: s.figure.colors["server"] == "otgray"),
    ("ps-sync.yaml", "set-sync", {"mode": "async"}, lambda s: s.strategy.sync == "async"),
    ("ps-async.yaml", "set-sync", {"mode": "sync"}, lambda s: s.strategy.sync == "sync"),
    ("ps-sync.yaml", "set-label", {"which": "grad", "text": "$g$"}, lambda s: s.figure.labels["grad"] == "$g$"),
    ("ps-sync.yaml", "set-label", {"which": "title", "text": "Data & 50% of it"}, lambda s: s.title == "Data & 50% of it"),
    ("ps-async.yaml", "set-strategy", {"kind": "allreduce", "algorithm": "ring"},
     lambda s: (s.strategy.kind, s.strategy.sync, s.strategy.algorithm, s.topology.servers.count) == ("allreduce", "sync", "ring", 0)),
    ("allreduce-ring.yaml", "set-strategy", {"kind": "parameter-server"},
     lambda s: (s.strategy.kind, s.strategy.algorithm, s.topology.servers.count) == ("parameter-server", "native", 1)),
    ("allreduce-ring.yaml", "set-strategy", {"kind": "single"},
     lambda s: (s.strategy.kind, s.topology.workers.count, s.topology.servers.count) == ("single", 1, 0)),
    ("single.yaml", "set-strategy", {"kind": "pipeline", "schedule": "gpipe"},
     lambda s: (s.strategy.kind, s.strategy.schedule, s.strategy.stages, s.topology.workers.count) == ("pipeline", "gpipe", 3, 3)),
    ("single.yaml", "set-strategy", {"kind": "gossip"}, lambda s: (s.topology.workers.count, s.strategy.peers) == (3, 2)),
    ("pipeline-gpipe.yaml", "set-strategy", {"kind": "central-storage"},
     lambda s: (s.strategy.kind, s.topology.servers.ids) == ("central-storage", ["ps"])),
    ("allreduce-ring.yaml", "set-strategy", {"kind": "fsdp"},
     lambda s: (s.strategy.kind, s.strategy.algorithm, s.strategy.options)
     == ("fsdp", "native", {"shard": "parameters", "reshard_after_forward": True})),
    ("fsdp-transformer.yaml", "set-strategy", {"kind": "allreduce"},
     lambda s: (s.strategy.kind, s.strategy.options) == ("allreduce", {})),
    ("fsdp-transformer.yaml", "set", {"key": "strategy.units", "value": "[blocks.1]"},
     lambda s: s.strategy.options["units"] == ["blocks.1"]),
    ("fsdp-transformer.yaml", "set", {"key": "strategy.reshard_after_forward", "value": "false"},
     lambda s: s.strategy.options["reshard_after_forward"] is False),
    ("ps-sync.yaml", "set-slowdown", {"worker": "w2", "factor": 2.5}, lambda s: s.topology.workers.slowdown == {"w2": 2.5}),
    ("ps-sync.yaml", "set-size", {"fit": "page"}, lambda s: s.figure.width == "page"),
    ("ps-sync.yaml", "set-palette", {"variant": "dark"}, lambda s: s.figure.palette == "dark"),
    ("allreduce-ring.yaml", "set-hosts", {"count": 2}, lambda s: s.topology.hosts == 2),
    ("fsdp-tensor.yaml", "set-mesh", {"data": 4, "tensor": 2, "data_parallel": "allreduce"},
     lambda s: (s.strategy.options["parallelism"], s.strategy.options["data_parallel"], s.topology.workers.count)
     == ({"data": 4, "tensor": 2}, "allreduce", 8)),
    ("ps-sync.yaml", "set-name", {"name": "fig-3"}, lambda s: s.name == "fig-3"),
    ("ps-sync.yaml", "set-worker-labels", {"pattern": "GPU {i}"},
     lambda s: [s.topology.workers.label_of(w) for w in s.topology.workers.ids] == ["GPU 1", "GPU 2", "GPU 3"]),
    ("ps-sync.yaml", "set", {"key": "training.optimizer.lr", "value": "0.05"}, lambda s: s.training.lr == 0.05),
    ("ps-sync.yaml", "set", {"key": "training.model.layers", "value": "[4, 8, 2]"}, lambda s: s.training.layers == (4, 8, 2)),
    ("ps-sync.yaml", "set", {"key": "figure.labels.legend.fetch", "value": "取参数 (F)"},
     lambda s: s.figure.labels["legend"]["fetch"] == "取参数 (F)" and s.figure.labels["legend"]["push"] == "push"),
    ("ps-sync.yaml", "set", {"key": "figure.labels.phases.reduce_scatter", "value": "规约散射"},
     lambda s: s.figure.labels["phases"]["reduce_scatter"] == "规约散射" and s.figure.labels["phases"]["all_gather"] == "all-gather"),
    ("ps-sync.yaml", "set", {"key": "figure.labels.measured_axis", "value": "时间 (ms)，从第 {t0} ms 起"},
     lambda s: s.figure.labels["measured_axis"] == "时间 (ms)，从第 {t0} ms 起"),
]


@pytest.mark.parametrize("name, operation, args, holds", HAPPY,
                         ids=[f"{op}-{i}" for i, (_, op, _, _) in enumerate(HAPPY)])
def test_operation_applies_and_the_spec_reloads(tmp_path, name, operation, args, holds):
    path = example(tmp_path, name)
    result = edit(path, operation, **args)
    assert (result.ok, result.changed, result.written) == (True, True, True)
    assert holds(load_spec(path))


def test_every_contract_operation_is_implemented_and_tested():
    assert set(OPERATIONS) == set(load_contract()["edit_contract"]["operations"])
    assert {op for _, op, _, _ in HAPPY} == set(OPERATIONS)
    assert not [p for p in check_contract() if p.startswith("operation")]


def test_set_mesh_sets_the_worker_count_to_the_product_and_drops_the_overrides_past_it(tmp_path):
    path = write(tmp_path, """\
strategy: {kind: mesh, parallelism: {data: 4, tensor: 2}}
topology:
  workers:
    count: 8
    labels: {w1: first, w8: last}
    slowdown: {w5: 2.0}
training: {model: {layers: [8, 8, 8, 4]}}
""")
    result = edit(path, "set-mesh", data=2, tensor=2)
    spec = load_spec(path)
    assert (spec.topology.workers.count, spec.strategy.options["parallelism"]) == (4, {"data": 2, "tensor": 2})
    assert (spec.topology.workers.labels, spec.topology.workers.slowdown) == ({"w1": "first"}, {})
    assert "topology.workers.count: 8 -> 4 (= 1 pipeline x 2 data x 2 tensor)" in result.notes


def test_remove_worker_drops_its_overrides_and_keeps_pipeline_stages_in_step(tmp_path):
    path = write(tmp_path, """\
strategy: {kind: pipeline, stages: 3, microbatches: 4}
topology:
  workers:
    count: 3
    labels: {w1: first, w3: last}
    slowdown: {w3: 2.0}
training: {model: {layers: [8, 8, 8, 8, 4]}}
""")
    edit(path, "remove-worker")
    spec = load_spec(path)
    assert (spec.topology.workers.count, spec.strategy.stages) == (2, 2)
    assert spec.topology.workers.labels == {"w1": "first"} and spec.topology.workers.slowdown == {}
    edit(path, "add-worker", label="new")
    edit(path, "add-worker")
    spec = load_spec(path)
    assert (spec.topology.workers.count, spec.strategy.stages) == (4, 4)
    assert spec.topology.workers.label_of("w3") == "new"


def test_set_strategy_removes_keys_the_new_kind_cannot_use(tmp_path):
    path = write(tmp_path, """\
strategy:
  kind: pipeline
  microbatches: 2
  schedule: gpipe
  stages: 3
topology: {workers: {count: 3}}
""")
    edit(path, "set-strategy", kind="allreduce", algorithm="tree")
    assert path.read_text() == """\
strategy:
  kind: allreduce
  algorithm: tree
topology: {workers: {count: 3}}
"""


def test_set_strategy_follows_a_default_title_but_keeps_the_users_own(tmp_path):
    path = write(tmp_path, "title: Parameter-server training (asynchronous)\nstrategy: {kind: parameter-server, sync: async}\n")
    edit(path, "set-strategy", kind="allreduce")
    assert load_spec(path).title == "All-reduce data-parallel training"
    path = write(tmp_path, "title: My figure\nstrategy: {kind: parameter-server}\n", "own.yaml")
    edit(path, "set-strategy", kind="gossip")
    assert load_spec(path).title == "My figure"
    path = write(tmp_path, "strategy: {kind: allreduce}\ntitle: All-reduce data-parallel training\n", "ring.yaml")
    edit(path, "set-strategy", kind="allreduce", algorithm="ring")
    assert load_spec(path).title == "Ring all-reduce data-parallel training"


# -- refusals: byte-identical file, the reason named -----------------------------------

REFUSALS = [
    ("allreduce-ring.yaml", "set", {"key": "strategy.units", "value": "[blocks.0]"}, "rule", None,
     "strategy.units: units applies to kind: fsdp only, not 'allreduce' (remove it)"),
    ("ps-sync.yaml", "recolor", {"flow": "grad", "color": "otorange"}, "invariant", "distinguishable-colors",
     "figure.colors.grad: timeline figure: 'push' (figure.colors.grad) would be otorange, the colour reserved for "
     "'forward' [invariant distinguishable-colors]"),
    ("ps-sync.yaml", "recolor", {"flow": "grad", "color": "otgray"}, "invariant", "distinct-flow-colors",
     "figure.colors.grad: flows must keep distinct colours: 'grad' and 'data' are both otgray [invariant distinct-flow-colors]"),
    ("allreduce-ring.yaml", "set-sync", {"mode": "async"}, "rule", None,
     "strategy.sync: async updates need a parameter server; strategy.kind is 'allreduce' (use kind: parameter-server or sync: sync)"),
    ("ps-sync.yaml", "set-label", {"which": "grad", "text": r"$\input{/etc/passwd}$"}, "invariant", "labels-safe",
     r"figure.labels.grad: command '\input' is not allowed in math (allowed: Greek letters, \nabla, \partial, \mathbf, \frac, ...) [invariant labels-safe]"),
    ("ps-sync.yaml", "rename-node", {"node": "w2", "label": "50$"}, "invariant", "labels-safe",
     "topology.workers.labels.w2: unmatched '$' (write '\\$' for a literal dollar sign) [invariant labels-safe]"),
    ("single.yaml", "remove-worker", {}, "operation", None,
     "topology.workers.count: cannot remove w1: a spec needs at least one worker"),
    ("allreduce-hierarchical.yaml", "remove-worker", {}, "rule", None,
     "topology.hosts: 3 workers do not spread evenly over 2 hosts"),
    ("central-storage.yaml", "add-server", {}, "operation", None,
     "strategy.kind: cannot add a server: central-storage keeps the variables on exactly one host (set-strategy --kind parameter-server for shards)"),
    ("allreduce-ring.yaml", "add-server", {}, "operation", None,
     "strategy.kind: cannot add a server: strategy 'allreduce' has no parameter server (set-strategy --kind parameter-server first)"),
    ("ps-sync.yaml", "remove-server", {}, "operation", None,
     "topology.servers.count: cannot remove ps: parameter-server needs at least one server"),
    ("ps-sync.yaml", "rename-node", {"node": "w9", "label": "x"}, "operation", None,
     "topology.workers.count: no node 'w9': the workers are w1..w3"),
    ("ps-sharded.yaml", "rename-node", {"node": "ps2", "label": "x"}, "operation", None,
     "topology.servers.label: shards are labelled '<label> i' from one label; rename them all with --node ps (shard ps2 is 'Shard 2')"),
    ("allreduce-ring.yaml", "rename-node", {"node": "ps", "label": "x"}, "operation", None,
     "strategy.kind: no node 'ps': strategy 'allreduce' has no server"),
    ("pipeline-gpipe.yaml", "add-worker", {}, "rule", None,
     "training.model.layers: 4 pipeline stages need at least 4 layers; the model has 3"),
    ("single.yaml", "add-worker", {}, "rule", None,
     "topology.workers.count: single trains on one device: workers.count must be 1, got 2"),
    ("mesh-3d.yaml", "add-worker", {}, "rule", None,
     "strategy.parallelism: pipeline 2 x data 2 x tensor 2 = 8 workers, but topology.workers.count is 9 "
     "(make them equal)"),
    ("allreduce-hierarchical.yaml", "add-worker", {}, "rule", None,
     "topology.hosts: 5 workers do not spread evenly over 2 hosts"),
    ("ps-sync.yaml", "set-strategy", {"kind": "gossip", "algorithm": "ring"}, "operation", None,
     "strategy.algorithm: --algorithm applies to kind allreduce only, not 'gossip'"),
    ("allreduce-ring.yaml", "set-mesh", {"data": 2, "tensor": 2}, "operation", None,
     "strategy.kind: strategy 'allreduce' has no mesh of degrees (set-strategy --kind mesh first)"),
    ("fsdp-tensor.yaml", "set-mesh", {"data": 2, "tensor": 3}, "rule", None,
     "training.model.heads: 4 attention heads (each worker takes whole heads) do not split over parallelism.tensor 3 "
     "(tensor degrees that work: 2, 4)"),
]


@pytest.mark.parametrize("name, operation, args, refused_by, invariant, message",
                         REFUSALS, ids=lambda v: v if isinstance(v, str) else None)
def test_refusal_leaves_the_file_byte_identical(tmp_path, name, operation, args, refused_by, invariant, message):
    path = example(tmp_path, name)
    before, stat = path.read_bytes(), path.stat()
    with pytest.raises(EditRefusal) as caught:
        edit(path, operation, **args)
    result = caught.value.result
    assert (result.ok, result.written, result.refused_by, result.invariant) == (False, False, refused_by, invariant)
    if message is not None:
        assert message in [f"{i.path}: {i.message}" for i in result.issues]
    assert path.read_bytes() == before
    assert path.stat().st_ino == stat.st_ino and path.stat().st_mtime_ns == stat.st_mtime_ns
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([name, f".{name}.dtgen-lock"])  # no temp files


def test_refusal_of_a_spec_broken_before_the_edit(tmp_path):
    path = write(tmp_path, "strategy: {kind: allreduce, algoritm: ring}\n")
    with pytest.raises(EditRefusal) as caught:
        edit(path, "add-worker")
    result = caught.value.result
    assert result.refused_by == "spec-before-edit"
    assert [str(i) for i in result.issues] == [f"{path}:1:29: strategy.algoritm: unknown key 'algoritm'; did you mean 'algorithm'?"]
    assert path.read_text() == "strategy: {kind: allreduce, algoritm: ring}\n"


def test_a_spec_nested_thousands_deep_is_refused_with_one_located_line(tmp_path):
    text = "name: deep\nextra: " + "[" * 3000 + "]" * 3000 + "\n"
    path = write(tmp_path, text)
    result = cli(path, "add-worker", "--no-compile")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.stderr.splitlines()[0] == f"{path}:2:71: extra: nested more than 64 levels deep"
    assert path.read_text() == text


@pytest.mark.parametrize("operation, words, message", [
    ("recolr", [], "unknown operation 'recolr'; did you mean 'recolor'?"),
    ("recolor", ["--colour", "otblue"], "recolor: unknown option --colour; did you mean --color?"),
    ("recolor", ["--flow", "grad", "--color", "red"], "recolor: --color 'red' is not one of"),
    ("recolor", ["--flow", "grad"], "recolor: missing --color"),
    ("change-spacing", [], "change-spacing: give at least one of --colsep, --rowsep"),
    ("change-spacing", ["--colsep", "wide"], "change-spacing: --colsep expects a number, got 'wide'"),
    ("change-spacing", ["--rowsep", "0.5"], "change-spacing: --rowsep 0.5 is less than the minimum of 1.2"),
    ("add-worker", ["extra"], "add-worker: unexpected argument 'extra'"),
    ("remove-worker", ["--label", "x"], "remove-worker: unknown option --label (it takes no options)"),
    ("rename-node", ["--node", "gpu1", "--label", "x"], "rename-node: --node 'gpu1' is not a valid node id"),
    ("set-label", ["--which", "grad", "--text"], "set-label: option --text needs a value"),
])
def test_bad_arguments_are_named_before_anything_is_read(tmp_path, operation, words, message):
    path = example(tmp_path, "ps-sync.yaml")
    before = path.read_bytes()
    with pytest.raises(EditArgumentError) as caught:
        edit_file(path, operation, parse_words(operation, words) if operation in OPERATIONS else {})
    assert message in str(caught.value)
    assert path.read_bytes() == before
    result = cli(path, operation, *words)
    assert result.exit_code == 2 and message in result.output


def test_a_mistyped_set_key_shows_the_suggestion_and_a_few_close_keys_not_all(tmp_path):
    path = example(tmp_path, "ps-sync.yaml")
    result = cli(path, "set", "--key", "training.optimzer.lr", "--value", "0.1")
    assert result.exit_code == 2
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("dtgen: error: set: --key 'training.optimzer.lr' is not one of the ")
    assert "did you mean 'training.optimizer.lr'?" in line and "`dtgen contract` lists them all" in line
    assert line.count("'") <= 2 * 5  # the key, the suggestion and at most three more
    assert len(line) < 400


def test_parse_words_types_values_by_the_schema():
    assert parse_words("change-spacing", ["--colsep", "5", "--rowsep=2.75"]) == {"colsep": 5, "rowsep": 2.75}
    assert parse_words("rename-node", ["--node", "w1", "--label=--odd--"]) == {"node": "w1", "label": "--odd--"}


# -- formatting survives ---------------------------------------------------------------

def test_comments_order_and_styles_survive_a_chain_of_edits(tmp_path):
    path = tmp_path / "spec.yaml"
    assert CliRunner().invoke(main, ["init", "--strategy", "allreduce", str(path)]).exit_code == 0
    before = path.read_text()
    edit(path, "add-worker", label="GPU 3")
    edit(path, "recolor", flow="data", color="otblue")
    edit(path, "set-label", which="weight", text=r"$\mathbf{w}$")
    edit(path, "set-strategy", kind="parameter-server")  # removes `algorithm: ring  # ...`
    after = path.read_text()
    comments = lambda text: [line.split("#", 1)[1] for line in text.splitlines() if "#" in line]  # noqa: E731
    lost = [c for c in comments(before) if c not in comments(after)]
    assert lost == [" native (PyTorch's collective) | ring | tree | hierarchical"]  # the removed key's own comment
    assert "  kind: parameter-server      # every worker averages" in after
    top = lambda text: [line.split(":")[0] for line in text.splitlines() if line and line[0].isalpha()]  # noqa: E731
    assert top(after) == top(before)
    assert "labels: {batch: batch, grad: '$\\nabla\\theta$', weight: '$\\mathbf{w}$'}" in after
    assert after.count("\n\n") == before.count("\n\n")  # blank lines between sections stay


def test_unchanged_edit_writes_nothing(tmp_path):
    path = example(tmp_path, "ps-sync.yaml")
    stat = path.stat()
    result = edit(path, "set-sync", mode="sync")
    assert (result.ok, result.changed, result.written, result.diff) == (True, False, False, "")
    assert path.stat().st_ino == stat.st_ino and path.stat().st_mtime_ns == stat.st_mtime_ns


def test_quoting_newlines_symlinks_and_permissions_are_kept(tmp_path):
    real = write(tmp_path, 'strategy: {kind: parameter-server}\r\ntitle: "Old"\r\n', "real.yaml")
    real.chmod(0o640)
    link = tmp_path / "link.yaml"
    link.symlink_to(real)
    edit(link, "set-label", which="title", text="New")
    edit(link, "set-label", which="grad", text=r"$\nabla$")
    assert link.is_symlink()
    assert real.read_bytes() == b"strategy: {kind: parameter-server}\r\ntitle: \"New\"\r\nfigure:\r\n  labels:\r\n    grad: '$\\nabla$'\r\n"
    assert real.stat().st_mode & 0o777 == 0o640


# -- dry run, json and the command line ------------------------------------------------

def test_dry_run_prints_a_diff_and_writes_nothing(tmp_path):
    path = example(tmp_path, "ps-sync.yaml")
    before = path.read_bytes()
    result = cli(path, "add-worker", "--dry-run", "--no-compile")
    assert result.exit_code == 0, result.output
    assert f"--- a/{path}\n+++ b/{path}\n" in result.stdout
    assert '-  workers: {count: 3, label: "Worker {i}"}\n+  workers: {count: 4, label: "Worker {i}"}\n' in result.stdout
    assert f"dry run: {path} not written" in result.stderr
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ps-sync.yaml"]  # no lock file either


def test_json_result_shape(tmp_path):
    path = example(tmp_path, "ps-sync.yaml")
    ok = cli(path, "recolor", "--flow", "data", "--color", "otblue", "--json", "--no-compile")
    assert ok.exit_code == 0
    data = json.loads(ok.stdout)
    assert set(data) == {"ok", "operation", "args", "file", "changed", "written", "dry_run", "diff", "issues", "invariant",
                         "refused_by", "skipped", "notes"}
    assert data["skipped"] == ["figure-compiles", "figure-fits-width", "no-overlaps"]
    assert (data["ok"], data["operation"], data["args"], data["changed"], data["written"]) == (True, "recolor", {"flow": "data", "color": "otblue"}, True, True)
    assert data["issues"] == [] and data["invariant"] is None and "+    data: otblue" in data["diff"]
    refused = cli(path, "recolor", "--flow", "weight", "--color", "otblue", "--json", "--no-compile")
    assert refused.exit_code == 1
    data = json.loads(refused.stdout)
    assert (data["ok"], data["written"], data["invariant"], data["refused_by"]) == (False, False, "distinct-flow-colors", "invariant")
    issue = data["issues"][0]
    assert set(issue) == {"file", "line", "col", "path", "message"} and issue["path"] == "figure.colors.weight"
    bad = cli(path, "recolor", "--flow", "grad", "--json")
    assert bad.exit_code == 2
    data = json.loads(bad.stdout)
    assert (data["ok"], data["refused_by"]) == (False, "arguments")
    assert data["issues"][0]["message"].startswith("recolor: missing --color")


def test_cli_refusal_message_names_the_invariant(tmp_path):
    path = example(tmp_path, "ps-sync.yaml")
    before = path.read_bytes()
    result = cli(path, "recolor", "--flow", "weight", "--color", "otgray", "--no-compile")
    assert result.exit_code == 1
    # the issues first, the dtgen: error: line last (docs/cli.md, "Exit codes")
    assert result.stderr.splitlines()[-1] == f"dtgen: error: {path}: recolor refused; nothing changed (line:col above point into the file as it is)"
    assert any("[invariant distinct-flow-colors]" in line for line in result.stderr.splitlines()[:-1])
    assert path.read_bytes() == before


def test_cli_applies_and_lists_operations_in_help(tmp_path):
    path = example(tmp_path, "ps-sync.yaml")
    result = cli(path, "rename-node", "--node", "w1", "--label", "GPU 0", "--no-compile")
    assert result.exit_code == 0, result.output
    assert result.stdout == f"{path}: rename-node applied; every invariant holds (not checked: figure-compiles, figure-fits-width, no-overlaps)\n"
    assert load_spec(path).topology.workers.label_of("w1") == "GPU 0"
    help_text = CliRunner().invoke(main, ["edit", "--help"]).output
    for name in OPERATIONS:
        assert name in help_text


@pytest.mark.latex
def test_full_check_compiles_the_figure(tmp_path):
    path = example(tmp_path, "ps-sync.yaml")
    result = edit_file(path, "add-worker", {"label": "GPU 3"})
    assert result.written
    result = cli(path, "recolor", "--flow", "server", "--color", "otgray", "--json")
    assert json.loads(result.stdout)["ok"], result.output


@pytest.mark.latex
def test_tight_spacing_is_widened_in_the_figure_not_refused(tmp_path):
    path = example(tmp_path, "allreduce-hierarchical.yaml")
    assert edit_file(path, "change-spacing", {"colsep": 1}).written  # the full check passes: no overlaps
    assert load_spec(path).figure.colsep == 1  # the spec keeps the asked gap; the figure widens it


@pytest.mark.latex
def test_an_overlap_is_refused_by_no_overlaps(tmp_path, monkeypatch):
    from opentikz_dt.figures import topology
    from opentikz_dt.figures.spacing import Spacing

    # Draw at the asked gaps, without the widening: colsep 1 then overlaps, as it once did.
    def asked(spec, kind):
        f = spec.figure
        return Spacing(f.colsep, f.rowsep, f.colsep, f.rowsep)

    monkeypatch.setattr(topology, "effective_spacing", asked)
    path = example(tmp_path, "allreduce-hierarchical.yaml")
    before = path.read_bytes()
    with pytest.raises(EditRefusal) as caught:
        edit_file(path, "change-spacing", {"colsep": 1})
    result = caught.value.result
    assert (result.refused_by, result.invariant) == ("invariant", "no-overlaps")
    assert all(i.message.endswith("[invariant no-overlaps]") for i in result.issues)
    assert any(i.message.startswith("topology figure: ") and " overlap (" in i.message for i in result.issues)
    assert path.read_bytes() == before
    located = [i for i in result.issues if i.path]  # named after the spec keys behind the nodes
    assert located and all(" comes from " in i.message and i.line > 1 for i in located), result.issues
    assert edit_file(path, "change-spacing", {"colsep": 1}, compile=False).written  # --no-compile cannot see it


def test_skill_document_covers_the_loop():
    text = CliRunner().invoke(main, ["skill"]).output
    for needle in ("dtgen contract", "dtgen edit", "--json", "dtgen validate", "dtgen figure",
                   "never edit", "refused_by", "distinct-flow-colors", "--ops", "notes", "dtgen mcp"):
        assert needle in text, needle
    # the MCP registration snippet is valid JSON that starts this server
    snippet = json.loads(text.split("```json\n", 1)[1].split("```", 1)[0])
    assert snippet["mcpServers"]["dtgen"]["args"] == ["mcp"]
    assert os.path.exists(REPO / "opentikz_dt" / "SKILL.md")


def test_missing_spec_is_reported_without_leaving_a_lock_file(tmp_path):
    result = cli(tmp_path / "nope.yaml", "add-worker", "--json")
    assert result.exit_code == 1  # invalid input, as from every command
    data = json.loads(result.stdout)
    assert (data["ok"], data["refused_by"]) == (False, "spec-before-edit")
    assert data["issues"] == [{"file": str(tmp_path / "nope.yaml"), "line": 1, "col": 1, "path": "", "message": "no such file"}]
    assert list(tmp_path.iterdir()) == []


def test_dry_run_of_a_refused_edit_shows_the_proposal_it_refused(tmp_path):
    path = example(tmp_path, "allreduce-ring.yaml")
    before = path.read_bytes()
    result = cli(path, "set-sync", "--mode", "async", "--dry-run", "--no-compile")
    assert result.exit_code == 1
    assert "+strategy: {kind: allreduce, algorithm: ring, sync: async}\n" in result.stdout
    assert "strategy.sync: async updates need a parameter server" in result.stderr
    assert path.read_bytes() == before
