"""Hybrid parallelism on a device mesh (torchtitan's 2D and 3D, Megatron-LM's 3D): the
workers form a grid of `parallelism.pipeline` x `parallelism.data` x `parallelism.tensor`
ranks, outermost first.

- tensor: each tensor group (`tensor` consecutive ranks, so inside one host) splits every
  layer of its stage as `kind: tensor` does and shares one slice of the batch;
- pipeline: the model is cut into `pipeline` stages as `kind: pipeline` cuts it (one block
  of `data x tensor` consecutive ranks per stage), every data replica's batch slice
  going through its stages in `strategy.microbatches` microbatches under
  `strategy.schedule` (any of kind pipeline's, with strategy.stages_per_rank virtual stages
  per pipeline rank where the schedule takes them: the pipeline kind's keys and rules);
- data: the replicas of the (split, staged) model each take their own slice of the
  global batch and synchronise as `data_parallel` says:

  allreduce  every rank all-reduces its gradient slices with the ranks holding the same
             slices of the same stage in the other replicas (DDP-like replicate x tensor)
  ring, tree the same sum by dtgen's own ring or binary tree over point-to-point messages
             (kind allreduce's algorithms, traced hop by hop), over each data group
  fsdp       FSDP2 shards the tensor-split parameters again over the replicas
             (fully_shard(mesh=the data sub-mesh) after parallelize_module: torchtitan's
             FSDP x TP; with pipeline stages, FSDP x TP x PP); `shard` picks ZeRO's
             stage as for kind fsdp: parameters (ZeRO-3, the default), gradients
             (ZeRO-2: reshard_after_forward false) or optimizer (ZeRO-1: the gradient
             slices all-reduced as allreduce does, torch's ZeroRedundancyOptimizer over
             each data group)

    strategy:
      kind: mesh
      parallelism: {pipeline: 2, data: 2, tensor: 2}   # degrees; product = workers
      data_parallel: fsdp                 # allreduce (default) | ring | tree | fsdp
      microbatches: 4                     # per data replica and step (pipeline above 1)

Why a kind of its own and not a top-level `parallelism:` block: the layout is what the
`strategy` block already says, so a one-dimensional spec keeps meaning exactly what it
meant, the degrees are this plugin's own keys (nothing outside the plugins asks about
them), and set-strategy switches to and from it like any kind. A degree of 1 switches a
dimension off (data: 1 is tensor parallelism, tensor: 1 data parallelism, pipeline: 1,
the default, no stages; microbatches and schedule are read only with pipeline above 1).

Rank r = (pipeline_index * data + data_index) * tensor + tensor_index (tensor innermost,
pipeline outermost, as torchtitan's ParallelDims orders its axes), so with several hosts
a tensor group must fit inside one, and a stage's ranks are one contiguous block.
No torch here.
"""

from __future__ import annotations

from ..tensor import strategy as _tensor
from .._base import Strategy
from ..fsdp.strategy import zero_owners
from ..pipeline.strategy import microbatch_rules
from ..pipeline_schedules import SCHEDULES, stages_per_rank

KIND = "mesh"
STRATEGY = Strategy(KIND, "Hybrid pipeline x data x tensor parallel training",
                    ("allreduce", "send", "recv", "optimizer"),
                    options=("parallelism", "data_parallel", "plan", "stages_per_rank", "shard"),
                    workers=(2, None), default_workers=4, order=90)

DIMENSIONS = ("pipeline", "data", "tensor")  # outermost first (ranks: the last varies fastest)
# the data-parallel methods the runner composes with the other dimensions: gloo's all-reduce,
# dtgen's ring and tree (kind allreduce's, over each data group), FSDP2
DATA_METHODS = ("allreduce", "ring", "tree", "fsdp")
DEFAULT_DATA_METHOD = "allreduce"
# Why the other data-parallel kinds do not combine (one line each, named by the rules).
REFUSED_METHODS = {
    "parameter-server": "a parameter server is not a rank of the mesh: each tensor slice would need its own "
                        "server group, which dtgen does not run",
    "central-storage": "central storage keeps the variables on one host, outside the mesh: each tensor slice "
                       "would need its own store, which dtgen does not run",
    "gossip": "gossip averages with a few peers, so the replicas of a tensor slice drift apart and the run "
              "is not `single`'s on the global batch",
}


