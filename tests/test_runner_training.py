"""training.precision, optimizer, grad_clip, lr_schedule and compile in the runner: the
pieces without processes (schedule, fp16 skipping, the out-of-memory line), and runs
that stop on a nan loss, refuse fp16 on the CPU, and train compiled.

The numerics of every strategy with these settings are in tests/test_runner_numerics.py.
"""

import json
import math
from types import SimpleNamespace

import pytest
import yaml
from click.testing import CliRunner

torch = pytest.importorskip("torch")

from opentikz_dt.cli import main  # noqa: E402
from opentikz_dt.errors import RunError  # noqa: E402
from opentikz_dt.runner.faults import classify, describe_out_of_memory  # noqa: E402
from opentikz_dt.runner.optim import Stepper, build_optimizer  # noqa: E402
from opentikz_dt.runner.precision import LossScaler  # noqa: E402
from opentikz_dt.runner.testing import run_small, small_spec_data  # noqa: E402
from opentikz_dt.spec import spec_from_data  # noqa: E402
from opentikz_dt.training_rules import lr_at  # noqa: E402


def _training(**over):
    return spec_from_data(small_spec_data("single", training=over)).training


def test_lr_schedule_warmup_then_decay():
    cos = _training(steps=11, optimizer={"lr": 1.0}, lr_schedule={"kind": "cosine", "warmup_steps": 2, "min_lr": 0.1})
    assert [lr_at(cos, s) for s in (0, 1)] == [0.5, 1.0]
    assert lr_at(cos, 2) == pytest.approx(1.0)  # the decay starts at the peak ...
    assert lr_at(cos, 6) == pytest.approx(0.55)  # ... is halfway down halfway ...
    assert lr_at(cos, 10) == pytest.approx(0.1)  # ... and ends at min_lr on the last step
    lin = _training(steps=5, optimizer={"lr": 1.0}, lr_schedule={"kind": "linear"})
    assert [lr_at(lin, s) for s in range(5)] == pytest.approx([1.0, 0.75, 0.5, 0.25, 0.0])
    const = _training(steps=5, optimizer={"lr": 0.3}, lr_schedule={"warmup_steps": 3})
    assert [lr_at(const, s) for s in range(5)] == pytest.approx([0.1, 0.2, 0.3, 0.3, 0.3])


def test_optimizer_kinds_and_their_settings():
    params = [torch.nn.Parameter(torch.zeros(2))]
    spec = spec_from_data(small_spec_data("single", training={"optimizer": {
        "kind": "adamw", "lr": 0.01, "betas": [0.8, 0.9], "eps": 1e-6}}))
    opt = build_optimizer(spec, params)
    assert type(opt) is torch.optim.AdamW
    group = opt.param_groups[0]
    assert (group["betas"], group["eps"], group["weight_decay"]) == ((0.8, 0.9), 1e-6, 0.01)  # torch's adamw default
    sgd = build_optimizer(spec_from_data(small_spec_data("single")), params)
    assert type(sgd) is torch.optim.SGD and sgd.param_groups[0]["momentum"] == 0.9


class _Ctx(SimpleNamespace):
    def log(self, msg):
        self.logged.append(msg)


def _ctx(**training):
    spec = spec_from_data(small_spec_data("single", training=training, runtime={"device": "auto"}))
    return _Ctx(spec=spec, device=torch.device("cpu"), logged=[],
                metrics=SimpleNamespace(skipped=[], skipped_step=lambda s: None))


def _part(value: float):
    p = torch.nn.Parameter(torch.ones(3))
    p.grad = torch.full((3,), value)
    return p


