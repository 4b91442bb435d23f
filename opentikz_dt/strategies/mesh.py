"""Hybrid parallelism on a device mesh (torchtitan's 2D): the workers form a grid of
`parallelism.data` x `parallelism.tensor` ranks. Each row of the grid (a tensor group:
`tensor` consecutive ranks, so inside one host) splits every layer as `kind: tensor`
does and shares one slice of the batch; the rows are data-parallel replicas of the
split model, each taking its own slice of the global batch and synchronising as
`data_parallel` says:

  allreduce  every tensor rank all-reduces its gradient slices with the ranks holding
             the same slices in the other rows (DDP-like replicate x tensor)
  fsdp       FSDP2 shards the tensor-split parameters again over the rows
             (fully_shard(mesh=the data sub-mesh) after parallelize_module: torchtitan's
             FSDP x TP)

    strategy:
      kind: mesh
      parallelism: {data: 2, tensor: 2}   # degrees, outermost first; product = workers
      data_parallel: fsdp                 # allreduce (default) | fsdp

Why a kind of its own and not a top-level `parallelism:` block: the layout is what the
`strategy` block already says, so a one-dimensional spec keeps meaning exactly what it
meant, the degrees are this plugin's own keys (nothing outside the plugins asks about
them), and set-strategy switches to and from it like any kind. A degree of 1 switches a
dimension off (data: 1 is tensor parallelism, tensor: 1 data parallelism); `pipeline` is
reserved and refused until it is built.

Rank r sits at row r // tensor, column r % tensor (tensor innermost, as torchtitan's
ParallelDims orders its axes), so with several hosts a tensor group must fit inside one.
No torch here.
"""

from __future__ import annotations

from . import tensor as _tensor
from ._base import Strategy

KIND = "mesh"
STRATEGY = Strategy(KIND, "Hybrid data x tensor parallel training", ("allreduce", "optimizer"),
                    options=("parallelism", "data_parallel", "plan"), workers=(2, None), default_workers=4, order=90)

DIMENSIONS = ("pipeline", "data", "tensor")  # outermost first (ranks: the last varies fastest)
DATA_METHODS = ("allreduce", "fsdp")  # the data-parallel methods the runner composes with tensor
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
    shape = " x ".join(f"{given.get(dim, 1)} {dim}" for dim in ("data", "tensor"))
    method = "FSDP" if block.get("data_parallel") == "fsdp" else "all-reduce"
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
    """add-worker / remove-worker: the rows follow the worker count where the tensor
    degree divides it (else validation says the product is off, with the numbers)."""
    given = ctx.data["strategy"].get("parallelism") or {}
    tensor = int(given.get("tensor", 1))
    if count % tensor == 0 and ctx.doc.has(("strategy", "parallelism")):
        ctx.doc.set(("strategy", "parallelism", "data"), count // tensor)


def data_parallel_width(spec) -> int:
    """The rows of the grid take their own slices of the global batch; a row shares one."""
    return degrees(spec)["data"]


def rules(spec, model_blocks):
    d = degrees(spec)
    workers = spec.topology.workers.count
    if d["pipeline"] > 1:
        yield ("strategy", "parallelism", "pipeline"), ("the pipeline dimension of a mesh is not built yet "
                                                        "(issue 23): leave it out or set it to 1")
        return
    if d["data"] * d["tensor"] != workers:
        yield ("strategy", "parallelism"), (f"data {d['data']} x tensor {d['tensor']} = {d['data'] * d['tensor']} "
                                            f"workers, but topology.workers.count is {workers} (make them equal)")
        return
    method = data_method(spec)
    if method in REFUSED_METHODS:
        yield ("strategy", "data_parallel"), (f"{method} does not combine with tensor parallelism: "
                                              f"{REFUSED_METHODS[method]} (use {' or '.join(DATA_METHODS)})")
    hosts = spec.topology.hosts
    if hosts > 1 and workers % hosts == 0 and (workers // hosts) % d["tensor"]:
        yield ("topology", "hosts"), (f"{workers // hosts} workers per host do not hold whole tensor groups of "
                                      f"{d['tensor']} (parallelism.tensor): a tensor group sums inside every layer "
                                      "and must sit inside one host")
    if d["tensor"] > 1:
        yield from _tensor_rules(spec, d["tensor"])


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
    """Each rank holds 1/tensor of the split tensors and the rest whole (kind: tensor);
    with fsdp, 1/data of that again (FSDP shards every parameter over the rows)."""
    d = degrees(spec)
    split = sum(n for name, n in sizes.tensors.items() if _tensor._split_tensor(spec, name))
    held = split // d["tensor"] + sizes.params - split
    if data_method(spec) == "fsdp":
        held = -(-held // d["data"])
    return [sizes.rank("worker", w, held) for w in spec.topology.workers.ids]


def starter_block(kind: str) -> str:
    return """\
strategy:
  kind: mesh                  # hybrid: data-parallel rows of tensor-parallel groups
  parallelism: {data: 2, tensor: 2}  # degrees (product = topology.workers.count); tensor inside a host
  data_parallel: fsdp         # how the rows synchronise: allreduce | fsdp"""
