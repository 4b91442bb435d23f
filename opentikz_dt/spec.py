"""The Spec: a frozen, fully-defaulted view of one experiment spec, and `load_spec`.

load_spec reads YAML (with positions), applies the JSON Schema, fills defaults, then
runs the cross-field rules and the edit contract's spec invariants, reporting every
problem of a stage at once: every schema problem, else every rule's and invariant's (the
rules read a built Spec, so they wait for values the schema accepts; leaving a bad value
out to run them anyway would judge the default in its place). Consumers (figures, runner, contract) only ever see a valid Spec.
Its types live in `spec_types` (re-exported here). Must not import torch.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

from .errors import SpecError, SpecNote
from .hardware import resolve_hardware
from .schema import apply_defaults, check_schema, numbers_meant
from .strategies import plugin, strategy
from .spec_types import FigureStyle, Runtime, Servers, Spec, Strategy, Topology, Training, Workers
from .workload import fill_kind_defaults
from .yamlpos import Located, load_located


def default_title(kind: str, sync: str = "sync", algorithm: str = "native") -> str:
    """The title a spec without one gets (the strategy plugin's `title`)."""
    return plugin(kind).title({"kind": kind, "sync": sync, "algorithm": algorithm})


def name_from_file(path: str | Path) -> str:
    """A spec's name from its file's stem, as the schema's name pattern allows (exp.yaml -> exp)."""
    return re.sub(r"[^a-z0-9-]+", "-", Path(path).stem.lower()).strip("-")[:63] or "spec"


def resolve(data: dict, source_name: str = "spec") -> dict:
    """Schema defaults plus the defaults that depend on the strategy."""
    given = data
    data = apply_defaults(data)
    fill_kind_defaults(data["training"])
    kind = data["strategy"]["kind"]
    described = strategy(kind)
    plugin(kind).resolve_defaults(data, given)
    workers = data["topology"]["workers"]
    workers.setdefault("count", described.default_workers)
    servers = data["topology"]["servers"]
    servers.setdefault("count", described.servers[0])
    servers.setdefault("label", described.server_label)
    data["strategy"].setdefault("stages", workers["count"])
    data.setdefault("name", name_from_file(source_name))
    data.setdefault("title", plugin(kind).title(data["strategy"]))
    return data


# The strategy keys every Spec carries as attributes; the rest are a plugin's `options`.
_CORE_STRATEGY_KEYS = ("kind", "sync", "algorithm", "microbatches", "schedule", "stages", "peers")


def build_spec(data: dict, located: Located | None = None) -> Spec:
    """Construct the Spec from resolved, schema-valid data (no checks here)."""
    t, s, tr, rt, fg = (data[k] for k in ("topology", "strategy", "training", "runtime", "figure"))
    return Spec(
        name=data["name"],
        title=data["title"],
        topology=Topology(
            data_label=t["data"]["label"],
            workers=Workers(t["workers"]["count"], t["workers"]["label"], dict(t["workers"]["labels"]), dict(t["workers"]["slowdown"])),
            servers=Servers(t["servers"]["count"], t["servers"]["label"]),
            hosts=t["hosts"],
        ),
        strategy=Strategy(s["kind"], s["sync"], s["algorithm"], s["microbatches"], s["schedule"], s["stages"], s["peers"],
                          {k: v for k, v in s.items() if k not in _CORE_STRATEGY_KEYS}),
        training=Training(tuple(tr["model"]["layers"]) if tr["model"]["kind"] == "mlp" else (), dict(tr["dataset"]),
                          tr["batch_size"], tr["steps"], float(tr["optimizer"]["lr"]),
                          float(tr["optimizer"].get("momentum", 0.9)), tr["seed"], dict(tr["model"]),
                          dict(tr["optimizer"]), dict(tr["lr_schedule"]), tr.get("grad_clip"), tr["precision"],
                          tr["compile"], tr["recompute"]),
        runtime=Runtime(rt["backend"], rt["device"], float(rt["timeout_s"]), rt["restarts"], rt["checkpoint_every"],
                        dict(rt["fault"]) if "fault" in rt else None, dict(rt["trace"])),
        figure=FigureStyle(fg["palette"], float(fg["colsep"]), float(fg["rowsep"]), dict(fg["labels"]),
                           dict(fg["colors"]), dict(fg["icons"]), fg["max_workers_drawn"],
                           fg.get("width")),
        data=data,
        located=located,
        hardware=resolve_hardware(data.get("hardware")),
    )


def spec_from_located(located: Located, data_files: bool = True) -> Spec:
    """Schema, defaults, rules and invariants on parsed YAML; raise SpecError with all issues.

    `data_files=False` skips the checks that need the dataset file itself: a run directory's
    spec stays loadable (for its figures, comparisons, fits) where the data is not."""
    from .workload_rules import check_sections

    for note in numbers_meant(located):  # 3e-4 at a numeric key: the number meant, said once
        warnings.warn(SpecNote(str(note)), stacklevel=2)
    issues = check_schema(located) + check_sections(located)
    if issues:
        raise SpecError(issues, more_after="the cross-field rules and invariants")
    spec = build_spec(resolve(located.data, located.file), located)
    from .invariants import check_spec_invariants
    from .rules import check_rules

    issues = check_rules(spec, data_files) + check_spec_invariants(spec)
    if issues:
        raise SpecError(issues)
    return spec


def load_spec(path: str | Path, text: str | None = None, data_files: bool = True) -> Spec:
    """Read, validate and resolve a spec file. Raises SpecError listing every problem."""
    return spec_from_located(load_located(path, text), data_files)


def spec_from_data(data: dict, name: str = "<spec>", data_files: bool = True) -> Spec:
    """Validate an in-memory spec (tests, edits); positions all point at line 1."""
    return spec_from_located(Located(name, data), data_files)
