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
