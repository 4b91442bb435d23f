"""The edit contract's operations: each changes one spec document in place.

An operation gets an EditContext (the round-trip document plus the resolved values of
the spec before the edit) and the arguments its schema in schemas/meta.json allows. It
only states intent; whether the result is acceptable is decided afterwards by the same
schema, rules and invariants as `dtgen validate`. An operation refuses by itself only
where it can say something more useful than a rule would (removing the last worker).
Must not import torch.
"""

from __future__ import annotations

import math

from dataclasses import dataclass, field

import yaml
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedSeq

from ..schema import key_types, number_meant, yaml_number_text
from ..spec import default_title
from ..strategies import REGISTRY, all_strategies, outside_kinds, plugin, strategy
from ..workload import workload_of
from .yamldoc import YamlDoc

WORKERS = ("topology", "workers")
SERVERS = ("topology", "servers")
STRATEGY = ("strategy",)


def kind_keys() -> dict:
    """{strategy key: the one kind that reads it}; set-strategy removes them from the others.
    An outside plugin's own keys (its SCHEMA) are its kind's too."""
    owners = {key: s.kind for s in all_strategies() for key in s.options}
    for kind in outside_kinds():
        owners.update({key: kind for key in getattr(REGISTRY.raw(kind), "SCHEMA", None) or {}})
    return owners


class OperationRefused(Exception):
    """An operation that cannot apply to this spec; `path` is the key to change instead."""

    def __init__(self, path: tuple, message: str):
        super().__init__(message)
        self.path = path
        self.message = message


YAML_RT = YAML(typ="rt")  # loads a float as ruamel's ScalarFloat, which writes back as it was spelt


@dataclass
class EditContext:
    doc: YamlDoc
    data: dict  # the spec before the edit, resolved (every default filled in)
    notes: list = field(default_factory=list)  # what the user would not guess from the arguments

    @property
    def kind(self) -> str:
        return self.data["strategy"]["kind"]

    @property
    def workers(self) -> int:
        return self.data["topology"]["workers"]["count"]

    @property
    def servers(self) -> int:
        return self.data["topology"]["servers"]["count"]

    @property
    def model_blocks(self) -> int | None:
        """How many blocks the model splits into (None for a python model: known at run time)."""
        workload = workload_of(self.data)
        return len(workload.blocks) if workload else None


def _retitle(ctx: EditContext, kind: str, sync: str, algorithm: str | None = None) -> None:
    # A title the user copied from the default follows the strategy; their own stays.
    # (A valid spec's algorithm is native unless its kind has others.)
    old = ctx.doc.get(("title",))
    before = ctx.data["strategy"].get("algorithm", "native")
    if old is not None and old == default_title(ctx.kind, ctx.data["strategy"]["sync"], before):
        ctx.doc.set(("title",), default_title(kind, sync, algorithm or (before if kind == ctx.kind else "native")))


def rename_node(ctx: EditContext, node: str, label: str) -> None:
    if node == "data":
        ctx.doc.set(("topology", "data", "label"), label)
    elif node == "title":
        ctx.doc.set(("title",), label)
    elif node.startswith("w"):
        if int(node[1:]) > ctx.workers:
            raise OperationRefused(WORKERS + ("count",), f"no node '{node}': the workers are w1..w{ctx.workers}")
        ctx.doc.set(WORKERS + ("labels", node), label)
    else:
        _rename_server(ctx, node, label)


def _rename_server(ctx: EditContext, node: str, label: str) -> None:
    count = ctx.servers
    if count == 0:
        raise OperationRefused(("strategy", "kind"), f"no node '{node}': strategy '{ctx.kind}' has no server")
    if node != "ps":
        if count == 1:
            raise OperationRefused(SERVERS + ("count",), f"no node '{node}': the one server is 'ps'")
        if int(node[2:]) > count:
            raise OperationRefused(SERVERS + ("count",), f"no node '{node}': the shards are ps1..ps{count}")
        raise OperationRefused(SERVERS + ("label",), f"shards are labelled '<label> i' from one label; rename them all with --node ps (shard {node} is '{ctx.data['topology']['servers']['label']} {node[2:]}')")
    ctx.doc.set(SERVERS + ("label",), label)


def add_worker(ctx: EditContext, label: str | None = None) -> None:
    new = ctx.workers + 1
    ctx.doc.set(WORKERS + ("count",), new)
    if label is not None:
        ctx.doc.set(WORKERS + ("labels", f"w{new}"), label)
    plugin(ctx.kind).workers_changed(ctx, new)


def remove_worker(ctx: EditContext) -> None:
    count, low = ctx.workers, strategy(ctx.kind).workers[0]
    if count - 1 < low:
        need = f"{ctx.kind} needs at least {low} workers" if low > 1 else "a spec needs at least one worker"
        raise OperationRefused(WORKERS + ("count",), f"cannot remove w{count}: {need}")
    ctx.doc.set(WORKERS + ("count",), count - 1)
    for table in ("labels", "slowdown"):
        ctx.doc.delete(WORKERS + (table, f"w{count}"))
    plugin(ctx.kind).workers_changed(ctx, count - 1)


