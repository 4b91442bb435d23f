"""Sharded data parallelism (FSDP, ZeRO-3-like): every worker takes its slice of the
global batch, as all-reduce does, but holds only 1/N of every parameter, gradient and
optimizer state. Before a unit (a block, a layer) runs, its parameters are all-gathered;
after its backward, its gradients are reduce-scattered. The runner uses torch's own
FSDP2 (`torch.distributed.fsdp.fully_shard`).

Its two collectives are the two halves of an all-reduce (reduce-scatter, then
all-gather), split in time, so the trace records them in the all-reduce vocabulary:
`allreduce` spans with `phase` all-gather or reduce-scatter (docs/dev/runner-interface.md).
"""

from .._base import Strategy

KIND = "fsdp"
STRATEGY = Strategy(KIND, "Sharded data-parallel training (FSDP)", ("allreduce", "optimizer"),
                    options=("reshard_after_forward", "units", "shard"), workers=(2, None), order=70)

# This kind's own keys when the spec leaves them out (resolve_defaults writes them into
# an fsdp spec; a schema default would land in every spec, whatever its kind).
#   reshard_after_forward: free each unit's gathered parameters after its forward and
#     gather them again for its backward (true, ZeRO-3: least memory), or keep them
#     until the backward (false, ZeRO-2-like: one all-gather per unit and step).
#   shard: what is sharded over the workers, ZeRO's stages: optimizer (ZeRO-1: torch's
#     ZeroRedundancyOptimizer over DDP), gradients (ZeRO-2: FSDP2 keeping each unit's
#     gathered parameters from its forward to its backward) or parameters (ZeRO-3: FSDP2).
#   units: module names to shard one by one (absent: each block of the built-in models,
#     each child of an nn.Sequential or of the model's outermost nn.ModuleLists).
ROOT = "root"  # what fully_shard(model) holds itself: what no unit holds (embedding, head)
OPTION_DEFAULTS = {"reshard_after_forward": True, "units": None, "shard": "parameters"}
SHARD_LEVELS = ("optimizer", "gradients", "parameters")  # ZeRO stages 1, 2, 3


def option(spec, key: str):
    """strategy.<key> of an fsdp spec, or its default."""
    value = spec.strategy.options.get(key)
    return OPTION_DEFAULTS[key] if value is None else value


def resolve_defaults(data: dict, given: dict) -> None:
    # The resolved spec states its ZeRO stage (the starter shows it as the default it is).
    # ZeRO-2 keeps the gathered parameters until the backward: reshard_after_forward false
    # (a spec saying true is refused by `rules`)
    data["strategy"].setdefault("shard", OPTION_DEFAULTS["shard"])
    keep = data["strategy"]["shard"] == "gradients"
    data["strategy"].setdefault("reshard_after_forward", not keep and OPTION_DEFAULTS["reshard_after_forward"])


def rules(spec, model_blocks):
    level = option(spec, "shard")
    if level == "gradients" and spec.strategy.options.get("reshard_after_forward") is True:
        yield (("strategy", "reshard_after_forward"),
               "true frees each unit's gathered parameters after its forward, which is shard: parameters "
               "(ZeRO-3); shard: gradients keeps them until the backward (false, or leave it out)")
    if level == "optimizer" and option(spec, "units"):
        yield (("strategy", "units"), "shard: optimizer replicates the model (DDP) and shards the optimizer "
               "state by whole parameters: it has no units (remove them, or use shard: gradients or parameters)")


def starter_block(kind: str) -> str:
    return """\
strategy:
  kind: fsdp                  # sharded data parallel: each worker holds 1/N of every layer
  shard: parameters           # ZeRO stage: optimizer (1) | gradients (2) | parameters (3)
  reshard_after_forward: true # free gathered layers after forward (less memory, one more all-gather)"""


