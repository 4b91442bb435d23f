"""Helpers for tests and benchmarks: small specs and cached small runs.

`small_spec_data(kind, **overrides)` builds a spec dict for a few fast steps;
`run_small(data, tmp_root)` runs it (cached per spec within one Python process, so
several tests can share one launch) and returns the RunResult. Without a root it runs
under `DEFAULT_ROOT`, which the test suite points at a pytest temporary folder.
"""

from __future__ import annotations

import copy
import json
import tempfile
from pathlib import Path

import yaml

DEFAULT_ROOT: Path | None = None  # where cached runs go; a fresh temporary folder if unset
_CACHE: dict[str, object] = {}
_COUNT = [0]


def deep_update(base: dict, overrides: dict) -> dict:
    for k, v in overrides.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            deep_update(base[k], v)
        else:
            base[k] = copy.deepcopy(v)
    return base


def small_spec_data(kind: str, **overrides) -> dict:
    """A spec for a quick run: small MLP, 6 steps, batch 32 per worker, 10 s timeout."""
    data = {
        "name": f"t-{kind}",
        "strategy": {"kind": kind},
        "training": {"model": {"layers": [16, 32, 32, 4]}, "dataset": {"samples": 2048},
                     "batch_size": 32, "steps": 6, "optimizer": {"lr": 0.2}},
        "runtime": {"backend": "gloo", "device": "cpu", "timeout_s": 10},
    }
    data = deep_update(data, overrides)
    if data["training"]["dataset"].get("kind", "synthetic") != "synthetic":
        data["training"]["dataset"].pop("samples", None)  # a synthetic-only key
    return data


