"""All-reduce data parallelism: torch's own (native) or dtgen's ring, tree and
hierarchical all-reduce, written out so the trace shows every message."""

from .._base import Strategy

KIND = "allreduce"
STRATEGY = Strategy(KIND, "All-reduce data-parallel training", ("allreduce", "optimizer", "wait"),
                    algorithms=("native", "ring", "tree", "hierarchical"), options=("algorithm",), workers=(2, None),
                    drawers=("allreduce", "ring", "tree", "hierarchical"), order=40)

# Each algorithm draws a different figure, so each has its own title.
TITLES = {
    "native": "All-reduce data-parallel training",
    "ring": "Ring all-reduce data-parallel training",
    "tree": "Tree all-reduce data-parallel training",
    "hierarchical": "Hierarchical all-reduce data-parallel training",
}


def title(block: dict) -> str:
    return TITLES[block.get("algorithm", "native")]


def rules(spec, model_blocks):
    if spec.strategy.algorithm == "hierarchical" and spec.topology.hosts < 2:
        yield ("topology", "hosts"), "hierarchical all-reduce needs at least 2 hosts"


def strategy_set(ctx, args: dict, workers: int) -> None:
    if args.get("algorithm") == "hierarchical" and ctx.data["topology"]["hosts"] < 2:
        ctx.doc.set(("topology", "hosts"), 2)


def node_spec_path(node: str, parts: list[str]) -> tuple | None:
    # the all-reduce box (ar...) and the ring's arrows (...-ring-N) follow the algorithm
    if parts[0] == "ar" or parts[-2:-1] == ["ring"]:
        return ("strategy", "algorithm")
    return None


def starter_block(kind: str) -> str:
    return """\
strategy:
  kind: allreduce             # every worker averages gradients with every other
  algorithm: native           # native (PyTorch's collective) | ring | tree | hierarchical"""
