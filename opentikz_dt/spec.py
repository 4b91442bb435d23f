"""The Spec: a frozen, fully-defaulted view of one experiment spec, and `load_spec`.

load_spec reads YAML (with positions), applies the JSON Schema, fills defaults, then
runs the cross-field rules and the edit contract's spec invariants, reporting every
problem at once. Consumers (figures, runner, contract) only ever see a valid Spec.
Must not import torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from .errors import SpecError
from .schema import apply_defaults, check_schema
from .strategies import STRATEGIES, strategy
from .workload import fill_kind_defaults
from .yamlpos import Located, load_located

STRATEGY_TITLES = {s.kind: s.title for s in STRATEGIES}
# Each all-reduce algorithm draws a different figure, so each has its own title.
ALLREDUCE_TITLES = {
    "native": "All-reduce data-parallel training",
    "ring": "Ring all-reduce data-parallel training",
    "tree": "Tree all-reduce data-parallel training",
    "hierarchical": "Hierarchical all-reduce data-parallel training",
}


def default_title(kind: str, sync: str = "sync", algorithm: str = "native") -> str:
    """The title a spec without one gets."""
    title = ALLREDUCE_TITLES[algorithm] if kind == "allreduce" else STRATEGY_TITLES[kind]
    return title + (" (asynchronous)" if sync == "async" else "")


@dataclass(frozen=True)
class Workers:
    count: int
    label: str
    labels: dict
    slowdown: dict

    @property
    def ids(self) -> list[str]:
        return [f"w{i}" for i in range(1, self.count + 1)]

    def label_of(self, worker_id: str) -> str:
        """The worker's label: its override, else the pattern with {i} filled in."""
        return self.labels.get(worker_id) or self.label.replace("{i}", f"{int(worker_id[1:]):,}")  # Worker 1,024

    def slowdown_of(self, worker_id: str) -> float:
        return float(self.slowdown.get(worker_id, 1.0))


@dataclass(frozen=True)
class Servers:
    count: int
    label: str

    @property
    def ids(self) -> list[str]:
        if self.count == 1:
            return ["ps"]
        return [f"ps{i}" for i in range(1, self.count + 1)]

    def label_of(self, server_id: str) -> str:
        return self.label if server_id == "ps" else f"{self.label} {server_id[2:]}"


@dataclass(frozen=True)
class Topology:
    data_label: str
    workers: Workers
    servers: Servers
    hosts: int

    def host_of(self, worker_id: str) -> int:
        """1-based host index of a worker: workers are spread evenly, in order."""
        per_host = self.workers.count // self.hosts
        return (int(worker_id[1:]) - 1) // per_host + 1


@dataclass(frozen=True)
class Strategy:
    kind: str
    sync: str
    algorithm: str
    microbatches: int
    schedule: str
    stages: int
    peers: int


@dataclass(frozen=True)
class Training:
    layers: tuple
    dataset: dict
    batch_size: int
    steps: int
    lr: float
    momentum: float
    seed: int
    model: dict = field(default_factory=dict)  # the resolved training.model section
    optimizer: dict = field(default_factory=dict)  # training.optimizer as written (kind, lr, ...)
    lr_schedule: dict = field(default_factory=dict)
    grad_clip: float | None = None
    precision: str = "fp32"
    compile: bool = False

    @property
    def model_kind(self) -> str:
        return self.model.get("kind", "mlp")

    @property
    def param_tensors(self) -> list[str]:
        """Names of the model's parameter tensors, in order (what PS shards own); empty
        for a python model, known only once the runner imports it."""
        from .workload import workload_of

        workload = workload_of({"training": {"model": self.model or {"layers": list(self.layers)}}})
        return workload.param_tensors if workload else []


@dataclass(frozen=True)
class Runtime:
    backend: str
    device: str
    timeout_s: float
    restarts: int
    checkpoint_every: int
    fault: dict | None
    trace: dict


@dataclass(frozen=True)
class FigureStyle:
    palette: str
    colsep: float
    rowsep: float
    labels: dict
    colors: dict
    icons: dict
    max_workers_drawn: int
    width: str | None = None  # column | page | '<N>cm'; None: natural width


@dataclass(frozen=True)
class Spec:
    name: str
    title: str
    topology: Topology
    strategy: Strategy
    training: Training
    runtime: Runtime
    figure: FigureStyle
    data: dict = field(repr=False)  # the resolved (defaulted) spec as plain data
    located: Located | None = field(default=None, repr=False, compare=False)

    @property
    def source(self) -> str:
        return self.located.file if self.located else "<spec>"


def resolve(data: dict, source_name: str = "spec") -> dict:
    """Schema defaults plus the defaults that depend on the strategy."""
    asked_icons = ((data.get("figure") or {}).get("icons") or {})
    data = apply_defaults(data)
    fill_kind_defaults(data["training"])
    kind = data["strategy"]["kind"]
    described = strategy(kind)
    if kind == "central-storage" and "server" not in asked_icons:
        data["figure"]["icons"]["server"] = "database"  # a store of variables, not a server process
    workers = data["topology"]["workers"]
    workers.setdefault("count", described.default_workers)
    servers = data["topology"]["servers"]
    servers.setdefault("count", described.servers[0])
    servers.setdefault("label", described.server_label)
    data["strategy"].setdefault("stages", workers["count"])
    stem = re.sub(r"[^a-z0-9-]+", "-", Path(source_name).stem.lower()).strip("-") or "spec"
    data.setdefault("name", stem[:63])
    data.setdefault("title", default_title(kind, data["strategy"]["sync"], data["strategy"].get("algorithm", "native")))
    return data


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
        strategy=Strategy(s["kind"], s["sync"], s["algorithm"], s["microbatches"], s["schedule"], s["stages"], s["peers"]),
        training=Training(tuple(tr["model"]["layers"]) if tr["model"]["kind"] == "mlp" else (), dict(tr["dataset"]),
                          tr["batch_size"], tr["steps"], float(tr["optimizer"]["lr"]),
                          float(tr["optimizer"].get("momentum", 0.9)), tr["seed"], dict(tr["model"]),
                          dict(tr["optimizer"]), dict(tr["lr_schedule"]), tr.get("grad_clip"), tr["precision"],
                          tr["compile"]),
        runtime=Runtime(rt["backend"], rt["device"], float(rt["timeout_s"]), rt["restarts"], rt["checkpoint_every"],
                        dict(rt["fault"]) if "fault" in rt else None, dict(rt["trace"])),
        figure=FigureStyle(fg["palette"], float(fg["colsep"]), float(fg["rowsep"]), dict(fg["labels"]),
                           dict(fg["colors"]), dict(fg["icons"]), fg["max_workers_drawn"],
                           fg.get("width")),
        data=data,
        located=located,
    )


def spec_from_located(located: Located, data_files: bool = True) -> Spec:
    """Schema, defaults, rules and invariants on parsed YAML; raise SpecError with all issues.

    `data_files=False` skips the checks that need the dataset file itself: a run directory's
    spec stays loadable (for its figures, comparisons, fits) where the data is not."""
    from .workload_rules import check_sections

    issues = check_schema(located) + check_sections(located)
    if issues:
        raise SpecError(issues)
    spec = build_spec(resolve(located.data, located.file), located)
    # Imported here: the rules and invariants consult the Spec type defined above.
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
