"""Central storage: one store holds the parameters; workers push gradients and fetch."""

from ._base import Strategy

KIND = "central-storage"
STRATEGY = Strategy(KIND, "Central-storage training", "central_storage",
                    ("push", "fetch", "wait", "update"), servers=(1, 1), server_label="Central storage", order=30)