def degrees(spec) -> dict[str, int]:
    """{dimension: degree} for every dimension (1 where the spec leaves it out)."""
    given = spec.strategy.options.get("parallelism") or {}
    return {dim: int(given.get(dim, 1)) for dim in DIMENSIONS}


def data_method(spec) -> str:
    return spec.strategy.options.get("data_parallel") or DEFAULT_DATA_METHOD


SHARD_LEVELS = ("optimizer", "gradients", "parameters")  # ZeRO stages 1, 2, 3 (kind fsdp's)


def data_shard(spec) -> str:
    """What the data dimension shards, ZeRO's stage: "" (replicas, all-reduced), or with
    data_parallel fsdp strategy.shard (parameters when left out)."""
    if data_method(spec) != "fsdp":
        return ""
    return spec.strategy.options.get("shard") or "parameters"


def shards_parameters(spec) -> bool:
    """FSDP2 over the data groups (ZeRO-2 and 3): parameters gathered, gradients reduce-scattered."""
    return data_shard(spec) in ("gradients", "parameters")


def coordinates(spec, rank: int) -> dict[str, int]:
    """{dimension: index} of worker rank `rank`: pipeline outermost, tensor innermost
    (rank = (pipeline * data + data_index) * tensor + tensor_index), as torchtitan's
    ParallelDims orders its axes, so a tensor group is consecutive ranks (inside a host)
    and a pipeline stage's ranks are one contiguous block (across hosts)."""
    d = degrees(spec)
    return {"pipeline": rank // (d["data"] * d["tensor"]), "data": rank // d["tensor"] % d["data"],
            "tensor": rank % d["tensor"]}


def rank_of(spec, coords: dict[str, int]) -> int:
    """The worker rank at `coords` (coordinates' inverse; a dimension left out is 0)."""
    d = degrees(spec)
    return (coords.get("pipeline", 0) * d["data"] + coords.get("data", 0)) * d["tensor"] + coords.get("tensor", 0)


def groups(spec, dim: str) -> list[list[int]]:
    """The process groups of dimension `dim` as worker rank lists, in rank order of their
    first member: the ranks that differ only in their `dim` index (a tensor group: one
    row; a data group: the same tensor slice of every replica in one stage; a pipeline
    group: the stages one microbatch passes through)."""
    d = degrees(spec)
    others = [k for k in DIMENSIONS if k != dim]
    out = []
    for a in range(d[others[0]]):
        for b in range(d[others[1]]):
            fixed = {others[0]: a, others[1]: b}
            out.append([rank_of(spec, {**fixed, dim: i}) for i in range(d[dim])])
    return sorted(out)


def rank_groups(spec) -> tuple[list[list[int]], list[list[int]]]:
    """(tensor groups, data groups) as worker rank lists (see groups)."""
    return groups(spec, "tensor"), groups(spec, "data")


def title(block: dict) -> str:
    given = block.get("parallelism") or {}
    shown = [dim for dim in DIMENSIONS if dim != "pipeline" or int(given.get(dim, 1)) > 1]
    shape = " x ".join(f"{given.get(dim, 1)} {dim}" for dim in shown)
    methods = {"fsdp": "FSDP", "ring": "ring all-reduce", "tree": "tree all-reduce"}
    method = methods.get(str(block.get("data_parallel")), "all-reduce")
    if block.get("data_parallel") == "fsdp" and block.get("shard") in ("optimizer", "gradients"):
        method = {"optimizer": "ZeRO-1", "gradients": "ZeRO-2"}[block["shard"]]
    return f"Hybrid parallel training ({shape}; {method} across data)"


