"""Central storage: one store holds the parameters; workers push gradients and fetch."""

from .._base import Strategy

KIND = "central-storage"
STRATEGY = Strategy(KIND, "Central-storage training",
                    ("push", "fetch", "wait", "update"), servers=(1, 1), server_label="Central storage", order=30)


def resolve_defaults(data: dict, given: dict) -> None:
    if "server" not in ((given.get("figure") or {}).get("icons") or {}):
        data["figure"]["icons"]["server"] = "database"  # a store of variables, not a server process


def server_refusal(ctx, verb: str) -> str | None:
    return (f"cannot {verb} a server: central-storage keeps the variables on exactly one host "
            "(set-strategy --kind parameter-server for shards)")


def starter_block(kind: str) -> str:
    return """\
strategy:
  kind: central-storage       # variables on one host, compute replicated, sync updates"""


def expected_memory(spec, sizes) -> list:
    """Workers hold a replica and its gradients; the storage rank the whole model, the
    averaged gradient and the optimizer state."""
    workers = [sizes.rank("worker", w, sizes.params, optimizer=False) for w in spec.topology.workers.ids]
    return workers + [sizes.rank("storage", spec.topology.servers.ids[0], sizes.params)]
