"""Parameter servers: workers push gradients to server shards and fetch parameters back,
synchronously or asynchronously."""

from .._base import Strategy

KIND = "parameter-server"
STRATEGY = Strategy(KIND, "Parameter-server training",
                    ("push", "fetch", "wait", "update"), sync_modes=("sync", "async"), servers=(1, None), order=20)


def title(block: dict) -> str:
    return STRATEGY.title + (" (asynchronous)" if block["sync"] == "async" else "")


def rules(spec, model_blocks):
    count, tensors = spec.topology.servers.count, len(spec.training.param_tensors)
    # 0 tensors: a python model, checked once it is built (runner/strategies/parameter_server.py)
    if tensors and count > tensors:
        yield (("topology", "servers", "count"),
               f"{count} shards for {tensors} parameter tensors: each shard owns whole tensors, so at most {tensors}")


def server_refusal(ctx, verb: str) -> str | None:
    return None  # shards come and go; the rules keep at least one


def starter_block(kind: str) -> str:
    return """\
strategy:
  kind: parameter-server      # workers push gradients, servers update and send weights back
  sync: sync                  # sync: wait for every worker | async: apply each push at once"""


# An async push carries the ticket it answers, a float64, after the gradients in one
# buffer (runner/ps_wire.py); the server's gradients are views into that buffer.
ASYNC_TICKET_BYTES = 8


def expected_memory(spec, sizes) -> list:
    """Workers hold a replica and its gradients (the servers update it); each server its
    shard, the shard's averaged gradient (async: the push it applies, ticket included)
    and its optimizer state."""
    workers = [sizes.rank("worker", w, sizes.params, optimizer=False) for w in spec.topology.workers.ids]
    servers = [sizes.rank("server", sid, n) for sid, n in sizes.server_shards().items()]
    if spec.strategy.sync == "async":
        servers = [{**s, "grads": s["grads"] + ASYNC_TICKET_BYTES} for s in servers]
    return workers + servers
