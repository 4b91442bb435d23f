"""Which parameter-server shard owns which parameter tensors.

One pure function shared by the runner (who sends what where) and the figures (what
each shard is drawn holding), so the two can never disagree. Must not import torch.

The rule: whole tensors only, balanced by element count with the greedy
longest-processing-time heuristic, fully deterministic:
  1. sort the tensors by size, largest first (ties: model order);
  2. give each to the shard with the fewest elements so far (ties: lowest shard);
  3. list each shard's tensors in model order.
With at least as many tensors as shards (a spec rule), every shard owns one or more.
"""

from __future__ import annotations

from .errors import DtgenError
from .spec_types import Spec
from .workload import workload_of


def tensor_sizes(layers: tuple | list) -> dict[str, int]:
    """Element count of every parameter tensor of the MLP, in model order."""
    sizes: dict[str, int] = {}
    for i in range(len(layers) - 1):
        sizes[f"layers.{i}.weight"] = int(layers[i + 1]) * int(layers[i])
        sizes[f"layers.{i}.bias"] = int(layers[i + 1])
    return sizes


def assign_tensors(sizes: dict[str, int], server_ids: list[str]) -> dict[str, list[str]]:
    """Greedy balanced assignment of whole tensors (see the module docstring)."""
    order = {name: i for i, name in enumerate(sizes)}
    load = {sid: 0 for sid in server_ids}
    owned: dict[str, list[str]] = {sid: [] for sid in server_ids}
    for name in sorted(sizes, key=lambda n: (-sizes[n], order[n])):
        target = min(server_ids, key=lambda sid: (load[sid], server_ids.index(sid)))
        owned[target].append(name)
        load[target] += sizes[name]
    return {sid: sorted(names, key=order.__getitem__) for sid, names in owned.items()}


def shard_assignment(spec: Spec, sizes: dict[str, int] | None = None) -> dict[str, list[str]]:
    """Server id (``ps`` or ``ps1..psS``) -> the parameter tensors it owns, in model order.

    `sizes` (name -> elements, model order) defaults to the spec's built-in model; the
    runner passes the built model's own for a python model, which only it can know."""
    if sizes is None:
        workload = workload_of(spec)
        if workload is None:
            raise DtgenError(f"{spec.source}: the shards of a python model are known only once the runner builds it")
        sizes = workload.tensor_sizes()
    return assign_tensors(sizes, spec.topology.servers.ids)


def shard_tensors(spec: Spec) -> dict[str, list[str]]:
    """For figures: each shard's tensors, or empty lists for a python model (whose
    tensors are assigned once the runner builds it)."""
    if workload_of(spec) is None:
        return {sid: [] for sid in spec.topology.servers.ids}
    return shard_assignment(spec)
