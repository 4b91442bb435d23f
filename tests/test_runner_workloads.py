"""Real workloads in the runner: the built-in transformer/cnn and the user's own model and
data, checked against what the figures assume, cut into pipeline stages, refused with
one clear line when they cannot train, and trained to the same parameters as `single`.

Fast unit checks first; the multi-process runs (marked dist) keep models tiny and reuse
one run per strategy for all of its assertions.
"""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import pytest
import yaml

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from opentikz_dt.errors import RunError  # noqa: E402
from opentikz_dt.texsafe import escape_text  # noqa: E402
from opentikz_dt.runner.data import Data  # noqa: E402
from opentikz_dt.runner.entry import resolve_entry  # noqa: E402
from opentikz_dt.runner.launch import launch_run  # noqa: E402
from opentikz_dt.runner.model import build_model, build_optimizer, make_loss  # noqa: E402
from opentikz_dt.runner.split import stage_module  # noqa: E402
from opentikz_dt.spec import spec_from_data  # noqa: E402
from opentikz_dt.workload import workload_of  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
CUSTOM = REPO / "examples" / "custom-model"
TINY_TRANSFORMER = {"kind": "transformer", "layers": 2, "d_model": 16, "heads": 2, "seq_len": 8, "vocab": 64}
TINY_CNN = {"kind": "cnn", "layers": 2, "image_size": 8, "width": 4, "classes": 3}


def _spec(model, **training):
    return spec_from_data({"strategy": {"kind": "single"}, "training": {"model": model, **training}})


# ---------------------------------------------------------------- models vs workload.py


@pytest.mark.parametrize("model, sample", [
    (TINY_TRANSFORMER, lambda: torch.randint(64, (2, 8))),
    (TINY_CNN, lambda: torch.randn(2, 3, 8, 8)),
    ({"kind": "mlp", "layers": [8, 16, 4]}, lambda: torch.randn(2, 8)),
])
def test_built_models_are_what_the_figures_assume(model, sample):
    spec = _spec(model)
    wl, built = workload_of(spec), build_model(spec)
    assert [(n, tuple(p.shape)) for n, p in built.named_parameters()] == wl.tensors
    assert list(built.state_dict()) == wl.param_tensors  # no buffers: model.pt is the parameters
    with FlopCounterMode(display=False) as counter:
        built(sample())
    counted = counter.get_total_flops() / 2  # per sample (batch of 2)
    # workload.py also counts biases, norms and the embedding add; torch counts matmuls only
    assert counted <= wl.flops_per_sample <= 1.15 * counted


def test_pipeline_stages_keep_the_full_models_names_and_compute_the_same():
    cases = [(TINY_TRANSFORMER | {"layers": 3}, torch.randint(64, (2, 8)), 3),
             (TINY_CNN, torch.randn(2, 3, 8, 8), 2)]
    for model, x, stages in cases:
        full = build_model(_spec(model))
        parts = [stage_module(full, r, stages) for r in range(stages)]
        names = [set(p.state_dict()) for p in parts]
        assert set().union(*names) == set(full.state_dict())
        out = x
        for part in parts:
            out = part(out)
        assert torch.equal(out, full(x))
    transformer = build_model(_spec(TINY_TRANSFORMER | {"layers": 3}))
    first, _, last = (stage_module(transformer, r, 3) for r in range(3))
    assert "tok.weight" in first.state_dict() and "tok.weight" in last.state_dict()  # tied: both ends
    sequential = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    assert list(stage_module(sequential, 1, 2).state_dict()) == ["2.weight", "2.bias"]


def test_pipeline_refuses_a_model_it_cannot_cut():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(4, 4)

        def forward(self, x):
            return self.a(x)

    with pytest.raises(RunError) as caught:
        stage_module(Net(), 0, 2)
    assert str(caught.value) == (
        "training.model: a pipeline cuts a python model only when it is an nn.Sequential (its layers in order); "
        "Net is not: return nn.Sequential(...) of its layers from the factory, or use a data-parallel strategy")


