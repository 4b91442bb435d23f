"""Cross-field rules: what the schema alone cannot say (async needs a server, ...).

Each rule returns Issues located at the key a user should change. Must not import torch.
"""

from __future__ import annotations

from .errors import Issue
from .hardware import check_hardware, hardware_warnings
from .spec_types import Spec
from .strategies import kinds, kinds_with, plugin, strategy
from .training_rules import check_training
from .workload_rules import block_count, check_workload


def check_rules(spec: Spec, data_files: bool = True) -> list[Issue]:
    """`data_files=False`: leave out what needs the dataset file (spec.spec_from_located)."""
    issues: list[Issue] = []
    for rule in (_sync_rule, _options_rule, _server_rule, _worker_rule, _host_rule, _strategy_rules,
                 lambda s: check_workload(s, data_files), check_training, _fault_rule, _hardware_rule):
        issues += [spec.located.issue(path, message) for path, message in rule(spec)]
    return issues


def _sync_rule(spec: Spec):
    s = spec.strategy
    described = strategy(s.kind)
    if s.sync not in described.sync_modes:
        owners = " or kind: ".join(kinds_with(lambda d: s.sync in d.sync_modes))
        yield ("strategy", "sync"), f"{s.sync} updates need a parameter server; strategy.kind is '{s.kind}' (use kind: {owners} or sync: sync)"
    if s.algorithm not in described.algorithms:
        owners = ", ".join(kinds_with(lambda d: s.algorithm in d.algorithms))
        yield ("strategy", "algorithm"), f"algorithm '{s.algorithm}' applies to kind: {owners} only, not '{s.kind}'"


def _options_rule(spec: Spec):
    """A strategy key only other kinds read (strategy.units in an allreduce spec) would be
    ignored without a word: refuse it, naming the kinds that read it."""
    s = spec.strategy
    ignored = [key for key in s.options if key not in _own_keys(s.kind)]
    # stages resolves to the worker count for every kind (spec.resolve), so a run's resolved
    # spec.yaml carries it; another value is one a user wrote for a kind that never reads it
    if "stages" not in _own_keys(s.kind) and s.stages != spec.topology.workers.count:
        ignored.append("stages")
    for key in ignored:
        owners = ", ".join(k for k in kinds() if key in _own_keys(k)) or "none"
        yield ("strategy", key), f"{key} applies to kind: {owners} only, not '{s.kind}' (remove it)"


def _own_keys(kind: str) -> set:
    """The strategy keys a kind reads: its descriptor's options and its plugin's SCHEMA."""
    return set(strategy(kind).options) | set(plugin(kind).SCHEMA)


def _server_rule(spec: Spec):
    kind, count = spec.strategy.kind, spec.topology.servers.count
    path = ("topology", "servers", "count")
    low, high = strategy(kind).servers
    if high != 0:
        if count < low:
            yield path, f"{kind} needs at least {low} server, got {count}"
        if high is not None and count > high:
            yield path, f"{kind} keeps the variables on one host: servers.count must be {high}, got {count}"
    elif count != 0:
        yield path, f"{kind} has no parameter server: servers.count must be 0, got {count}"


def _worker_rule(spec: Spec):
    w, kind = spec.topology.workers, spec.strategy.kind
    low, high = strategy(kind).workers
    if high == 1 and w.count != 1:
        yield ("topology", "workers", "count"), f"{kind} trains on one device: workers.count must be 1, got {w.count}"
    elif high is not None and w.count > high:
        yield ("topology", "workers", "count"), f"{kind} takes at most {high} workers, got {w.count}"
    if w.count < low:
        yield ("topology", "workers", "count"), f"{kind} needs at least {low} workers, got {w.count}"


def _host_rule(spec: Spec):
    hosts, count = spec.topology.hosts, spec.topology.workers.count
    if hosts > count:
        yield ("topology", "hosts"), f"{hosts} hosts for {count} workers: every host needs a worker"
    elif count % hosts:
        yield ("topology", "hosts"), f"{count} workers do not spread evenly over {hosts} hosts"


def _strategy_rules(spec: Spec):
    """What only the spec's strategy knows it cannot run (its plugin's `rules`)."""
    yield from plugin(spec.strategy.kind).rules(spec, lambda: block_count(spec))


def _fault_rule(spec: Spec):
    fault = spec.runtime.fault
    if fault is None:
        return
    world = spec.topology.workers.count + spec.topology.servers.count
    if fault["rank"] >= world:
        yield ("runtime", "fault", "rank"), f"rank {fault['rank']} does not exist: the run has ranks 0..{world - 1}"
    if fault["at_step"] >= spec.training.steps:
        yield ("runtime", "fault", "at_step"), f"step {fault['at_step']} is past the last step ({spec.training.steps - 1})"


def _hardware_rule(spec: Spec):
    """The `hardware:` block's presets exist, fit each other, the precision and the GPU count."""
    yield from check_hardware(spec.data.get("hardware"), spec.training.precision, spec.topology.workers.count)


def tensor_degree(spec: Spec) -> int:
    """GPUs one tensor-parallel group spans: the strategy plugin's `tensor_degree` (the
    mesh's tensor degree, every worker for kind tensor, else 1)."""
    return plugin(spec.strategy.kind).tensor_degree(spec)


def check_warnings(spec: Spec) -> list[str]:
    """Located lines for what is valid but costly (validate, figure and predict print them)."""
    return [str(spec.located.issue(path, message))
            for path, message in hardware_warnings(spec.data.get("hardware"), tensor_degree(spec),
                                                   spec.topology.workers.count)]
