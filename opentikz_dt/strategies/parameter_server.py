"""Parameter servers: workers push gradients to server shards and fetch parameters back,
synchronously or asynchronously."""

from ._base import Strategy

KIND = "parameter-server"
STRATEGY = Strategy(KIND, "Parameter-server training", "parameter_server",
                    ("push", "fetch", "wait", "update"), sync_modes=("sync", "async"), servers=(1, None), order=20)