def _need_sharded_servers(ctx: EditContext, verb: str) -> None:
    refusal = plugin(ctx.kind).server_refusal(ctx, verb)
    if refusal is not None:
        raise OperationRefused(("strategy", "kind"), refusal)


def add_server(ctx: EditContext) -> None:
    _need_sharded_servers(ctx, "add")
    ctx.doc.set(SERVERS + ("count",), ctx.servers + 1)


def remove_server(ctx: EditContext) -> None:
    _need_sharded_servers(ctx, "remove")
    if ctx.servers <= 1:
        raise OperationRefused(SERVERS + ("count",), f"cannot remove ps: {ctx.kind} needs at least one server")
    ctx.doc.set(SERVERS + ("count",), ctx.servers - 1)


def change_spacing(ctx: EditContext, colsep: float | None = None, rowsep: float | None = None) -> None:
    for key, value in (("colsep", colsep), ("rowsep", rowsep)):
        if value is not None:
            ctx.doc.set(("figure", key), value)


def swap_icon(ctx: EditContext, role: str, icon: str) -> None:
    ctx.doc.set(("figure", "icons", role), icon)


def recolor(ctx: EditContext, flow: str, color: str) -> None:
    ctx.doc.set(("figure", "colors", flow), color)


def set_sync(ctx: EditContext, mode: str) -> None:
    ctx.doc.set(STRATEGY + ("sync",), mode)
    _retitle(ctx, ctx.kind, mode)


def set_label(ctx: EditContext, which: str, text: str) -> None:
    ctx.doc.set(("title",) if which == "title" else ("figure", "labels", which), text)


def set_strategy(ctx: EditContext, kind: str, algorithm: str | None = None, schedule: str | None = None) -> None:
    owners = kind_keys()
    for option, value in (("algorithm", algorithm), ("schedule", schedule)):
        owner = owners[option]
        if value is not None and kind != owner:
            raise OperationRefused(STRATEGY + (option,), f"--{option} applies to kind {owner} only, not '{kind}'")
    doc = ctx.doc
    doc.set(STRATEGY + ("kind",), kind)
    sync = ctx.data["strategy"]["sync"]
    if sync not in strategy(kind).sync_modes:
        doc.set(STRATEGY + ("sync",), "sync")
        sync = "sync"
    for key, owner in owners.items():
        if kind != owner:
            doc.delete(STRATEGY + (key,))
    workers = _fit_workers(ctx, kind)
    _fit_servers(ctx, kind)
    _drop_servers(ctx, kind)
    if algorithm is not None:
        doc.set(STRATEGY + ("algorithm",), algorithm)
    if schedule is not None:
        doc.set(STRATEGY + ("schedule",), schedule)
    plugin(kind).strategy_set(ctx, {"kind": kind, "algorithm": algorithm, "schedule": schedule}, workers)
    _retitle(ctx, kind, sync, algorithm)


def _fit_workers(ctx: EditContext, kind: str) -> int:
    """Set the worker count the new strategy needs; return it."""
    count = ctx.workers
    low, high = strategy(kind).workers
    if high is not None and count > high:
        # the workers past the new limit go, with their labels and slowdowns; the hosts
        # must still divide them
        ctx.doc.set(WORKERS + ("count",), high)
        for table in ("labels", "slowdown"):
            for worker_id in list(ctx.data["topology"]["workers"][table]):
                if int(worker_id[1:]) > high:
                    ctx.doc.delete(WORKERS + (table, worker_id))
        if high % ctx.data["topology"]["hosts"]:
            ctx.doc.set(("topology", "hosts"), 1)
        return high
    if count < low:
        count = plugin(kind).switch_workers(ctx, kind)
        ctx.doc.set(WORKERS + ("count",), count)
    return count


def _fit_servers(ctx: EditContext, kind: str) -> None:
    # Without an explicit count the default already follows the kind (spec.resolve).
    if not ctx.doc.has(SERVERS + ("count",)):
        return
    current = ctx.servers
    low, high = strategy(kind).servers  # the count kept where the new kind allows it
    target = max(current, low) if high is None else min(max(current, low), high)
    if target != current:
        ctx.doc.set(SERVERS + ("count",), target)


def _drop_servers(ctx: EditContext, kind: str) -> None:
    """A kind without servers cannot use their label: it goes, and the entry with it when
    what is left is all defaults (the count the kind resolves to anyway)."""
    low, high = strategy(kind).servers
    if high != 0 or not ctx.doc.has(SERVERS):
        return
    ctx.doc.delete(SERVERS + ("label",))
    if ctx.doc.get(SERVERS + ("count",)) == low:
        ctx.doc.delete(SERVERS + ("count",))
    if not ctx.doc.get(SERVERS):
        ctx.doc.delete(SERVERS)


