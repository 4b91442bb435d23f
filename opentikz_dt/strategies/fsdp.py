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
STRATEGY = Strategy(KIND, "Sharded data-parallel training (FSDP)", "fsdp", ("allreduce", "optimizer"),
                    options=("reshard_after_forward", "units"), workers=(2, None), order=70)

# This kind's own keys when the spec leaves them out. Not schema defaults: those would be
# filled into every spec, whatever its kind (and change every resolved spec).
#   reshard_after_forward: free each unit's gathered parameters after its forward and
#     gather them again for its backward (true, ZeRO-3: least memory), or keep them
#     until the backward (false, ZeRO-2-like: one all-gather per unit and step).
#   units: module names to shard one by one (None: each block of the built-in models,
#     each child of an nn.Sequential or of the model's outermost nn.ModuleLists).
OPTION_DEFAULTS = {"reshard_after_forward": True, "units": None}


def option(spec, key: str):
    """strategy.<key> of an fsdp spec, or its default."""
    return spec.strategy.options.get(key, OPTION_DEFAULTS[key])
