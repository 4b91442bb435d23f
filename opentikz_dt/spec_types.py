"""The Spec's types: frozen dataclasses of one fully-defaulted experiment spec.

No loading and no checks here (`spec` loads, `rules` and `invariants` check): the rules
import these types, and `spec` imports the rules, so the types sit below both.
Must not import torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .hardware import Hardware
from .yamlpos import Located


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
    # Keys only a plugin strategy reads (its descriptor's `options` beyond the ones above),
    # as the spec gives them after defaults.
    options: dict = field(default_factory=dict, hash=False)


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
    recompute: str = "none"  # none | selective | full (runner/model.py's apply_recompute)

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
    hardware: Hardware | None = None  # the optional `hardware:` block (opentikz_dt.hardware); None: none given

    @property
    def source(self) -> str:
        return self.located.file if self.located else "<spec>"