def set_slowdown(ctx: EditContext, worker: str, factor: float) -> None:
    if int(worker[1:]) > ctx.workers:
        raise OperationRefused(WORKERS + ("count",), f"no worker '{worker}': the workers are w1..w{ctx.workers}")
    if factor == 1:  # 1 is "not a straggler": drop the entry rather than keep a no-op
        ctx.doc.delete(WORKERS + ("slowdown", worker))
        ctx.notes.append(f"--factor 1 removes {worker}'s slowdown entry (1 = normal speed)")
    else:
        ctx.doc.set(WORKERS + ("slowdown", worker), factor)


def set_size(ctx: EditContext, fit: str) -> None:
    if fit == "natural":
        ctx.doc.delete(("figure", "width"))
    else:
        ctx.doc.set(("figure", "width"), fit)


def set_palette(ctx: EditContext, variant: str) -> None:
    ctx.doc.set(("figure", "palette"), variant)


def set_hosts(ctx: EditContext, count: int) -> None:
    ctx.doc.set(("topology", "hosts"), count)


def set_mesh(ctx: EditContext, data: int, tensor: int, pipeline: int | None = None,
             data_parallel: str | None = None) -> None:
    """The mesh's degrees, and the worker count with them (their product), in one edit:
    set separately, the spec would be invalid in between."""
    refusal = plugin(ctx.kind).mesh_refusal(ctx)
    if refusal is not None:
        raise OperationRefused(("strategy", "kind"), refusal)
    given = dict(ctx.data["strategy"].get("parallelism") or {})
    written = {"data": data, "tensor": tensor} | ({} if pipeline is None else {"pipeline": pipeline})
    for dim, degree in written.items():  # a pipeline degree left out stays as it is (or out)
        ctx.doc.set(STRATEGY + ("parallelism", dim), degree)
    degrees = {"pipeline": 1} | given | written
    if data_parallel is not None:
        ctx.doc.set(STRATEGY + ("data_parallel",), data_parallel)
    count = math.prod(degrees.values())
    if count != ctx.workers:
        old = ctx.workers
        ctx.doc.set(WORKERS + ("count",), count)
        for table in ("labels", "slowdown"):  # the workers past the new count go with their entries
            for worker_id in list(ctx.data["topology"]["workers"][table]):
                if int(worker_id[1:]) > count:
                    ctx.doc.delete(WORKERS + (table, worker_id))
        ctx.notes.append(f"topology.workers.count: {old} -> {count} (= {degrees['pipeline']} pipeline x "
                         f"{degrees['data']} data x {degrees['tensor']} tensor)")


def set_name(ctx: EditContext, name: str) -> None:
    ctx.doc.set(("name",), name)
    ctx.notes.append(f"output files are now named after '{name}' (figures/{name}/, runs/{name}-...)")


def set_worker_labels(ctx: EditContext, pattern: str) -> None:
    ctx.doc.set(WORKERS + ("label",), pattern)
    overrides = ctx.data["topology"]["workers"]["labels"]
    if overrides:  # "all workers" means all: a per-worker label would still win
        ctx.doc.delete(WORKERS + ("labels",))
        ctx.notes.append("removed the per-worker label overrides " + ", ".join(
            f"{w}: {text!r}" for w, text in overrides.items()) + " so every worker follows the pattern")


def set_key(ctx: EditContext, key: str, value) -> None:
    # The long tail of spec keys no named operation covers (training, runtime, ...).
    # A command-line word is read as YAML, so "0.05" is a number and "[2, 16, 1]" a list.
    if isinstance(value, str):
        try:
            value = yaml.safe_load(value) if value.strip() else value
        except yaml.YAMLError:
            pass
    meant = number_meant(value, key_types(tuple(key.split(".")), ctx.kind))
    if meant is not None:  # 3e-4 at a numeric key: YAML 1.1 reads it as text, the user meant a number
        written = meant if isinstance(meant, int) else yaml_number_text(value)
        ctx.notes.append(f"{key}: read {value} as the number {meant}, written {written} (YAML reads {value} as text)")
        value = meant if isinstance(meant, int) else YAML_RT.load(written)  # a ScalarFloat keeps that spelling
    if isinstance(value, list):  # a short list reads best on one line, as the examples write layers
        value = CommentedSeq(value)
        value.fa.set_flow_style()
    ctx.doc.set(tuple(key.split(".")), value)


OPERATIONS = {
    "rename-node": rename_node,
    "add-worker": add_worker,
    "remove-worker": remove_worker,
    "add-server": add_server,
    "remove-server": remove_server,
    "change-spacing": change_spacing,
    "swap-icon": swap_icon,
    "recolor": recolor,
    "set-sync": set_sync,
    "set-strategy": set_strategy,
    "set-label": set_label,
    "set-slowdown": set_slowdown,
    "set-size": set_size,
    "set-palette": set_palette,
    "set-hosts": set_hosts,
    "set-mesh": set_mesh,
    "set-name": set_name,
    "set-worker-labels": set_worker_labels,
    "set": set_key,
}