def expected_memory(spec, sizes) -> list:
    """shard: parameters (and gradients, see below): each worker holds 1/N of every parameter tensor (FSDP shards dim 0 into N chunks),
    its gradient and its optimizer state: ZeRO-3's placement. The split here is by
    values, each tensor's remainder going to the first ranks; FSDP splits whole rows, so
    where a tensor's first dimension is not a multiple of N a rank may hold up to a row
    more or less than said. Not counted: the gathered copy of the unit being computed."""
    ids = spec.topology.workers.ids
    n = len(ids)
    if option(spec, "shard") == "optimizer":
        # ZeRO-1: the whole model and its gradients on every rank (DDP); the optimizer state
        # of the parameters this rank updates
        whole = sizes.rank("worker", "", sizes.params)
        return [{**whole, "id": w, "optimizer": sizes.rank("worker", w, elements)["optimizer"]}
                for w, elements in zip(ids, zero_partition(list(sizes.tensors.values()), n))]
    # ZeRO-3, and ZeRO-2 as FSDP2 runs it: between steps each rank holds 1/N of the
    # parameters too (the gathered ones live from a unit's forward to its backward)
    held = [sum(e // n + (r < e % n) for e in sizes.tensors.values()) for r in range(n)]
    return [sizes.rank("worker", w, elements) for w, elements in zip(ids, held)]


def zero_partition(elements: list[int], ranks: int) -> list[int]:
    """Parameter values each rank updates under torch's ZeroRedundancyOptimizer (zero_owners)."""
    held = [0] * ranks
    for size, rank in zip(elements, zero_owners(elements, ranks)):
        held[rank] += size
    return held


def zero_owners(elements: list[int], ranks: int) -> list[int]:
    """The rank updating each tensor (of `elements` values, in model order) under torch's
    ZeroRedundancyOptimizer, which assigns whole tensors: largest first (a stable sort, so
    ties keep model order), each to the rank with the fewest values so far (the first such
    rank)."""
    held, owner = [0] * ranks, [0] * len(elements)
    for i in sorted(range(len(elements)), key=lambda i: -elements[i]):
        owner[i] = held.index(min(held))
        held[owner[i]] += elements[i]
    return owner


# --- units as the predictor and the expected figures see them -------------------------------
def unit_names(spec, workload) -> list[str]:
    """The modules FSDP shards one by one (runner/strategies/fsdp.py): strategy.units, else
    each block of the workload (opentikz_dt.workload), named after its tensors' common
    prefix (blocks.0, layers.1), as the runner's default_units finds them."""
    named = option(spec, "units")
    if named:
        return [str(name) for name in named]
    out = []
    for block in workload.blocks:
        parts = [name.split(".") for name, _ in block.tensors]
        common = []
        for words in zip(*parts):
            if len(set(words)) != 1:
                break
            common.append(words[0])
        out.append(".".join(common) or block.name)
    return out


def unit_of(tensor: str, names: list[str]) -> str:
    """The unit holding a parameter tensor: the longest unit name prefixing it, else the root."""
    owners = [name for name in names if tensor == name or tensor.startswith(name + ".")]
    return max(owners, key=len) if owners else ROOT


def sharded_units(spec, workload, workers: int) -> tuple[dict, list]:
    """({unit: the bytes of its all-gather buffer}, compute order), from the workload's tensors.

    The buffer: each tensor padded to whole rows per rank (FSDP shards dim 0 into N equal
    chunks), 4 bytes per value (fp32), as the runner's traced `bytes`. Units are listed root
    first (its forward gathers first), then in the order their tensors come; a tied tensor
    (the head reusing the embedding) is counted once. The compute order is [(unit, forward
    FLOPs per sample), ...]: each workload unit's FLOPs shared out over the FSDP units
    holding its tensors by their sizes, in model order (embedding, blocks, head): entries
    (unit, index of the workload unit, the share of its FLOPs)."""
    names = unit_names(spec, workload)
    tied = set(getattr(workload, "tied", ()))
    nbytes: dict = {ROOT: 0}
    order = []
    seen = set()
    for index, part in enumerate(workload.units):
        held: dict = {}
        for tensor, shape in part.tensors:
            unit = unit_of(tensor, names)
            values = 1
            for d in shape:
                values *= int(d)
            held[unit] = held.get(unit, 0) + values
            if tensor in seen and tensor in tied:
                continue
            seen.add(tensor)
            rows = int(shape[0]) if shape else 1
            padded = -(-rows // workers) * workers * (values // rows if rows else 1)
            nbytes[unit] = nbytes.get(unit, 0) + 4 * padded
        total = sum(held.values()) or 1
        for unit, values in held.items():
            order.append((unit, index, values / total))
    if not nbytes[ROOT]:
        del nbytes[ROOT]
    return nbytes, order
