"""Memory per rank (issue 22): the runner's measurement (runner/memory.py) against the exact
sizes of the tensors, the spec's expectation (opentikz_dt/memory.py) against the
measurement, the summary column, and the memory figure (compiles, fits a column, is
deterministic)."""

from __future__ import annotations

import json
import re

import pytest

from opentikz_dt.figures.memory import elide, render_spec_memory
from opentikz_dt.memory import expected_memory
from opentikz_dt.shards import assign_tensors, tensor_sizes
from opentikz_dt.spec import spec_from_data

LAYERS = [16, 32, 32, 4]  # runner.testing.small_spec_data's MLP
CATEGORIES = ("params", "grads", "optimizer")


def _mlp_bytes(layers=LAYERS) -> int:
    """float32 bytes of the MLP's weights and biases, counted by hand."""
    return 4 * sum(a * b + b for a, b in zip(layers[:-1], layers[1:]))


# --- the measurement, in process ---------------------------------------------------------

def test_meter_counts_each_category_exactly_and_activations_are_live_bytes():
    torch = pytest.importorskip("torch")
    from opentikz_dt.runner.memory import MemoryMeter

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    meter = MemoryMeter(torch.device("cpu"))
    meter.built(model)
    batch = 8
    for _ in range(2):  # two steps: the first backward frees its activations before the second forward
        model.zero_grad(set_to_none=True)
        model(torch.randn(batch, 16)).sum().backward()  # sum saves nothing
    opt.step()
    meter.record(model.parameters(), opt)
    got = meter.result
    params = 4 * (16 * 32 + 32 + 32 * 4 + 4)
    assert got["params"] == got["grads"] == params
    assert got["optimizer"] == 2 * params  # Adam's two moments; the 0-d step counters left out
    # saved for backward: the input (batch x 16) of the first linear, the ReLU's output
    # (batch x 32, which the second linear saves too: one storage); never the weights,
    # and one step's worth (peak), not two
    assert got["activations"] == 4 * batch * (16 + 32)
    assert got["peak"] is None and got["source"] == "tensors"


def test_meter_counts_a_flat_gradient_buffer_once():
    torch = pytest.importorskip("torch")
    from opentikz_dt.runner.memory import MemoryMeter

    model = torch.nn.Linear(8, 8)
    params = list(model.parameters())
    flat = torch.zeros(sum(p.numel() for p in params))
    offset = 0
    for p in params:  # as runner/strategies/allreduce.py's manual all-reduce does
        p.grad = flat[offset:offset + p.numel()].view_as(p)
        offset += p.numel()
    meter = MemoryMeter(torch.device("cpu"))
    meter.record(params, None)
    assert meter.result["grads"] == flat.numel() * 4 == meter.result["params"]
    assert meter.result["optimizer"] == 0 and meter.result["activations"] == 0


# --- the measurement, from real runs -----------------------------------------------------