def test_fp16_overflow_on_one_part_skips_the_step_everywhere():
    """Two ranks each holding half of a model (a pipeline's stages, a PS's shards): the
    first's gradients are finite, the second's overflowed. Both skip, both halve the
    scale; a later finite step is taken, unscaled, clipped by the global norm."""
    ctx = _ctx(precision="fp16", grad_clip=1.0, optimizer={"kind": "sgd", "lr": 1.0, "momentum": 0.0})
    parts = [_part(2.0 ** 16), _part(float("inf"))]
    box = {}

    def all_reduce(local):  # every rank gets the sum over both parts (set below, per step)
        return box["total"].clone()

    steppers = [Stepper(ctx, torch.optim.SGD([p], lr=1.0), [p], reduce_sq=all_reduce, scaler=LossScaler())
                for p in parts]
    box["total"] = torch.tensor(float("inf"), dtype=torch.float64)
    assert [s.step(0) for s in steppers] == [False, False]
    assert [s.scaler.scale for s in steppers] == [2.0 ** 15, 2.0 ** 15]
    assert all(torch.equal(p.data, torch.ones(3)) for p in parts)  # no update
    assert [s.skipped for s in steppers] == [[0], [0]]
    # Next step: gradients 2**15 at scale 2**15 -> 1.0 each after unscaling; global norm sqrt(6).
    for p in parts:
        p.grad = torch.full((3,), 2.0 ** 15)
    box["total"] = torch.tensor(6.0, dtype=torch.float64)
    assert [s.step(1) for s in steppers] == [True, True]
    want = 1.0 - 1.0 / (math.sqrt(6) + 1e-6)  # lr 1, clipped to norm 1: each of 6 values 1/sqrt(6)
    assert all(torch.allclose(p.data, torch.full((3,), want)) for p in parts)
    assert [s.scaler.good_steps for s in steppers] == [1, 1]


def test_out_of_memory_is_one_line_naming_gpu_memory_and_what_to_lower():
    class OutOfMemoryError(RuntimeError):  # torch.OutOfMemoryError, without a GPU
        pass

    exc = OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB "
                           "of which 1.10 GiB is free. Including non-PyTorch memory, this process has 78.08 GiB "
                           "memory in use. Of the allocated memory 77.00 GiB is allocated by PyTorch")
    assert classify(exc) == "oom"
    assert describe_out_of_memory(exc, "cuda:0", "NVIDIA H100 80GB HBM3") == (
        "cuda:0 (NVIDIA H100 80GB HBM3): asked for 2.00 GiB, 1.10 GiB free; lower training.batch_size, "
        "training.model.seq_len (or the model's size), or use training.precision bf16")
    assert classify(RuntimeError("CUDA error: out of range")) == "error"


def test_a_port_this_rank_could_not_listen_on_is_its_own_failure_not_a_peers():
    class DistNetworkError(RuntimeError):  # torch.distributed's, by name as classify matches it
        pass

    taken = DistNetworkError("The server socket has failed to listen on any local network address. port: 40825, "
                             "useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use")
    assert classify(taken) == "error"
    assert classify(DistNetworkError("Connection reset by peer")) == "comm"


NAN_MODEL = '''
import torch
from torch import nn


class Blows(nn.Module):
    """A linear model whose output turns nan from its fifth forward on (step 4)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 4)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        y = self.lin(x)
        return y * float("nan") if self.calls > 4 else y


def build():
    return Blows()
'''


