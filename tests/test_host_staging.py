"""GPUs shared over gloo: the final gather of sharded models (runner/host_gather.py) and
torch's pipeline messages (runner/stage_host.py) go through host memory. Without a GPU
the branch choice is checked as a pure function, and real runs with the host path
forced on the CPU (DTGEN_FORCE_HOST_STAGING=1: separate host buffers, so a receive or a
gather that was not copied back would change the model) must give exactly the model
the direct path gives, and `single`'s within the numerics tests' tolerance."""

import pytest

torch = pytest.importorskip("torch")

from opentikz_dt.runner.host_gather import gather_through_host  # noqa: E402
from opentikz_dt.runner.placement import check_strategy, choose_placement  # noqa: E402
from opentikz_dt.runner.stage_host import COST, FORCE_ENV, needed  # noqa: E402
from opentikz_dt.runner.testing import SYNC_CASES, run_small, single_reference, small_spec_data  # noqa: E402
from opentikz_dt.spec import spec_from_data  # noqa: E402


def test_the_host_path_is_taken_for_gpu_tensors_over_gloo_only(monkeypatch):
    monkeypatch.delenv(FORCE_ENV, raising=False)
    assert gather_through_host("cuda", "gloo") and needed("cuda", "gloo")
    for device, backend in (("cuda", "nccl"), ("cpu", "gloo")):
        assert not gather_through_host(device, backend) and not needed(device, backend)
    monkeypatch.setenv(FORCE_ENV, "1")
    assert needed("cpu", "gloo")
    # the placements that lead there: ranks sharing a GPU (gloo), or gloo asked for with a GPU each
    shared = choose_placement("cuda", "auto", 4, 1)
    assert (shared.device, shared.backend, shared.stage_through_host) == ("cuda", "gloo", True)
    own = choose_placement("cuda", "auto", 4, 4)
    assert (own.backend, own.stage_through_host) == ("nccl", False)
    assert choose_placement("cuda", "gloo", 4, 4).stage_through_host


def test_every_strategy_runs_on_a_shared_gpu_a_pipeline_saying_its_cost():
    shared = choose_placement("cuda", "auto", 4, 1)
    for name in ("fsdp", "tensor-mlp", "mesh-fsdp-tensor", "allreduce-native", "central-storage"):
        kind, over, _ = SYNC_CASES[name]
        assert check_strategy(shared, spec_from_data(small_spec_data(kind, **over))) is None, name
    for name in ("pipeline-1f1b", "mesh-data-pipeline"):
        kind, over, _ = SYNC_CASES[name]
        spec = spec_from_data(small_spec_data(kind, **over))
        assert check_strategy(shared, spec) == COST
        assert check_strategy(choose_placement("cuda", "auto", 4, 4), spec) is None  # nccl: its own GPU
    assert COST.startswith("pipeline stages exchange activations and gradients through host memory")


FORCED = ("fsdp", "tensor-mlp", "mesh-fsdp-tensor", "pipeline-1f1b", "mesh-data-pipeline")


@pytest.mark.dist
@pytest.mark.parametrize("name", FORCED)
def test_the_host_path_forced_on_the_cpu_changes_nothing(name, tmp_path, monkeypatch):
    kind, over, dp = SYNC_CASES[name]
    data = small_spec_data(kind, **over)
    monkeypatch.delenv(FORCE_ENV, raising=False)
    direct = run_small(data, tmp_path / "direct", cache=False)
    monkeypatch.setenv(FORCE_ENV, "1")
    staged = run_small(data, tmp_path / "staged", cache=False)
    monkeypatch.delenv(FORCE_ENV)
    got, want = (torch.load(r.run_dir / "model.pt") for r in (staged, direct))
    assert list(got) == list(want)
    for key in want:
        assert torch.equal(got[key], want[key]), f"{name} {key}: {(got[key] - want[key]).abs().max().item():.3g}"
    assert staged.metrics["loss"] == direct.metrics["loss"]
    ref = torch.load(single_reference(dp, steps=staged.metrics["steps"], root=tmp_path / "single").run_dir / "model.pt")
    for key in ref:  # tests/test_runner_numerics.py's fp32 tolerance
        assert torch.allclose(got[key], ref[key], atol=1e-5, rtol=1e-4), key