CASES = {
    # sgd with momentum (the default): one state value per parameter
    "single": ("single", {}),
    # sgd without momentum: no optimizer state; gradients are views of one flat buffer
    "allreduce-ring-2": ("allreduce", {"topology": {"workers": {"count": 2}}, "strategy": {"algorithm": "ring"},
                                       "training": {"optimizer": {"kind": "sgd", "momentum": 0.0}}}),
    # adam: two state values per parameter, on the servers only
    "ps-sync-2shards": ("parameter-server", {"topology": {"workers": {"count": 2}, "servers": {"count": 2}},
                                             "training": {"optimizer": {"kind": "adam", "lr": 0.01}}}),
    # async: each server's gradients are views into the push it applies, whose buffer
    # ends with the push's 8-byte ticket
    "ps-async-2shards": ("parameter-server", {"topology": {"workers": {"count": 2}, "servers": {"count": 2}},
                                              "strategy": {"sync": "async"}}),
    # fsdp: each worker half of every tensor (the mlp's first dimensions are even), its
    # gradient and Adam's two moments; counted from the DTensors' local shards
    "fsdp-2": ("fsdp", {"topology": {"workers": {"count": 2}}, "training": {"optimizer": {"kind": "adam", "lr": 0.01}}}),
    # ZeRO-1 (shard: optimizer): the whole mlp and its gradients on each worker (DDP); Adam's
    # moments of the whole tensors torch's ZeroRedundancyOptimizer assigns it
    "zero1-2": ("fsdp", {"topology": {"workers": {"count": 2}}, "strategy": {"shard": "optimizer"},
                         "training": {"optimizer": {"kind": "adam", "lr": 0.01}}}),
    # ZeRO-2 (shard: gradients) as FSDP2 runs it: between steps the states of fsdp-2
    "zero2-2": ("fsdp", {"topology": {"workers": {"count": 2}}, "strategy": {"shard": "gradients"},
                         "training": {"optimizer": {"kind": "adam", "lr": 0.01}}}),
    # a 1F1B pipeline: each stage its layer; activations: p - stage microbatches in flight, the
    # first stage's inputs and the last's targets whole (views of the step's batch)
    "pipeline-1f1b-3": ("pipeline", {"topology": {"workers": {"count": 3}},
                                     "strategy": {"microbatches": 4, "schedule": "1f1b", "stages": 3}}),
    # tensor parallelism: each worker its slices (DTensors: their local tensors) and the rest whole
    "tensor-2": ("tensor", {"topology": {"workers": {"count": 2}},
                            "training": {"optimizer": {"kind": "adam", "lr": 0.01}}}),
}


def _run(name):
    pytest.importorskip("torch")
    from opentikz_dt.runner.testing import run_small, small_spec_data

    kind, overrides = CASES[name]
    data = small_spec_data(kind, **overrides)
    return data, run_small(data)


@pytest.mark.dist
def test_measured_memory_is_the_tensors_each_rank_holds():
    whole = _mlp_bytes()
    # single: a replica, its gradients, one momentum buffer
    _, single = _run("single")
    (entry,) = single.metrics["memory"].values()
    assert (entry["params"], entry["grads"], entry["optimizer"]) == (whole, whole, whole)
    assert entry["activations"] > 0 and entry["peak"] is None and entry["source"] == "tensors"
    # all-reduce: every worker a replica; no momentum, no optimizer state
    _, ring = _run("allreduce-ring-2")
    assert sorted(ring.metrics["memory"]) == ["0", "1"]
    for entry in ring.metrics["memory"].values():
        assert (entry["params"], entry["grads"], entry["optimizer"]) == (whole, whole, 0)
        assert entry["activations"] > 0
    # parameter server: workers a replica (no optimizer); each server its shard and Adam's two moments
    _, ps = _run("ps-sync-2shards")
    memory = ps.metrics["memory"]
    shards = assign_tensors(tensor_sizes(LAYERS), ["ps1", "ps2"])
    sizes = tensor_sizes(LAYERS)
    for rank in ("0", "1"):
        assert (memory[rank]["params"], memory[rank]["grads"], memory[rank]["optimizer"]) == (whole, whole, 0)
        assert memory[rank]["activations"] > 0
    for rank, sid in (("2", "ps1"), ("3", "ps2")):
        shard = 4 * sum(sizes[name] for name in shards[sid])
        assert (memory[rank]["params"], memory[rank]["grads"], memory[rank]["optimizer"]) == (shard, shard, 2 * shard)
        assert memory[rank]["activations"] == 0  # a server runs no forward
    assert memory["2"]["params"] + memory["3"]["params"] == whole