@pytest.mark.dist
def test_nan_loss_stops_the_run_naming_step_rank_and_precision(tmp_path):
    (tmp_path / "blows.py").write_text(NAN_MODEL, encoding="utf-8")
    data = small_spec_data("single", training={"model": {"kind": "python", "entry": "blows:build"},
                                               "dataset": {"shape": [16], "classes": 4}, "steps": 8,
                                               "precision": "bf16"},
                           runtime={"checkpoint_every": 2})
    data["training"]["model"] = {"kind": "python", "entry": "blows:build"}
    spec_path = tmp_path / "blows.yaml"
    spec_path.write_text(yaml.safe_dump(data), encoding="utf-8")
    from opentikz_dt.runner.launch import launch_run

    out = tmp_path / "run"
    with pytest.raises(RunError) as err:
        launch_run(spec_path, out=out, progress=False, echo=lambda line: None)
    assert str(err.value) == (
        "rank 0 (worker w1) diverged at step 4: the loss is nan in training.precision bf16; the run stopped after "
        "step 4's update (each loss is read a step later, so that no step waits for the device) (lower "
        "training.optimizer.lr, set training.grad_clip, or use a wider precision)\n"
        f"log: {out.resolve()}/logs/rank0.log\nrun directory: {out} (partial trace kept)")
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "failed" and run["training"]["precision"] == "bf16"
    steps = {e["args"]["step"] for e in json.loads((out / "trace.json").read_text())["traceEvents"] if e["ph"] == "X"}
    assert {0, 1, 2, 3, 4} <= steps  # the trace is kept, the failing step's forward included
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step1", "step3"]


def test_fp16_on_the_cpu_is_refused_before_spawning(tmp_path):
    data = small_spec_data("single", training={"precision": "fp16"}, runtime={"device": "auto"})
    spec = tmp_path / "half.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    result = CliRunner().invoke(main, ["run", str(spec), "--out", str(tmp_path / "run")])
    assert result.exit_code == 1  # invalid input, as a spec error (docs/cli.md: exit codes)
    line = next(ln for ln in result.output.splitlines() if "training.precision" in ln)
    assert line.startswith(f"dtgen: error: {spec}:") and ": training.precision: fp16 needs a GPU" in line
    assert "Traceback" not in result.output
    assert not (tmp_path / "run").exists()


@pytest.mark.dist
def test_compiled_single_run_matches_the_eager_one(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))  # not the shared /tmp
    base = {"training": {"steps": 3, "optimizer": {"kind": "adamw", "lr": 0.01}, "precision": "bf16"}}
    compiled = run_small(small_spec_data("single", training={**base["training"], "compile": True}), tmp_path)
    eager = run_small(small_spec_data("single", **base), tmp_path)
    assert compiled.run["training"]["compile"] is True
    assert any((tmp_path / "inductor").rglob("*.py"))  # inductor generated code: the rank compiled
    got, want = torch.load(compiled.run_dir / "model.pt"), torch.load(eager.run_dir / "model.pt")
    for name in want:  # inductor fuses differently: bf16 rounding differs a little
        assert torch.allclose(got[name], want[name], atol=2e-3), name
    log = (compiled.run_dir / "logs" / "rank0.log").read_text()
    assert "Traceback" not in log


@pytest.mark.parametrize("precision, advice", [("bf16", "fp16 or fp32"), ("tf32", "fp32")])
def test_precision_a_gpu_cannot_do_is_refused_naming_the_key(tmp_path, monkeypatch, precision, advice):
    from opentikz_dt.runner import precision as prec
    from opentikz_dt.runner.placement import Placement
    from opentikz_dt.spec import load_spec

    monkeypatch.setattr(prec, "_gpu_capability", lambda: ("Tesla V100-SXM2-16GB", (7, 0)))  # no GPU needed
    path = tmp_path / "old-gpu.yaml"
    path.write_text(f"strategy: {{kind: single}}\ntraining:\n  precision: {precision}\n", encoding="utf-8")
    gpu = Placement("cuda", "nccl", 1, "1 rank on 1 GPU, one each, with nccl")
    with pytest.raises(RunError) as err:
        prec.check_precision(load_spec(path), gpu)
    assert str(err.value) == (f"{path}:3:14: training.precision: {precision} needs a GPU of compute capability 8.0 "
                              f"or later; Tesla V100-SXM2-16GB has 7.0: use {advice}")
    monkeypatch.setattr(prec, "_gpu_capability", lambda: ("NVIDIA H100 80GB HBM3", (9, 0)))
    prec.check_precision(load_spec(path), gpu)  # an H100 does both


