"""Device placement: which device and backend each rank gets, as a pure function of the
request and the GPU count (runner/placement.py). No GPU is needed to test the choice;
the GPU runs themselves are marked `gpu`."""

import pytest

from opentikz_dt.errors import RunError
from opentikz_dt.runner.placement import check_strategy, choose_placement
from opentikz_dt.runner.testing import TINY_TRANSFORMER, small_spec_data
from opentikz_dt.spec import spec_from_data


def test_cpu_when_no_gpu_or_asked():
    p = choose_placement("auto", "auto", 4, 0)
    assert (p.device, p.backend, p.gpus) == ("cpu", "gloo", 0)
    assert p.reason == "4 ranks on the CPU with gloo (runtime.device auto: no CUDA GPU)"
    assert [p.device_name(r) for r in range(2)] == ["cpu", "cpu"]
    assert choose_placement("cpu", "auto", 2, 8).device == "cpu"
    assert choose_placement("auto", "gloo", 2, 8).device == "cpu"  # gloo asked for: the CPU, as before


def test_nccl_only_when_every_rank_has_its_own_gpu():
    p = choose_placement("cuda", "auto", 4, 4)
    assert (p.device, p.backend) == ("cuda", "nccl")
    assert [p.device_name(r) for r in range(4)] == ["cuda:0", "cuda:1", "cuda:2", "cuda:3"]
    assert not p.stage_through_host
    assert p.reason == "4 ranks on 4 GPUs, one each, with nccl (runtime.device cuda)"
    assert choose_placement("auto", "auto", 1, 1).backend == "nccl"


def test_fewer_gpus_than_ranks_shares_them_round_robin_over_gloo():
    p = choose_placement("cuda", "auto", 4, 1)
    assert (p.device, p.backend, p.gpus) == ("cuda", "gloo", 1)
    assert [p.gpu_of(r) for r in range(4)] == [0, 0, 0, 0]
    assert p.stage_through_host
    assert p.reason == ("4 ranks round-robin on 1 GPU (up to 4 per GPU) with gloo, tensors staged through host "
                        "memory: nccl needs one GPU per rank (runtime.device cuda)")
    q = choose_placement("auto", "auto", 5, 2)
    assert [q.gpu_of(r) for r in range(5)] == [0, 1, 0, 1, 0]
    assert "up to 3 per GPU" in q.reason and "runtime.device auto: 2 GPUs found" in q.reason


def test_gloo_on_own_gpus_when_asked():
    p = choose_placement("cuda", "gloo", 2, 2)
    assert (p.device, p.backend, p.stage_through_host) == ("cuda", "gloo", True)


@pytest.mark.parametrize("device, backend, ranks, gpus, message", [
    ("cuda", "auto", 2, 0, "runtime.device is cuda but CUDA is not available on this machine"),
    ("cpu", "nccl", 2, 2, "runtime.backend nccl needs runtime.device cuda (NCCL runs on GPUs only)"),
    ("cuda", "nccl", 4, 1, "runtime.backend nccl needs one GPU per rank: 4 ranks on 1 GPU of this node; "
                           "use backend auto (or gloo) to share the GPUs"),
])
def test_impossible_requests_are_one_clear_line(device, backend, ranks, gpus, message):
    with pytest.raises(RunError) as caught:
        choose_placement(device, backend, ranks, gpus)
    assert str(caught.value) == message


def _spec(kind: str, workers: int, **strategy):
    data = small_spec_data(kind, topology={"workers": {"count": workers}}, strategy=strategy)
    if kind == "tensor" or strategy.get("parallelism", {}).get("tensor", 1) > 1:
        data["training"]["model"] = dict(TINY_TRANSFORMER)
    return spec_from_data(data)


def test_every_strategy_may_share_gpus_a_pipeline_saying_what_it_costs():
    """Since the final gather and the pipeline schedules' messages go through host memory
    (runner/host_gather.py, runner/stage_host.py), nothing is refused on a shared GPU;
    a pipeline's first line says the cost (tests/test_host_staging.py runs them)."""
    from opentikz_dt.runner.stage_host import COST

    def shared(spec):  # every rank on one GPU
        return choose_placement("cuda", "auto", spec.topology.workers.count, 1)

    def own(spec):  # a GPU per rank
        return choose_placement("cuda", "auto", spec.topology.workers.count, spec.topology.workers.count)

    pipeline = _spec("pipeline", 3)
    assert check_strategy(own(pipeline), pipeline) is None  # nccl: no host copies
    assert check_strategy(shared(pipeline), pipeline) == COST
    mesh_2d = _spec("mesh", 4, parallelism={"data": 2, "tensor": 2}, data_parallel="fsdp")
    for spec in (_spec("allreduce", 4), _spec("fsdp", 4), _spec("tensor", 2), mesh_2d):
        assert check_strategy(own(spec), spec) is None
        assert check_strategy(shared(spec), spec) is None
    mesh_3d = _spec("mesh", 4, parallelism={"pipeline": 2, "data": 2}, microbatches=2)
    assert check_strategy(own(mesh_3d), mesh_3d) is None
    assert check_strategy(shared(mesh_3d), mesh_3d) == COST