@pytest.mark.dist
@pytest.mark.parametrize("name", list(CASES))
def test_expected_memory_equals_the_measured_one(name):
    data, result = _run(name)
    expected = expected_memory(spec_from_data(data))
    measured = result.metrics["memory"]
    assert len(expected) == len(measured) == result.run["world_size"]
    for e in expected:
        assert {c: getattr(e, c) for c in CATEGORIES} == {c: measured[str(e.rank)][c] for c in CATEGORIES}, e.id
        assert e.id == result.run["ranks"][e.rank]["id"] and e.role == result.run["ranks"][e.rank]["role"]
        # activations (docs/memory.md): exact where the model predicts them, but fsdp's: FSDP2
        # gathers a unit's weights to compute it, the linear layers keep the gathered weights
        # for the backward, and the meter counts them at full size when saved (though
        # reshard_after_forward frees their storage until the backward gathers them again):
        # above the model by at most every weight matrix (measured: all but the first
        # layer's, whose input needs no gradient)
        got, want = measured[str(e.rank)]["activations"], e.activations
        if name == "tensor-2":
            assert want is None  # an mlp's tensor-parallel pairs: not modelled
        elif name in ("fsdp-2", "zero2-2"):
            weights = 4 * sum(n for t, n in tensor_sizes(LAYERS).items() if t.endswith("weight"))
            assert 0 < want <= got <= want + weights, (e.id, got, want)
        else:
            assert want == got, (e.id, got, want)


@pytest.mark.dist
def test_the_summary_table_has_a_memory_column():
    from opentikz_dt.runner.strategies import load_strategy
    from opentikz_dt.runner.summary import render_summary

    data, ps = _run("ps-sync-2shards")
    spec = spec_from_data(data)
    text = render_summary(spec, load_strategy(spec.strategy.kind).roles(spec), ps.metrics, ps.run, ps.run_dir)
    header, _, *rows = text.splitlines()[1:]
    assert header.split()[-2:] == ["memory", "MB"]
    memory = ps.metrics["memory"]
    for rank, row in enumerate(rows[:4]):
        m = memory[str(rank)]
        assert row.split()[-1] == f"{(m['params'] + m['grads'] + m['optimizer'] + m['activations']) / 1e6:.2f}"


# --- expected memory, no torch -----------------------------------------------------------

def _spec(kind, **overrides):
    data = {"name": f"m-{kind}", "strategy": {"kind": kind}, "training": {"model": {"layers": LAYERS}}}
    for key, value in overrides.items():
        data[key] = {**data.get(key, {}), **value}
    return spec_from_data(data)


def test_expected_memory_follows_each_strategys_placement():
    whole = _mlp_bytes()
    adam = {"model": {"layers": LAYERS}, "optimizer": {"kind": "adam"}}
    ring = expected_memory(_spec("allreduce", topology={"workers": {"count": 4}}, training=adam))
    assert [(e.params, e.grads, e.optimizer) for e in ring] == [(whole, whole, 2 * whole)] * 4
    central = expected_memory(_spec("central-storage", topology={"workers": {"count": 2}}))
    assert [(e.role, e.optimizer) for e in central] == [("worker", 0), ("worker", 0), ("storage", whole)]
    pipe = expected_memory(_spec("pipeline", topology={"workers": {"count": 2}}, strategy={"microbatches": 2}))
    stage0 = 4 * (16 * 32 + 32 + 32 * 32 + 32)  # layers 0 and 1 on the first stage, layer 2 on the second
    assert [e.params for e in pipe] == [stage0, whole - stage0]
    no_momentum = {"model": {"layers": LAYERS}, "optimizer": {"kind": "sgd", "momentum": 0.0}}
    assert expected_memory(_spec("single", training=no_momentum))[0].optimizer == 0


def test_many_ranks_are_elided_per_role():
    ranks = [{"role": "worker", "id": f"w{i}"} for i in range(1, 1025)] + [{"role": "server", "id": "ps1"}]
    drawn = elide(ranks)
    assert [r["id"] if isinstance(r, dict) else (r[0]["id"], r[1]["id"]) for r in drawn] == \
        ["w1", "w2", "w3", ("w4", "w1023"), "w1024", "ps1"]
    assert elide(ranks[:5]) == ranks[:5]


def test_the_spec_figure_is_deterministic_and_says_it_is_expected():
    spec = _spec("parameter-server", topology={"workers": {"count": 3}, "servers": {"count": 2}})
    tex = render_spec_memory(spec)
    assert tex == render_spec_memory(spec)
    assert "Expected memory per rank" in tex and "measured" not in tex
    # palette colours only
    assert set(re.findall(r"fill=(\w+)!", tex)) <= {"otblue", "otorange", "otteal", "otpurple", "otgray"}