def test_entry_is_looked_up_next_to_the_spec_first(tmp_path):
    spec = _spec(TINY_TRANSFORMER)
    for name, value in (("a", 1), ("b", 2)):  # two specs' own `wlmod.py` in one process
        (tmp_path / name).mkdir()
        (tmp_path / name / "wlmod.py").write_text(f"def answer():\n    return {value}\n", encoding="utf-8")
    assert resolve_entry("wlmod:answer", spec, ("training",), tmp_path / "a")() == 1
    assert resolve_entry("wlmod:answer", spec, ("training",), tmp_path / "b")() == 2
    assert resolve_entry("json:dumps", spec, ("training",), tmp_path / "a")([1]) == "[1]"  # then sys.path


# ---------------------------------------------------------------- bad input, before any spawn

def _write_case(tmp_path, model=None, dataset=None, extra_py="", strategy=None, **training) -> Path:
    shutil.copy(CUSTOM / "model.py", tmp_path / "model.py")
    if extra_py:
        with open(tmp_path / "model.py", "a", encoding="utf-8") as f:
            f.write("\n\n" + extra_py + "\n")
    data = {"strategy": strategy or {"kind": "allreduce"}, "topology": {"workers": {"count": 2}},
            "training": {"model": model or {"kind": "python", "entry": "model:build"},
                         "dataset": dataset or {"kind": "python", "entry": "model:blobs"},
                         "batch_size": 16, "steps": 2, **training},
            "runtime": {"device": "cpu", "timeout_s": 20}}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


