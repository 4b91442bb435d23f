"""Sharded data parallelism (FSDP, ZeRO-3-like): every worker takes its slice of the
global batch, as all-reduce does, but holds only 1/N of every parameter, gradient and
optimizer state. Before a unit (a block, a layer) runs, its parameters are all-gathered;
after its backward, its gradients are reduce-scattered. The runner uses torch's own
FSDP2 (`torch.distributed.fsdp.fully_shard`).

Its two collectives are the two halves of an all-reduce (reduce-scatter, then
all-gather), split in time, so the trace records them in the all-reduce vocabulary:
`allreduce` spans with `phase` all-gather or reduce-scatter (docs/dev/runner-interface.md).
"""

from ._base import Strategy

KIND = "fsdp"
STRATEGY = Strategy(KIND, "Sharded data-parallel training (FSDP)", ("allreduce", "optimizer"),
                    options=("reshard_after_forward", "units"), workers=(2, None), order=70)

# This kind's own keys when the spec leaves them out (resolve_defaults writes them into
# an fsdp spec; a schema default would land in every spec, whatever its kind).
#   reshard_after_forward: free each unit's gathered parameters after its forward and
#     gather them again for its backward (true, ZeRO-3: least memory), or keep them
#     until the backward (false, ZeRO-2-like: one all-gather per unit and step).
#   units: module names to shard one by one (absent: each block of the built-in models,
#     each child of an nn.Sequential or of the model's outermost nn.ModuleLists).
OPTION_DEFAULTS = {"reshard_after_forward": True, "units": None}


def option(spec, key: str):
    """strategy.<key> of an fsdp spec, or its default."""
    value = spec.strategy.options.get(key)
    return OPTION_DEFAULTS[key] if value is None else value


def resolve_defaults(data: dict, given: dict) -> None:
    data["strategy"].setdefault("reshard_after_forward", OPTION_DEFAULTS["reshard_after_forward"])


def starter_block(kind: str) -> str:
    return """\
strategy:
  kind: fsdp                  # sharded data parallel: each worker holds 1/N of every layer
  reshard_after_forward: true # free gathered layers after forward (less memory, one more all-gather)"""


def expected_memory(spec, sizes) -> list:
    """Each worker holds 1/N of every parameter tensor (FSDP shards dim 0 into N chunks),
    its gradient and its optimizer state: ZeRO-3's placement. The split here is by
    values, each tensor's remainder going to the first ranks; FSDP splits whole rows, so
    where a tensor's first dimension is not a multiple of N a rank may hold up to a row
    more or less than said. Not counted: the gathered copy of the unit being computed."""
    ids = spec.topology.workers.ids
    n = len(ids)
    held = [sum(e // n + (r < e % n) for e in sizes.tensors.values()) for r in range(n)]
    return [sizes.rank("worker", w, elements) for w, elements in zip(ids, held)]