# --- the figure, compiled -----------------------------------------------------------------

def _with_memory(run_dir, measured: dict) -> None:
    path = run_dir / "metrics.json"
    metrics = json.loads(path.read_text())
    metrics["memory"] = measured
    path.write_text(json.dumps(metrics))


@pytest.mark.latex
def test_the_run_figure_compiles_fits_a_column_and_says_measured_and_expected(tmp_path):
    import dataclasses

    from opentikz_dt.figures.compile import compile_pdf, pdf_text
    from opentikz_dt.figures.fit import COLUMN_CM, with_width
    from opentikz_dt.figures.pdfwords import page_size_cm
    from opentikz_dt.measured.figures import render_run_figures, write_run_figures
    from opentikz_dt.measured.run import load_run
    from opentikz_dt.predict.synthetic import write_synthetic_run

    run_dir = write_synthetic_run(tmp_path / "ps", "ps-sync", steps=6)
    run = load_run(run_dir)
    expected = expected_memory(run.spec)
    measured = {str(e.rank): {**e.as_dict(), "activations": 1000 * (e.role == "worker"), "peak": None,
                              "source": "tensors"} for e in expected}
    _with_memory(run_dir, measured)
    written = write_run_figures(run_dir, tmp_path / "out", ("tex", "pdf"), only=("plot-memory",))
    assert sorted(p.name for p in written) == ["measured-ps-memory.pdf", "measured-ps-memory.tex"]
    run = load_run(run_dir)
    column = dataclasses.replace(run, spec=with_width(run.spec, "column"))
    tex = render_run_figures(column, only=("plot-memory",))["plot-memory"]
    assert tex == render_run_figures(column, only=("plot-memory",))["plot-memory"]  # deterministic
    pdf = compile_pdf(tex).pdf
    assert page_size_cm(pdf)[0] <= COLUMN_CM
    text = " ".join(pdf_text(pdf).split())
    for words in ("Memory per rank: expected and measured", "expected (left)", "measured (right)",
                  "parameters", "gradients", "optimizer state", "activations", "PS"):
        assert words in text, words


@pytest.mark.latex
def test_the_spec_figure_compiles_for_every_placement(tmp_path):
    from pathlib import Path

    from opentikz_dt.figures.write import figure_command

    examples = Path(__file__).resolve().parent.parent / "examples"
    for name in ("ps-sync", "allreduce-ring", "pipeline-1f1b"):
        written = figure_command(examples / f"{name}.yaml", tmp_path, "memory", ("pdf",), False, width="column")
        assert sorted(p.name for p in written) == [f"{name}-memory.pdf", f"{name}-memory.tex"]


# --- memory in dtgen compare and on the measured topology ------------------------------------

def _synthetic_with_memory(tmp_path, kind, name=None, grow=None):
    """A synthetic run of `kind` whose metrics.json holds the memory its spec expects, plus
    activations on the workers (rank r: 1000 * (r + 1) bytes, or `grow`'s bytes for a rank)."""
    from opentikz_dt.measured.run import load_run
    from opentikz_dt.predict.synthetic import write_synthetic_run

    run_dir = write_synthetic_run(tmp_path / (name or kind), kind, steps=6) if isinstance(kind, str) \
        else _simulated_run(tmp_path / name, kind)
    expected = expected_memory(load_run(run_dir).spec)
    measured = {str(e.rank): {**e.as_dict(), "activations": (grow or {}).get(e.rank, 1000 * (e.rank + 1))
                              if e.role != "server" else 0, "peak": None, "source": "tensors"} for e in expected}
    _with_memory(run_dir, measured)
    return run_dir, measured