def test_out_of_memory_failure_reads_as_one_line_naming_the_rank(tmp_path):
    from opentikz_dt.runner.monitor import describe_failure
    from opentikz_dt.runner.worker import _write_failure

    class OutOfMemoryError(RuntimeError):
        pass

    (tmp_path / "failure").mkdir()
    exc = OutOfMemoryError("CUDA out of memory. Tried to allocate 512.00 MiB. GPU 0 has a total capacity of "
                           "79.19 GiB of which 20.00 MiB is free.")
    line = describe_out_of_memory(exc, "cuda:0", "NVIDIA H100 80GB HBM3")
    metrics = SimpleNamespace(started_step=3)
    _write_failure(tmp_path, 0, "worker", "w1", classify(exc), exc, metrics, line)
    failure = describe_failure(tmp_path, [("worker", "w1")], {0: 1}, None)
    assert failure["message"].splitlines()[0] == (
        "rank 0 (worker w1) ran out of GPU memory at step 3: cuda:0 (NVIDIA H100 80GB HBM3): asked for 512.00 MiB, "
        "20.00 MiB free; lower training.batch_size, training.model.seq_len (or the model's size), "
        "or use training.precision bf16")
    assert "Traceback" not in failure["message"] and "OutOfMemoryError" not in failure["message"]


def test_compile_on_a_cpu_without_a_compiler_is_refused_naming_the_key(tmp_path, monkeypatch):
    import shutil

    from opentikz_dt.runner import precision as prec
    from opentikz_dt.runner.placement import Placement
    from opentikz_dt.spec import load_spec

    path = tmp_path / "compiled.yaml"
    path.write_text("strategy: {kind: single}\ntraining:\n  compile: true\n", encoding="utf-8")
    cpu = Placement("cpu", "gloo", 0, "1 rank on the CPU with gloo")
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(RunError) as err:
        prec.check_compile(load_spec(path), cpu)
    assert str(err.value) == (f"{path}:3:12: training.compile: torch.compile on the CPU needs a C++ compiler "
                              "(g++, c++ or clang++ on PATH, or CXX) and none was found; install one or set "
                              "compile: false")
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}" if name == "g++" else None)
    prec.check_compile(load_spec(path), cpu)


def test_every_rank_that_failed_on_its_own_keeps_its_exit_code_whichever_the_launcher_saw_first(tmp_path):
    """The launcher reports one exit code: the first rank it sees exit. A peer that failed a
    few milliseconds after the rank at fault can be that one; the rank at fault is still named
    with its own code, from its report or from faulthandler's line in its log."""
    from opentikz_dt.runner.monitor import describe_failure
    from opentikz_dt.runner.worker import _write_failure

    roles = [("worker", "w1"), ("worker", "w2"), ("worker", "w3")]
    (tmp_path / "failure").mkdir()
    (tmp_path / "logs").mkdir()
    crash = RuntimeError("injected crash at step 3")
    _write_failure(tmp_path, 2, "worker", "w3", classify(crash), crash, SimpleNamespace(started_step=3), exit_code=1)
    failure = describe_failure(tmp_path, roles, {0: 1}, None)  # rank 0 exited first, after its peer closed
    assert failure["rank"] == 2 and failure["exit_code"] == 1
    assert failure["exit_codes"] == {0: 1, 2: 1}

    (tmp_path / "failure" / "rank2.json").unlink()  # a crash in native code writes no report
    (tmp_path / "logs" / "rank1.log").write_text(
        "dtgen: rank 1 attempt 0\nFatal Python error: Segmentation fault\n\nThread 0x01 (most recent call first):\n")
    failure = describe_failure(tmp_path, roles, {0: 1}, None)
    assert failure["message"].splitlines()[0] == (
        "rank 1 (worker w2) was killed by SIGSEGV (a crash in native code; its log holds the Python stack)")
    assert failure["exit_codes"] == {0: 1, 1: -11}
