"""Decentralized gossip: each worker averages parameters with its peers, no global sync."""

from ._base import Strategy

KIND = "gossip"
STRATEGY = Strategy(KIND, "Decentralized gossip training", "gossip", ("gossip", "optimizer"),
                    options=("peers",), workers=(2, None), order=50)