def _simulated_run(path, data):
    """A run directory of spec `data` as the simulator predicts it (any strategy, hosts, servers)."""
    import random

    from opentikz_dt.predict.costs import Costs
    from opentikz_dt.predict.rundir import write_run_dir
    from opentikz_dt.predict.simulate import simulate
    from opentikz_dt.predict.synthetic import synthetic_calibration, synthetic_loss

    spec = spec_from_data({"name": path.name, **data, "training": {"steps": 6}})
    result = simulate(spec, Costs(synthetic_calibration(spec), spec, jitter=random.Random(0)), 6)
    return write_run_dir(path, spec, result, 6, loss=synthetic_loss(6), dtgen="synthetic")


def _total(entry) -> int:
    return entry["params"] + entry["grads"] + entry["optimizer"] + entry["activations"]


def test_the_compare_table_has_a_memory_column_only_for_runs_that_measured_it(tmp_path):
    from opentikz_dt.measured.compare import render_summary_table, summarize
    from opentikz_dt.measured.run import load_run
    from opentikz_dt.predict.synthetic import write_synthetic_run
    from opentikz_dt.workload import human_bytes

    ps_dir, ps = _synthetic_with_memory(tmp_path, "ps-sync", grow={1: 120_000})
    ring_dir, ring = _synthetic_with_memory(tmp_path, "allreduce-ring")
    old_dir = write_synthetic_run(tmp_path / "old", "allreduce-tree", steps=6)  # no `memory`: an older run
    runs = [load_run(d) for d in (ps_dir, ring_dir, old_dir)]
    table = render_summary_table([summarize(r, None) for r in runs], None, runs[0].spec)
    header = next(line for line in table.splitlines() if line.startswith("Run &"))
    assert header.rstrip(" \\").endswith("Memory/rank")
    rows = {line.split(" & ")[0]: line.rstrip(" \\").split(" & ")[-1] for line in table.splitlines()
            if line.startswith("synth-")}
    # the largest rank's bytes: a worker with 120 kB of activations, above the server (ps); any replica (ring)
    assert rows["synth-ps-sync"] == human_bytes(max(_total(e) for e in ps.values())) == human_bytes(_total(ps["1"]))
    assert rows["synth-allreduce-ring"] == human_bytes(max(_total(e) for e in ring.values()))
    assert rows["synth-allreduce-tree"] == "--"
    assert "Memory/rank: the largest rank's" in table
    # runs from before memory was measured: the table as it was, no column
    old = render_summary_table([summarize(load_run(old_dir), None)], None, runs[2].spec)
    assert "Memory" not in old


def test_compare_draws_each_roles_largest_rank_stacked_by_category(tmp_path):
    from opentikz_dt.figures.checks import check_palette_only
    from opentikz_dt.figures.memory import render_compare_memory, role_bars
    from opentikz_dt.measured.run import load_run
    from opentikz_dt.predict.synthetic import write_synthetic_run

    ps_dir, ps = _synthetic_with_memory(tmp_path, "ps-sync", grow={2: 99_000})
    ring_dir, ring = _synthetic_with_memory(tmp_path, "allreduce-ring")
    old = load_run(write_synthetic_run(tmp_path / "old", "allreduce-tree", steps=6))
    runs = [load_run(ps_dir), load_run(ring_dir), old]
    bars = role_bars(runs[0])
    assert [(role, ident) for role, ident, _ in bars] == [("worker", "w3"), ("server", "ps")]  # w3: the largest
    assert role_bars(old) == []
    tex = render_compare_memory(runs)
    assert tex == render_compare_memory(runs)  # deterministic
    # one solid box per category a bar holds, nothing dashed (measured only)
    drawn = re.findall(r"\\draw\[fill=(\w+)!70!otpaper.*?\(axis cs:([-\d.e]+),([-\d.e]+)\) rectangle "
                       r"\(axis cs:([-\d.e]+),([-\d.e]+)\)", tex)
    heights = {}
    for color, x0, y0, x1, y1 in drawn:
        heights.setdefault(x0, []).append((float(y0), float(y1)))
    assert "densely dashed] (axis" not in tex
    assert len(heights) == 3  # ps: worker, server; ring: worker
    ymax = float(re.search(r"ymax=([\d.]+)", tex).group(1))
    unit = 1e3 if "ylabel={kB}" in tex else 1e6
    tops = sorted(round(max(y1 for _, y1 in boxes) * unit) for boxes in heights.values())
    expected_tops = sorted([_total(ps["2"]), _total(ps["3"]), max(_total(e) for e in ring.values())])
    assert tops == pytest.approx(expected_tops, rel=1e-5)
    assert ymax * unit >= max(expected_tops)
    assert check_palette_only(tex) == []
    assert "{\\strut synth-ps-sync}" in tex and "{\\strut worker}" in tex and "{\\strut server}" in tex
    assert "no memory measured: synth-allreduce-tree" in tex


