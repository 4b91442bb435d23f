"""NCCL with one GPU per rank, checked without a GPU: for 2 hosts x 8 GPUs, what the
launch asks of torch's elastic launcher, the placement and device each rank takes, the
environment a rank sets before its communicator exists (NCCL_ALGO), and the calls that
create its process groups, each exactly as they must be. torch.cuda and
init_process_group are replaced by recorders; the functions under test are the ones a
real rank runs (runner/launch.py, runner/dist.py, runner/worker.py's order)."""

import datetime

import pytest

torch = pytest.importorskip("torch")

from opentikz_dt.runner import dist as rdist  # noqa: E402
from opentikz_dt.runner.placement import choose_placement  # noqa: E402
from opentikz_dt.runner.strategies import load_strategy  # noqa: E402
from opentikz_dt.runner.testing import small_spec_data  # noqa: E402
from opentikz_dt.spec import spec_from_data  # noqa: E402

HOSTS, GPUS = 2, 8
WORLD = HOSTS * GPUS


def _spec(algorithm="native", **runtime):
    return spec_from_data(small_spec_data("allreduce", topology={"workers": {"count": WORLD}, "hosts": HOSTS},
                                          strategy={"algorithm": algorithm},
                                          runtime={"device": "auto", "backend": "auto", "timeout_s": 30, **runtime}))


class _Recorder:
    def __init__(self):
        self.calls = []

    def __call__(self, name):
        def record(*args, **kwargs):
            self.calls.append((name, args, kwargs))
            return f"<{name} {len(self.calls)}>"

        return record


@pytest.fixture
def eight_gpus(monkeypatch):
    """This 'node' has 8 CUDA GPUs; set_device and the process-group calls are recorded."""
    rec = _Recorder()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: GPUS)
    monkeypatch.setattr(torch.cuda, "set_device", rec("set_device"))
    monkeypatch.setattr(rdist.dist, "init_process_group", rec("init_process_group"))
    monkeypatch.setattr(rdist.dist, "new_group", rec("new_group"))
    return rec


def test_the_placement_is_nccl_with_rank_i_on_gpu_i_of_its_node():
    placement = choose_placement("auto", "auto", GPUS, GPUS)  # per node: 8 ranks, 8 GPUs
    assert (placement.device, placement.backend, placement.gpus) == ("cuda", "nccl", GPUS)
    assert not placement.stage_through_host
    assert [placement.device_name(local) for local in range(GPUS)] == [f"cuda:{i}" for i in range(GPUS)]
    assert placement.reason == "8 ranks on 8 GPUs, one each, with nccl (runtime.device auto: 8 GPUs found)"
    # one rank more than GPUs on a node: gloo, shared round-robin (never nccl on a shared GPU)
    assert choose_placement("auto", "auto", GPUS + 1, GPUS).backend == "gloo"


@pytest.mark.parametrize("algorithm, env", [("native", {}), ("hierarchical", {}),
                                            ("ring", {"NCCL_ALGO": "Ring"}), ("tree", {"NCCL_ALGO": "Tree"})])
def test_nccl_algo_is_set_for_dtgens_ring_and_tree_only(algorithm, env):
    spec = _spec(algorithm)
    strategy = load_strategy("allreduce")
    assert strategy.process_environment(spec, "nccl") == env
    assert strategy.process_environment(spec, "gloo") == {}  # gloo: dtgen's own ring and tree


def test_every_rank_creates_its_groups_on_its_own_gpu(eight_gpus, monkeypatch):
    spec = _spec("ring")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(GPUS))  # what torch's elastic agent sets in each rank
    timeout = datetime.timedelta(seconds=30)
    seen = []
    for node in range(HOSTS):
        for local in range(GPUS):
            rank = node * GPUS + local
            eight_gpus.calls.clear()
            assert rdist.resolve_backend(spec) == ("nccl", "cuda")
            assert rdist.placement_for(spec).device_name(local) == f"cuda:{local}"  # ranks/rank<r>.json
            backend, device, control = rdist.setup_process_group(spec, rank, WORLD, local)
            assert (backend, device) == ("nccl", torch.device("cuda", local))
            assert eight_gpus.calls == [
                ("set_device", (torch.device("cuda", local),), {}),
                ("init_process_group", ("nccl",), {"rank": rank, "world_size": WORLD, "timeout": timeout,
                                                   "device_id": torch.device("cuda", local)}),
                # the control plane (object messages, any-source receives) on gloo, over all ranks
                ("new_group", (), {"backend": "gloo", "timeout": timeout}),
            ]
            assert control == "<new_group 3>"
            seen.append((rank, str(device)))
    assert len({r for r, _ in seen}) == WORLD and len({d for _, d in seen}) == GPUS


def test_the_launch_asks_for_2_nodes_of_8_spawned_ranks(monkeypatch, tmp_path):
    from torch.distributed.launcher import api

    from opentikz_dt.runner import forkserver, launch

    captured = {}

    def elastic_launch(config, entrypoint):
        captured["config"], captured["entrypoint"] = config, entrypoint
        return lambda *args: captured.setdefault("args", args)

    monkeypatch.setattr(api, "elastic_launch", elastic_launch)
    spec = _spec("ring", restarts=1)
    info = {"epoch_ns": 1, "node_addr": "10.0.0.2", "rdzv_host": False}

    class Monitor:
        def start(self):
            captured["monitor"] = True

    method = forkserver.start_method("cuda")
    assert method == "spawn"  # GPU ranks are spawned: each initialises CUDA itself
    launch._elastic(spec, tmp_path, info, GPUS, HOSTS, 1, "10.0.0.1:29500", Monitor(), 120.0, method)
    config = captured["config"]
    assert (config.min_nodes, config.max_nodes, config.nproc_per_node) == (HOSTS, HOSTS, GPUS)
    assert (config.rdzv_backend, config.rdzv_endpoint, config.start_method) == ("c10d", "10.0.0.1:29500", "spawn")
    assert config.run_id == f"dtgen-{spec.name}"  # the same on both nodes (no launch time in it)
    assert config.local_addr == "10.0.0.2" and config.max_restarts == 1
    assert {k: config.rdzv_configs[k] for k in ("join_timeout", "is_host")} == {"join_timeout": 120, "is_host": False}
    assert captured["entrypoint"].__name__ == "rank_main" and captured["monitor"]
    run_dir, launch_info, env = captured["args"]
    assert run_dir == str(tmp_path.resolve()) and launch_info is info and isinstance(env, dict)
