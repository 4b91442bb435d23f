"""One entry point: simulate(spec, costs) runs the strategy's schedule and returns a Result.

The strategy modules (sim_ps, sim_peer, sim_pipeline) mirror runner/strategies/ one by
one; `Simulation` holds what they share (ranks, ids, model sizes, stragglers).
Must not import torch.
"""

from __future__ import annotations

from . import sim_peer, sim_pipeline, sim_ps
from .blocks import model_blocks
from .engine import Recorder, Result


def roles(spec) -> list[tuple[str, str]]:
    """(role, id) per rank, as the runner's strategies number them."""
    kind, topo = spec.strategy.kind, spec.topology
    role = "stage" if kind == "pipeline" else "worker"
    out = [(role, w) for w in topo.workers.ids]
    if kind == "parameter-server":
        out += [("server", s) for s in topo.servers.ids]
    elif kind == "central-storage":
        out.append(("storage", "ps"))
    return out


class Simulation:
    def __init__(self, spec, costs, record: bool = True):
        self.spec, self.costs = spec, costs
        r = roles(spec)
        self.ids = [i for _, i in r]
        self.rec = Recorder(self.ids, [role for role, _ in r], record)
        self.n_workers = spec.topology.workers.count
        self.slow = [spec.topology.workers.slowdown_of(i) if i.startswith("w") else 1.0 for i in self.ids]
        self.blocks = model_blocks(spec)
        self.params = sum(b.params for b in self.blocks)
        self.tensors = sum(b.tensors for b in self.blocks)
        self.nbytes = 4 * self.params


def simulate(spec, costs, steps: int | None = None, record: bool = True) -> Result:
    """Simulate `steps` (default: the spec's) steps of the spec's strategy."""
    steps = spec.training.steps if steps is None else steps
    sim = Simulation(spec, costs, record)
    kind, s = spec.strategy.kind, spec.strategy
    if kind == "parameter-server":
        (sim_ps.ps_sync if s.sync == "sync" else sim_ps.ps_async)(sim, steps)
    elif kind == "central-storage":
        sim_ps.central_storage(sim, steps)
    elif kind == "allreduce":
        (sim_peer.native if s.algorithm == "native" else sim_peer.manual)(sim, steps)
    elif kind == "gossip":
        sim_peer.gossip(sim, steps)
    elif kind == "pipeline":
        sim_pipeline.pipeline(sim, steps)
    else:
        sim_peer.single(sim, steps)
    return sim.rec.result