def test_the_measured_topology_says_each_ranks_memory_and_older_runs_are_unchanged(tmp_path):
    from opentikz_dt.figures.texts import label_text
    from opentikz_dt.measured.annotate import annotate_layout
    from opentikz_dt.measured.run import load_run
    from opentikz_dt.workload import human_bytes

    run_dir, measured = _synthetic_with_memory(tmp_path, "ps-sync")
    run = load_run(run_dir)
    with_memory = annotate_layout(run.spec, run.metrics, ranks=run.info.get("ranks"))
    nodes = {n.name: n for n in with_memory.layout.nodes}
    for rank, ident in ((0, "w1"), (1, "w2"), (2, "w3"), (3, "ps")):
        line = label_text(run.spec, "rank_memory", bytes=human_bytes(_total(measured[str(rank)])))
        assert nodes[ident].label.endswith(f"\\\\{line}"), ident
    assert label_text(run.spec, "memory_note") in nodes["measured-note"].text
    # the same run without memory: no memory anywhere, and the layout of before
    bare = dict(run.metrics, memory={})
    without = annotate_layout(run.spec, bare, ranks=run.info.get("ranks"))
    assert not any("mem" in str(n.label) + str(n.text) for n in without.layout.nodes)
    assert without == annotate_layout(run.spec, bare)
    # a line more per label: the worker rows further apart than without
    ys = lambda a: sorted(n.y for n in a.layout.nodes if n.name in ("w1", "w2", "w3"))  # noqa: E731
    assert ys(with_memory)[2] - ys(with_memory)[0] > ys(without)[2] - ys(without)[0]


@pytest.mark.latex
def test_compare_memory_compiles_in_one_column_beside_the_other_compare_outputs(tmp_path):
    from opentikz_dt.figures.compile import pdf_text
    from opentikz_dt.figures.fit import COLUMN_CM
    from opentikz_dt.figures.pdfwords import page_size_cm
    from opentikz_dt.measured.compare import compare_runs

    dirs = [_synthetic_with_memory(tmp_path, kind)[0] for kind in ("allreduce-ring", "ps-sync", "pipeline-1f1b")]
    written = compare_runs(dirs, tmp_path / "out", ("tex", "pdf"))
    names = sorted(p.name for p in written)
    assert {"compare-memory.pdf", "compare-memory.tex", "compare-table.pdf", "compare-loss.pdf"} <= set(names)
    pdf = (tmp_path / "out" / "compare-memory.pdf").read_bytes()
    assert page_size_cm(pdf)[0] <= COLUMN_CM
    text = " ".join(pdf_text(pdf).split())
    for words in ("Measured memory per strategy", "synth-allreduce-ring", "synth-ps-sync", "synth-pipeline-1f1b",
                  "worker", "server", "stage", "parameters", "gradients", "activations"):
        assert words in text, words


SPECS = {  # side-by-side workers in host boxes, a column in host boxes, shard boxes, an elided column
    "hierarchical-4x2": {"topology": {"workers": {"count": 8}, "hosts": 4},
                         "strategy": {"kind": "allreduce", "algorithm": "hierarchical"}},
    "ring-on-2-hosts": {"topology": {"workers": {"count": 4}, "hosts": 2},
                        "strategy": {"kind": "allreduce", "algorithm": "ring"}},
    "ps-2-shards": {"topology": {"workers": {"count": 3}, "servers": {"count": 2}},
                    "strategy": {"kind": "parameter-server"}},
    "ps-64-elided": {"topology": {"workers": {"count": 64}}, "strategy": {"kind": "parameter-server"}},
}


