"""Decentralized gossip: each worker averages parameters with its peers, no global sync."""

from .._base import Strategy

KIND = "gossip"
STRATEGY = Strategy(KIND, "Decentralized gossip training", ("gossip", "optimizer"),
                    options=("peers",), workers=(2, None), order=50)


def rules(spec, model_blocks):
    if spec.strategy.peers >= spec.topology.workers.count:
        yield ("strategy", "peers"), f"each worker can have at most {spec.topology.workers.count - 1} peers"


def strategy_set(ctx, args: dict, workers: int) -> None:
    if ctx.data["strategy"]["peers"] >= workers:
        ctx.doc.set(("strategy", "peers"), workers - 1)


def starter_block(kind: str) -> str:
    return """\
strategy:
  kind: gossip                # decentralized: each worker averages parameters with its peers
  peers: 2                    # ring neighbours per step"""


def neighbours(rank: int, n: int, peers: int) -> tuple[list[int], list[int]]:
    """(send to, receive from): offsets +1, -1, +2, -2, ... cut to `peers`. One definition
    for the runner's exchanges and the predictor's simulation of them."""
    offsets: list[int] = []
    k = 1
    while len(offsets) < peers:
        offsets.append(k)
        if len(offsets) < peers:
            offsets.append(-k)
        k += 1
    return [(rank + o) % n for o in offsets], [(rank - o) % n for o in offsets]