def resolve_defaults(data: dict, given: dict) -> None:
    """data_parallel: allreduce; parallelism, when left out: tensor pairs (2, where the
    worker count is even) in as many data-parallel rows as the workers make."""
    block = data["strategy"]
    block.setdefault("data_parallel", DEFAULT_DATA_METHOD)
    if "parallelism" not in block:
        count = data["topology"]["workers"].get("count", STRATEGY.default_workers)
        tensor = 2 if count % 2 == 0 else 1
        block["parallelism"] = {"data": count // tensor, "tensor": tensor}


def workers_changed(ctx, count: int) -> None:
    """add-worker / remove-worker: the data replicas follow the worker count where the
    tensor x pipeline degrees divide it (else validation says the product is off, with
    the numbers)."""
    given = ctx.data["strategy"].get("parallelism") or {}
    per_replica = int(given.get("tensor", 1)) * int(given.get("pipeline", 1))
    if count % per_replica == 0 and ctx.doc.has(("strategy", "parallelism")):
        ctx.doc.set(("strategy", "parallelism", "data"), count // per_replica)


def mesh_refusal(ctx) -> str | None:
    return None  # set-mesh sets this kind's degrees


def data_parallel_width(spec) -> int:
    """The data replicas take their own slices of the global batch; the tensor and
    pipeline ranks of one replica share its slice."""
    return degrees(spec)["data"]


def rules(spec, model_blocks):
    d = degrees(spec)
    workers = spec.topology.workers.count
    product = d["pipeline"] * d["data"] * d["tensor"]
    if product != workers:
        shape = " x ".join(f"{dim} {d[dim]}" for dim in DIMENSIONS if dim != "pipeline" or d[dim] > 1)
        yield ("strategy", "parallelism"), (f"{shape} = {product} workers, but topology.workers.count is {workers} "
                                            "(make them equal)")
        return
    method = data_method(spec)
    if "shard" in spec.strategy.options and method != "fsdp":
        yield ("strategy", "shard"), (f"shard is the ZeRO stage of data_parallel: fsdp; {method} keeps whole "
                                      "replicas (set data_parallel: fsdp, or remove shard)")
    if method in REFUSED_METHODS:
        yield ("strategy", "data_parallel"), (f"{method} does not combine with tensor parallelism: "
                                              f"{REFUSED_METHODS[method]} (use {', '.join(DATA_METHODS[:-1])} or {DATA_METHODS[-1]})")
    hosts = spec.topology.hosts
    if hosts > 1 and workers % hosts == 0 and (workers // hosts) % d["tensor"]:
        yield ("topology", "hosts"), (f"{workers // hosts} workers per host do not hold whole tensor groups of "
                                      f"{d['tensor']} (parallelism.tensor): a tensor group sums inside every layer "
                                      "and must sit inside one host")
    if d["pipeline"] > 1:
        yield from _pipeline_rules(spec, d, model_blocks)
    if d["tensor"] > 1:
        yield from _tensor_rules(spec, d["tensor"])


def _pipeline_rules(spec, d: dict, model_blocks):
    """kind: pipeline's refusals for `parallelism.pipeline` stages, per data replica (its
    microbatches split the replica's batch_size samples)."""
    s, t, stages = spec.strategy, spec.training, d["pipeline"]
    blocks = model_blocks()
    if blocks is not None and stages > blocks[0]:
        yield ("strategy", "parallelism", "pipeline"), (f"{stages} pipeline stages need at least {stages} "
                                                        f"{blocks[1]}s; the model has {blocks[0]}")
    schedule = SCHEDULES[s.schedule]
    if "stages_per_rank" in s.options and schedule.fixed_v is not None:
        yield ("strategy", "stages_per_rank"), (
            f"{s.schedule} holds {schedule.fixed_v} stage{'s' if schedule.fixed_v > 1 else ''} per pipeline rank; "
            f"stages_per_rank applies to {', '.join(n for n, x in SCHEDULES.items() if x.fixed_v is None)} (remove it)")
    v = stages_per_rank(s)
    if v > 1 and blocks is not None and stages * v > blocks[0] >= stages:
        key = ("strategy", "stages_per_rank") if "stages_per_rank" in s.options else ("training", "model", "layers")
        yield key, (f"{s.schedule} cuts the model into {stages} x {v} = {stages * v} stages, one per {blocks[1]} "
                    f"at least; the model has {blocks[0]}")
    if schedule.splits_backward and shards_parameters(spec) and d["data"] > 1:
        yield ("strategy", "data_parallel"), (
            f"fsdp does not combine with {s.schedule}: under its backward split into input and weight gradients "
            "FSDP2's gradient reduction ran off `single` (zbv-zero-bubble: 0.12 after 6 steps); use allreduce, ring or tree, or a "
            "schedule with a whole backward (interleaved-1f1b, looped-bfs)")
    if s.schedule == "1f1b" and s.microbatches < stages:
        yield ("strategy", "microbatches"), (f"1f1b needs at least as many microbatches as pipeline stages "
                                             f"({stages}), got {s.microbatches}")
    else:  # the multi-stage schedules' own (kind pipeline's rules, per pipeline group)
        yield from microbatch_rules(s.schedule, s.microbatches, stages)
    if t.batch_size % s.microbatches:
        yield ("strategy", "microbatches"), (f"batch_size {t.batch_size} (one data replica's slice) does not split "
                                             f"into {s.microbatches} equal microbatches")
    if t.compile and d["tensor"] == 1:  # (with tensor above 1, the tensor rule says why)
        yield ("training", "compile"), ("strategy mesh cannot run compiled with parallelism.pipeline above 1: "
                                        "torch.distributed.pipelining runs each stage's forward and backward itself")
    if d["tensor"] > 1 and (t.model or {}).get("kind") == "python":
        yield ("strategy", "parallelism", "pipeline"), (
            "a python model is not split over both tensor and pipeline: its tensor plan is checked against the "
            "whole model's output on the first batch, which a pipeline stage does not see (set pipeline or tensor "
            "to 1)")


def _tensor_rules(spec, degree: int):
    """kind: tensor's refusals for a split over `degree` workers (the tensor dimension)."""
    if spec.training.compile:
        yield ("training", "compile"), ("strategy mesh cannot run compiled: its trace sees each tensor-parallel "
                                        "collective where DTensor issues it eagerly, which a compiled graph would hide")
    model = spec.training.model or {"kind": "mlp", "layers": list(spec.training.layers)}
    kind = model.get("kind", "mlp")
    if kind == "cnn":
        yield ("strategy", "parallelism", "tensor"), ("tensor parallelism does not split the built-in cnn (its "
                                                      "convolutions): use parallelism.tensor: 1 or another model")
        return
    if kind != "python" and "plan" in spec.strategy.options:
        yield ("strategy", "plan"), (f"strategy.plan applies to a python model; the built-in {kind} has its own plan "
                                     "(remove plan)")
        return
    for path, what, size in _tensor.split_sizes(model):
        if size % degree:
            fits = _tensor.nearest_counts(model, degree).replace("counts that work", "tensor degrees that work")
            yield path, f"{what.format(size)} do not split over parallelism.tensor {degree} ({fits})"
            return


def node_spec_path(node: str, parts: list[str]) -> tuple | None:
    """The topology's group outlines (w5-tp, w5-dp, w5-pp: the group whose first drawn member
    is w5) and its legend come from the degrees (figures/topology_mesh.py)."""
    if (len(parts) == 2 and parts[1] in ("tp", "dp", "pp")) or parts[0] == "legend":
        return ("strategy", "parallelism")
    return None


def expected_memory(spec, sizes) -> list:
    """Each rank holds its pipeline stage's tensors (the blocks workload.stage_bounds gives
    the stage, the last stage a copy of a tied weight), 1/tensor of the split ones (kind
    tensor's split) and the rest whole; with fsdp, 1/data of that again (FSDP shards every
    parameter over the data group); with their gradients and optimizer state. ZeRO-2
    (shard: gradients) holds ZeRO-3's between steps (kind fsdp's expected_memory says
    why); ZeRO-1 (shard: optimizer) the whole slice and its gradients, and the optimizer
    state of the tensors ZeroRedundancyOptimizer assigns the rank in its data group
    (zero_slices). Activations: opentikz_dt/memory.py."""
    stage_names = sizes.stage_tensors(degrees(spec)["pipeline"])
    held = held_per_stage(spec, sizes.tensors, stage_names)
    out = [sizes.rank("worker", w, held[coordinates(spec, r)["pipeline"]])
           for r, w in enumerate(spec.topology.workers.ids)]
    if data_shard(spec) == "optimizer":
        updated = zero_slices(spec, sizes.tensors, stage_names)
        for r, rank in enumerate(out):
            at = coordinates(spec, r)
            values = updated[at["pipeline"]][at["data"]][0]
            rank["optimizer"] = sizes.rank("worker", rank["id"], values)["optimizer"]
    return out


def zero_slices(spec, tensors: dict, stage_names: list) -> list[list[tuple[int, int]]]:
    """Per pipeline stage, the (parameter values, tensors) each data index updates under
    ZeRO-1: ZeroRedundancyOptimizer over the data group assigns the rank's tensors whole,
    largest first by their whole size (a DTensor's numel), each rank holding its local
    slice of each (runner/strategies/fsdp.py _traced_zero)."""
    d = degrees(spec)
    out = []
    for names in stage_names:
        present = set(names)
        local = [tensors[n] // d["tensor"] if d["tensor"] > 1 and _split_in_stage(spec, n, present) else tensors[n]
                 for n in names]
        held = [(0, 0)] * d["data"]
        for size, owner in zip(local, zero_owners([tensors[n] for n in names], d["data"])):
            held[owner] = (held[owner][0] + size, held[owner][1] + 1)
        out.append(held)
    return out


def held_per_stage(spec, tensors: dict, stage_names: list) -> list[int]:
    """Parameter values one rank of each pipeline stage holds and updates: its tensor
    slice of the stage (stage_slices), 1/data of that with fsdp (rounded up)."""
    d = degrees(spec)
    slices = stage_slices(spec, tensors, stage_names)
    return [-(-held // d["data"]) for held in slices] if shards_parameters(spec) else slices


def stage_slices(spec, tensors: dict, stage_names: list) -> list[int]:
    """Parameter values of each pipeline stage one tensor rank holds before any data
    sharding (what its data group all-reduces): `tensors` maps every tensor name to its
    elements, `stage_names` lists each stage's tensor names. A tensor is split over the
    tensor group where kind tensor splits it and its layer pair lies in the stage (an mlp
    pair cut by a stage boundary stays whole: a column-parallel layer needs its
    row-parallel partner on the same rank to sum the pair's output)."""
    degree = degrees(spec)["tensor"]
    out = []
    for names in stage_names:
        present = set(names)
        split = sum(tensors[n] for n in names if degree > 1 and _split_in_stage(spec, n, present))
        out.append(split // degree + sum(tensors[n] for n in names) - split)
    return out


def _split_in_stage(spec, name: str, present: set) -> bool:
    if not _tensor._split_tensor(spec, name):
        return False
    parts = name.split(".")
    if parts[0] == "layers":  # the built-in mlp: layer 2k pairs with layer 2k + 1
        return f"layers.{int(parts[1]) ^ 1}.weight" in present
    return True


def starter_block(kind: str) -> str:
    return f"""\
strategy:
  kind: mesh                  # hybrid: pipeline stages x data-parallel replicas x tensor-parallel groups
  parallelism: {{data: 2, tensor: 2}}  # degrees (product = topology.workers.count); tensor inside a host
  data_parallel: {DEFAULT_DATA_METHOD:<12} # how the replicas synchronise: {" | ".join(DATA_METHODS)}
  # pipeline stages: add pipeline: 2 to parallelism (and double the workers); then
  # microbatches: 4 and schedule: 1f1b (any pipeline schedule: docs/pipeline-schedules.md)
  # apply per data replica"""


def activation_plan(spec, rank: int):
    """Rank `rank`'s pipeline stage and tensor degree on the mesh; without a pipeline
    dimension its whole slice at once."""
    from ...memory_model import ActivationPlan
    from ..pipeline_schedules import in_flight

    s, batch = spec.strategy, spec.training.batch_size
    d, at = degrees(spec), coordinates(spec, rank)
    stages, micro = d["pipeline"], max(1, s.microbatches or 1)
    if stages == 1:
        return ActivationPlan(tensor=d["tensor"], micro_batch=batch)
    return ActivationPlan(at["pipeline"], stages, d["tensor"], batch // micro,
                          in_flight(s.schedule or "1f1b", micro, stages, at["pipeline"]), micro)