BAD = {
    "entry-missing": (dict(model={"kind": "python", "entry": "nosuch.mod:build"}),
                      "{spec}:9:12: training.model.entry: cannot import 'nosuch.mod' (looked in {dir} and sys.path)"),
    "factory-raises": (dict(model={"kind": "python", "entry": "model:broken"},
                            extra_py="def broken():\n    raise ValueError('width must be even')"),
                       "{spec}:9:12: training.model.entry: model:broken raised ValueError: width must be even"),
    "not-a-module": (dict(model={"kind": "python", "entry": "model:blobs"}),
                     "{spec}:9:12: training.model.entry: model:blobs returned Blobs, not a torch nn.Module"),
    "shapes": (dict(dataset={"kind": "python", "entry": "model:blobs", "args": {"inputs": 5}}),
               "{spec}:8:5: training.model: the model does not take the dataset's samples (a batch of 2: "
               "x [2, 5] float32, y [2] int64): RuntimeError: mat1 and mat2 shapes cannot be multiplied "
               "(2x5 and 16x64)"),
    "empty": (dict(dataset={"kind": "python", "entry": "model:blobs", "args": {"samples": 0}}),
              "{spec}:11:5: training.dataset: the dataset is empty"),
    "too-small": (dict(dataset={"kind": "python", "entry": "model:blobs", "args": {"samples": 20}}),
                  "{spec}:11:5: training.dataset: the dataset has 20 samples, fewer than one global batch "
                  "(16 x 2 = 32)"),
    "not-utf8": (dict(model=TINY_TRANSFORMER | {"vocab": 256}, dataset={"kind": "text", "path": "corpus.txt"}),
                 "{dir}/corpus.txt:2: not UTF-8 text (byte 6: b'\\xff'); a text dataset is a UTF-8 file"),
    "pickled-pt": (dict(model={"kind": "mlp", "layers": [4, 3]}, dataset={"kind": "file", "path": "d.pt"}),
                   "{dir}/d.pt: refused: this .pt holds Python objects that only weights_only=False would load"),
    "unsplittable": (dict(model={"kind": "python", "entry": "model:wrapped"}, strategy={"kind": "pipeline"},
                          extra_py="class Wrapped(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                                   "        self.net = build()\n    def forward(self, x):\n"
                                   "        return self.net(x)\n\n\ndef wrapped():\n    return Wrapped()"),
                     "{spec}:8:5: training.model: a pipeline cuts a python model only when it is an nn.Sequential"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_one_line_before_anything_is_spawned(tmp_path, case):
    kwargs, expected = BAD[case]
    spec = _write_case(tmp_path, **kwargs)
    # long enough for one global batch (validate counts samples from the size), bad from byte 6
    (tmp_path / "corpus.txt").write_bytes(b"hello\n\xff\xfe more text" + b" and more text" * 30)
    import argparse

    torch.save({"x": torch.zeros(4, 4), "y": argparse.Namespace(labels=[0, 1])}, tmp_path / "d.pt")
    out = tmp_path / "run"
    with pytest.raises(RunError) as caught:
        launch_run(spec, out=out, progress=False, echo=lambda line: None)
    message = str(caught.value)
    assert message.startswith(expected.format(spec=spec, dir=tmp_path.resolve())), message
    assert "\n" not in message and "Traceback" not in message
    assert not out.exists()  # nothing half-written


def test_cli_bad_model_exits_non_zero_with_one_line(tmp_path):
    from click.testing import CliRunner

    from opentikz_dt.cli import main

    spec = _write_case(tmp_path, model={"kind": "python", "entry": "nosuch:build"})
    result = CliRunner().invoke(main, ["run", str(spec), "--out", str(tmp_path / "run")])
    assert result.exit_code == 1  # the preflight refuses it: invalid input, as validate's
    lines = [line for line in result.output.splitlines() if not line.startswith("dtgen run: ")]
    assert len(lines) == 1 and "cannot import 'nosuch'" in lines[0] and "Traceback" not in result.output


# ---------------------------------------------------------------- numerics (real processes)

def _numerics_training(model: str) -> dict:
    if model == "transformer":
        return {"model": dict(TINY_TRANSFORMER), "dataset": {"kind": "synthetic", "samples": 256}}
    return {"model": {"kind": "python", "entry": "model:build", "loss": "model:smooth_loss",
                      "args": {"inputs": 8, "hidden": 16, "classes": 4}},
            "dataset": {"kind": "python", "entry": "model:blobs", "args": {"samples": 256, "inputs": 8}}}


STRATEGIES = {  # (strategy, workers, servers, batch per worker); the global batch is 16 everywhere
    "ps-sync": ({"kind": "parameter-server", "sync": "sync"}, 2, 2, 8),
    "ring": ({"kind": "allreduce", "algorithm": "ring"}, 2, 0, 8),
    "1f1b": ({"kind": "pipeline", "schedule": "1f1b", "microbatches": 2}, 2, 0, 16),
}
STEPS = 3


def _reference(training: dict, spec_dir: Path):
    """A hand-written single-device loop on the global batch (no dtgen strategy code)."""
    data = {"strategy": {"kind": "single"},
            "training": {**copy.deepcopy(training), "batch_size": 16, "steps": STEPS,
                         "optimizer": {"lr": 0.1, "momentum": 0.9}}}
    spec = spec_from_data(data)
    model = build_model(spec, "cpu", spec_dir)
    opt, loss_fn = build_optimizer(spec, model.parameters()), make_loss(spec, spec_dir)
    batches = Data(spec, "cpu", None, spec_dir)
    losses = []
    for step in range(STEPS):
        x, y = batches.batch(step, 0, 1)
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return model.state_dict(), losses, build_model(spec, "cpu", spec_dir).state_dict()


@pytest.mark.dist
@pytest.mark.parametrize("model", ["transformer", "python"])
def test_strategies_match_a_single_device_loop_on_the_global_batch(tmp_path, model):
    shutil.copy(CUSTOM / "model.py", tmp_path / "model.py")
    training = _numerics_training(model)
    want, want_losses, init = _reference(training, tmp_path)
    assert any((init[n] - want[n]).abs().max().item() > 1e-3 for n in want)  # the model moved
    for name, (strategy, workers, servers, batch) in STRATEGIES.items():
        data = {"name": f"{model}-{name}", "strategy": strategy,
                "topology": {"workers": {"count": workers}, "servers": {"count": servers}},
                "training": {**copy.deepcopy(training), "batch_size": batch, "steps": STEPS,
                             "optimizer": {"lr": 0.1, "momentum": 0.9}},
                "runtime": {"backend": "gloo", "device": "cpu", "timeout_s": 30}}
        spec = tmp_path / f"{name}.yaml"
        spec.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
        run = launch_run(spec, out=tmp_path / "runs" / name, progress=False, echo=lambda line: None)
        got = torch.load(run.run_dir / "model.pt", weights_only=True)
        assert list(got) == list(want), name
        for key in want:
            assert torch.allclose(got[key], want[key], atol=1e-5, rtol=1e-4), (
                f"{name}: {key} max diff {(got[key] - want[key]).abs().max().item():.3g}")
        assert run.metrics["loss"] == pytest.approx(want_losses, rel=1e-4), name
        assert run.run["model"]["params"] == sum(t.numel() for t in want.values())
        if name == "ps-sync":  # the shards own the real model's tensors, split between them
            parts = [set(torch.load(p, weights_only=True)) for p in sorted((run.run_dir / "model_parts").glob("*.pt"))]
            assert len(parts) == 2 and all(parts) and set.union(*parts) == set(want)


@pytest.mark.dist
@pytest.mark.latex
def test_custom_model_example_runs_and_draws_its_measured_figures(tmp_path):
    from opentikz_dt.measured.figures import write_run_figures

    run = launch_run(CUSTOM / "spec.yaml", out=tmp_path / "run", steps=6, progress=False, echo=lambda line: None)
    assert run.run["status"] == "ok" and run.run["model"]["kind"] == "python"
    assert run.metrics["loss"][-1] < run.metrics["loss"][0]
    written = write_run_figures(run.run_dir, tmp_path / "figures", ("pdf",))
    pdfs = sorted(p.name for p in written if p.suffix == ".pdf")
    assert "measured-run-timeline.pdf" in pdfs and "measured-run-topology.pdf" in pdfs  # named by the run
    assert all(p.read_bytes().startswith(b"%PDF") for p in written if p.suffix == ".pdf")
    # the topology note states the real model, known from the run (a python model's size is not in the spec)
    from opentikz_dt.measured.figures import render_run_figures
    from opentikz_dt.measured.run import load_run

    tex = render_run_figures(load_run(run.run_dir), only=("measured-topology",))["measured-topology"]
    params = run.run["model"]["params"]
    assert params == 16 * 64 + 64 + 2 * 64 + 64 * 64 + 64 + 64 * 4 + 4  # build(16, 64, 4) in model.py
    assert "{model:build: 5.6 k parameters, 22.5 kB per gradient}" in tex
    # the two shards list the built model's own tensors, as the run assigned them
    shards = run.run["model"]["shards"]
    owned = sum(shards.values(), [])
    assert sorted(shards) == ["ps1", "ps2"] and len(owned) == len(set(owned)) == 8  # 4 modules x (weight, bias)
    assert "built model" not in tex and all(escape_text(name) in tex for name in shards["ps1"][:2])


@pytest.mark.gpu
@pytest.mark.dist
def test_gpu_ranks_share_a_gpu_over_gloo_and_use_nccl_alone(tmp_path):
    """Skipped without CUDA. More ranks than GPUs: round-robin, gloo, host staging (ring
    all-reduce: dtgen's own point-to-point messages; native: DDP); one rank: nccl."""
    gpus = torch.cuda.device_count()
    cases = [("ring", {"kind": "allreduce", "algorithm": "ring"}, gpus + 1, "gloo"),
             ("native", {"kind": "allreduce"}, gpus + 1, "gloo"),
             ("single", {"kind": "single"}, 1, "nccl")]
    for name, strategy, workers, backend in cases:
        data = {"name": f"gpu-{name}", "strategy": strategy, "topology": {"workers": {"count": workers}},
                "training": {"model": dict(TINY_TRANSFORMER), "dataset": {"samples": 256}, "batch_size": 8,
                             "steps": 4},
                "runtime": {"device": "cuda", "timeout_s": 60}}
        spec = tmp_path / f"{name}.yaml"
        spec.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
        lines = []
        run = launch_run(spec, out=tmp_path / name, progress=False, echo=lines.append)
        assert lines[0].startswith("dtgen run: ") and backend in lines[0]
        assert [r["device"] for r in run.run["ranks"]] == [f"cuda:{r % gpus}" for r in range(workers)]
        assert run.run["backend"] == backend
        assert set(run.run["hardware"]["gpus"]) == {str(g) for g in range(min(gpus, workers))}  # the figures' note
        assert all(loss == loss for loss in run.metrics["loss"])  # finite, not NaN