@pytest.mark.latex
@pytest.mark.parametrize("width", [None, "column"])
@pytest.mark.parametrize("kind", ["ps-sync", "allreduce-ring", "pipeline-1f1b", "central-storage", "gossip",
                                  "hierarchical-4x2", "ring-on-2-hosts", "ps-2-shards", "ps-64-elided"])
def test_the_measured_topology_with_memory_has_no_overlaps(tmp_path, kind, width):
    import dataclasses

    from opentikz_dt.figures.checks import check_figure_geometry
    from opentikz_dt.figures.compile import compile_pdf, pdf_text
    from opentikz_dt.figures.fit import with_width
    from opentikz_dt.figures.texts import label_text
    from opentikz_dt.measured.annotate import annotate_layout, render_annotated_topology
    from opentikz_dt.measured.run import load_run
    from opentikz_dt.workload import human_bytes

    run_dir, measured = _synthetic_with_memory(tmp_path, SPECS.get(kind, kind), name=kind)
    run = load_run(run_dir)
    if width:
        run = dataclasses.replace(run, spec=with_width(run.spec, width))
    compiled = compile_pdf(render_annotated_topology(run))
    assert check_figure_geometry(compiled.log) == []
    text = " ".join(pdf_text(compiled.pdf).split())
    # every drawn rank's memory is printed (under its node, or a shard box's in the footer); elided ones are not
    drawn = {n.name for n in annotate_layout(run.spec, run.metrics, ranks=run.info["ranks"]).layout.nodes}
    shown = [r for r in run.info["ranks"] if r["id"] in drawn]
    assert shown and any(r["id"] == "w1" for r in shown)
    for r in shown:
        assert label_text(run.spec, "rank_memory", bytes=human_bytes(_total(measured[str(r["rank"])]))) in text, r


def test_a_sweep_predicts_memory_per_worker_one_line_per_strategy(tmp_path):
    """`dtgen predict --sweep` says the bytes per worker at every count (issue 22): a
    replica's stay, FSDP's states shrink as 1/N beside the same activations (each worker
    its batch_size), and the figure draws them as a third panel."""
    from opentikz_dt.predict.sweep import render_scaling, run_sweep
    from opentikz_dt.spec import load_spec

    spec = tmp_path / "cmp.yaml"
    spec.write_text("name: cmp\nstrategy: {kind: allreduce}\ntopology: {workers: {count: 2}}\n"
                    "training: {model: {kind: transformer, layers: 2, d_model: 32, heads: 2, seq_len: 16, vocab: 64},"
                    " optimizer: {kind: adamw, lr: 0.001}, steps: 4}\n")
    points, skipped, base, assumed = run_sweep(spec, "workers=2,8,1024", sets=("strategy.kind=allreduce,fsdp",))
    memory = {(p.series, p.workers): p.memory_bytes for p in points}
    replica = memory[("kind: allreduce", 2)]
    assert replica == memory[("kind: allreduce", 1024)] > 0
    activations = expected_memory(load_spec(spec))[0].activations
    assert 0 < activations < replica
    states = replica - activations
    for n in (2, 8, 1024):
        # 1/N of every tensor (FSDP pads a tensor's rows up to a multiple of N: a little more)
        assert states / n <= memory[("kind: fsdp", n)] - activations <= states / n * 1.25 + 4096, n
    tex = render_scaling(points, skipped, base, assumed)
    assert "memory per worker (expected)" in tex and "its activations, from the memory model" in tex


def test_a_python_models_sweep_point_has_no_expected_memory(repo):
    # Its sizes are known only once built, so the sweep's memory panel is left out, not guessed.
    from opentikz_dt.predict.sweep import worker_memory
    from opentikz_dt.spec import load_spec

    assert worker_memory(load_spec(repo / "examples" / "custom-model" / "spec.yaml")) is None
    assert worker_memory(load_spec(repo / "examples" / "allreduce-ring.yaml")) > 0
