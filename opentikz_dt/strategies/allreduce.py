"""All-reduce data parallelism: torch's own (native) or dtgen's ring, tree and
hierarchical all-reduce, written out so the trace shows every message."""

from ._base import Strategy

KIND = "allreduce"
STRATEGY = Strategy(KIND, "All-reduce data-parallel training", "allreduce", ("allreduce", "optimizer", "wait"),
                    algorithms=("native", "ring", "tree", "hierarchical"), options=("algorithm",), workers=(2, None),
                    drawers=("allreduce", "ring", "tree", "hierarchical"), order=40)