def write_spec(data: dict, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{data.get('name', 'spec')}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def run_small(data: dict, root: Path | None = None, cache: bool = True, **launch_kwargs):
    """Launch `data`; identical specs reuse the first result within this process."""
    from .launch import launch_run

    key = json.dumps(data, sort_keys=True) + json.dumps(launch_kwargs, sort_keys=True, default=str)
    if cache and key in _CACHE:
        return _CACHE[key]
    root = Path(root or DEFAULT_ROOT or tempfile.mkdtemp(prefix="dtgen-test-"))
    _COUNT[0] += 1
    spec_path = write_spec(data, root / "specs" / str(_COUNT[0]))
    out = root / "runs" / f"{data.get('name', 'run')}-{_COUNT[0]}"
    result = launch_run(spec_path, out=out, progress=False, echo=lambda line: None, **launch_kwargs)
    if cache:
        _CACHE[key] = result
    return result


# The data-parallel strategies of the runner, as (kind, overrides, dp) for the tests:
# dp is the data-parallel width, so `single` at batch_size*dp must reach the same model.
DP_CASES = {
    "allreduce-native": ("allreduce", {"topology": {"workers": {"count": 3}}}, 3),
    "allreduce-ring": ("allreduce", {"topology": {"workers": {"count": 3}}, "strategy": {"algorithm": "ring"}}, 3),
    "allreduce-tree": ("allreduce", {"topology": {"workers": {"count": 3}}, "strategy": {"algorithm": "tree"}}, 3),
    "allreduce-hierarchical": ("allreduce", {"topology": {"workers": {"count": 4}, "hosts": 2},
                                             "strategy": {"algorithm": "hierarchical"}}, 4),
}
# Every synchronous strategy with the width `single` must match: DP_CASES plus the
# parameter-server, central-storage, pipeline, fsdp and tensor cases (dp 1: a pipeline or a
# tensor split divides the model, not the batch). The numerics test and
# benchmarks/bench_numerics.py both run these.
SYNC_CASES = {
    **DP_CASES,
    "ps-sync-1shard": ("parameter-server", {"topology": {"workers": {"count": 3}, "servers": {"count": 1}}}, 3),
    "ps-sync-2shards": ("parameter-server", {"topology": {"workers": {"count": 2}, "servers": {"count": 2}}}, 2),
    "central-storage": ("central-storage", {"topology": {"workers": {"count": 3}}}, 3),
    "pipeline-gpipe": ("pipeline", {"topology": {"workers": {"count": 3}},
                                    "strategy": {"schedule": "gpipe", "microbatches": 4}}, 1),
    "pipeline-1f1b": ("pipeline", {"topology": {"workers": {"count": 2}},
                                   "strategy": {"schedule": "1f1b", "microbatches": 4}}, 1),
    "fsdp": ("fsdp", {"topology": {"workers": {"count": 2}}}, 2),
    # ZeRO-1 (DDP + ZeroRedundancyOptimizer) and ZeRO-2 (FSDP2 keeping the gathered parameters)
    "fsdp-shard-optimizer": ("fsdp", {"topology": {"workers": {"count": 2}}, "strategy": {"shard": "optimizer"}}, 2),
    "fsdp-shard-gradients": ("fsdp", {"topology": {"workers": {"count": 2}}, "strategy": {"shard": "gradients"}}, 2),
    # dp 1: tensor parallelism splits the layers, every worker sees the whole batch
    "tensor-mlp": ("tensor", {"topology": {"workers": {"count": 2}}}, 1),
    # dp 2: a 2 x 2 mesh's two rows each take a slice of the global batch; the two ranks of
    # a row share it (tensor split), its data dimension all-reduced or FSDP-sharded
    "mesh-data-tensor": ("mesh", {"topology": {"workers": {"count": 4}},
                                  "strategy": {"parallelism": {"data": 2, "tensor": 2}}}, 2),
    "mesh-fsdp-tensor": ("mesh", {"topology": {"workers": {"count": 4}},
                                  "strategy": {"parallelism": {"data": 2, "tensor": 2}, "data_parallel": "fsdp"}}, 2),
    # dp 2: ZeRO-1 over the 2 x 2 mesh's data groups (the gradient slices all-reduced,
    # ZeroRedundancyOptimizer broadcasting tensor-parallel slices); ZeRO-2 (FSDP2 keeping
    # the gathered parameters to the backward) under 2 pipeline stages, 4 microbatches 1f1b
    "mesh-zero1-tensor": ("mesh", {"topology": {"workers": {"count": 4}},
                                   "strategy": {"parallelism": {"data": 2, "tensor": 2}, "data_parallel": "fsdp",
                                                "shard": "optimizer"}}, 2),
    "mesh-zero2-pipeline": ("mesh", {"topology": {"workers": {"count": 4}},
                                     "strategy": {"parallelism": {"pipeline": 2, "data": 2}, "microbatches": 4,
                                                  "data_parallel": "fsdp", "shard": "gradients"}}, 2),
    # dp 2: the 2 x 2 mesh's rows summed by dtgen's tree over each data group
    "mesh-tree-tensor": ("mesh", {"topology": {"workers": {"count": 4}},
                                  "strategy": {"parallelism": {"data": 2, "tensor": 2}, "data_parallel": "tree"}}, 2),
    # dp 2: 2 replicas of a 2-stage pipeline, each replica's slice in 4 microbatches (1f1b),
    # each stage's replicas summed by dtgen's ring
    "mesh-data-pipeline": ("mesh", {"topology": {"workers": {"count": 4}},
                                    "strategy": {"parallelism": {"pipeline": 2, "data": 2}, "microbatches": 4,
                                                 "data_parallel": "ring"}}, 2),
    # dp 2: 2 stages x 2 replicas x 2 tensor columns (8 ranks); the mlp's colwise/rowwise pair
    # on the first stage, its last layer whole on the second; the replicas FSDP-sharded
    "mesh-3d": ("mesh", {"topology": {"workers": {"count": 8}},
                         "strategy": {"parallelism": {"pipeline": 2, "data": 2, "tensor": 2}, "microbatches": 4,
                                      "data_parallel": "fsdp"}}, 2),
}
# The training sections the numerics test runs every case with, each exercising several
# features at once (CI time): the default (sgd with momentum, fp32); adamw with weight
# decay, a clip that binds every step and a warm-up + cosine schedule, in fp32 (eps about
# the size of the clipped gradients: Adam is otherwise nearly blind to a constant gradient
# scale, and a per-shard or per-stage clip instead of the global one went unseen); sgd
# with momentum, clip and a linear schedule in bf16 (autocast on the CPU; sgd, because
# Adam's first steps move each weight by about +-lr whatever the gradient's size, so
# bf16's sign flips of near-zero gradients would swamp the check).
NUMERICS_TRAININGS = {
    "sgd": {},
    "adamw-clip-cosine": {"optimizer": {"kind": "adamw", "lr": 0.01, "weight_decay": 0.1, "eps": 0.01},
                          "grad_clip": 0.5, "lr_schedule": {"kind": "cosine", "warmup_steps": 2, "min_lr": 0.001}},
    "bf16-sgd-clip-linear": {"precision": "bf16", "grad_clip": 0.5,
                             "lr_schedule": {"kind": "linear", "warmup_steps": 1}},
}
# w2 is a 2x straggler here, so the smoke test also sees `slowdown` spans.
GOSSIP_CASE = ("gossip", {"topology": {"workers": {"count": 3, "slowdown": {"w2": 2.0}}}, "strategy": {"peers": 2}}, 3)


TINY_TRANSFORMER = {"kind": "transformer", "layers": 2, "d_model": 16, "heads": 2, "seq_len": 8, "vocab": 32}


def clipped_mesh_data(method: str, pipeline: int) -> dict:
    """A 2 data x 2 tensor mesh (x `pipeline` stages, 2 microbatches) of the tiny transformer,
    4 steps of plain sgd with a clip that binds: the numerics clip test compares it with
    `single`, the mesh trace test reads its spans (one launch for both: run_small's cache)."""
    training = {"dataset": {"samples": 512}, "batch_size": 8, "steps": 4, "grad_clip": 0.05,
                "optimizer": {"kind": "sgd", "lr": 0.5, "momentum": 0.0}}
    data = small_spec_data("mesh", topology={"workers": {"count": 4 * pipeline}}, training=training,
                           strategy={"parallelism": {"pipeline": pipeline, "data": 2, "tensor": 2},
                                     "data_parallel": method, "microbatches": 2})
    data["training"]["model"] = dict(TINY_TRANSFORMER)
    return data


def single_reference(dp: int, steps: int | None = None, root=None, training: dict | None = None):
    """`single` on the global batch of a dp-wide run of small_spec_data (cached);
    `training`: overrides of the training section (optimizer, precision, ...)."""
    base = small_spec_data("single")
    over = {"training": deep_update(copy.deepcopy(training or {}),
                                    {"batch_size": base["training"]["batch_size"] * dp})}
    if steps is not None:
        over["training"]["steps"] = steps
    return run_small(small_spec_data("single", **over), root)
