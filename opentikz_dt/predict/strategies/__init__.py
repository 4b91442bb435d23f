"""The predict side's strategy plugins: one module per `strategy.kind` (named after it,
'-' as '_': parameter-server -> parameter_server.py; DTGEN_PLUGINS adds `<package>.predict`
modules, opentikz_dt/plugins.py). The predictor never compares a kind, algorithm, sync
mode or schedule itself: it asks the kind's plugin, `REGISTRY.get(kind)`. A plugin writes
only what differs from `_defaults.py` (a data-parallel strategy whose ranks are the
topology's workers, role `worker`, each computing the whole model on its slice of the
batch).

To add a strategy, write `<kind>.py` here with `KIND = "<kind>"` and `simulate_steps`,
and whatever below differs from the default. A plugin may compare its own algorithms
(`spec.strategy.algorithm == "ring"`); nothing outside the plugins does.

Ranks (simulate.py, phases.py; the runner numbers them the same way)
  roles(spec) -> [(role, id), ...]      every rank in rank order: workers first (default:
                                        ("worker", id) per topology worker), then e.g. servers
  role_of(spec, ident) -> role          the role of a traced rank from its id (a run's trace
                                        names ids, not roles; default: ps* -> "server", else
                                        "worker")
  COMPUTE_ROLE                          the role whose ranks run forward/backward ("worker")
  active_ranks(spec) -> float           how many ranks compute at once, sharing the cores
                                        (default: every worker; a pipeline's bubble idles some)
  model_parts(spec) -> int              over how many ranks one copy of the parameters is
                                        split (default 1; a pipeline: one stage per worker)
  simulation_weight(spec) -> float      the cost of simulating one rank-step over a plain
                                        data-parallel one's (the size bounds weigh by it;
                                        default 1; a mesh: its microbatches x collectives)

Simulation (simulate.py)
  simulate_steps(sim, steps)            play `steps` steps of the schedule into `sim.rec`
                                        (engine.Recorder: spans, messages, step ends), with the
                                        costs in `sim.costs` (costs.Costs). `sim` is a
                                        simulate.Simulation: ids, blocks, params, stragglers'
                                        slowdown, and the shared pieces sim.start (untraced
                                        time before a step), sim.compute (forward, backward,
                                        straggler sleep), sim.optimizer. Required.

Datasheet cluster prediction (cluster.py, `hardware:` specs)
  cluster_layout(spec) -> (p, d, t, algorithm, sharded, overlap)
                                        pipeline, data and tensor degrees, the all-reduce
                                        algorithm (ring, tree, native), parameters sharded,
                                        gradient all-reduce under the backward; default:
                                        every worker data-parallel, native, replicas, no overlap

Overrides (predict.py)
  resize(strategy, workers)             `dtgen predict --workers N`: set what else in the
                                        strategy block (plain data) follows the worker count
                                        (a pipeline's stages); default: nothing

Carried to more processes than cores (transfer.py)
  waits_as_ring_hops(spec) -> bool      its messages wait for a core as a ring's hops do, each
                                        on a predecessor in a chain: the crowded run's wait
                                        grows as (1 - c/k), not as (k - c)/c (default False:
                                        lone messages; the all-reduce's ring and native, gloo's
                                        ring)

Synthetic runs (synthetic.py: tests and benchmarks of the measured figures)
  SYNTHETIC_RUNS = ("name", ...)        the synthetic run names this kind writes (ps-sync,
                                        allreduce-ring, ...); default none
  synthetic_strategy(name, topology, microbatches) -> dict
                                        the strategy block of synthetic run `name`; may add to
                                        `topology` (plain data, e.g. a server)

Sweeps (sweep.py, `dtgen predict --sweep workers=...`)
  sweep_note(points) -> str | None      a line under the scaling figure saying why it scales as
                                        it does; points: [(workers, spec, costs, step ms)];
                                        default none
  shapes(spec, workers) -> list | None  `--sweep shapes`: the layouts of `workers` workers to
                                        compare, [(label, (override, ...), refusal or None)];
                                        default None (one layout per worker count; a mesh:
                                        its degrees at the spec's global batch)

Calibration fit from a run (fit.py, `dtgen calibrate --from RUN`; `fit` is a fit.RunFit:
run, role, blocks, flops, phases, beta, spec, workers, params)
  fit_compute(fit) -> (fwd, bwd)        per block, forward and backward µs per sample (default:
                                        the compute role's mean forward/backward split over
                                        the blocks by FLOPs, fit.per_row)
  fit_message_latency(fit, comm) -> s   the message latency (s) the run shows, or None (then
                                        the base calibration's stays); may set collectives'
                                        latencies in `comm` (the calibration's comm section)
                                        itself. Default: None
  message_samples(fit) -> [(µs, bytes)] each steady single message the run traced (the
                                        floor of their latencies is a message alone, the rest
                                        waits for a core: transfer.py); default none
  gradients_per_update(spec) -> int     gradients one server update sums (default 1)
  fit_noise(fit) -> dict                extra `noise` entries of the calibration (default none)
  finish_fit(cal, run) -> Calibration   a last adjustment of the fitted calibration (a
                                        pipeline solves its message latency by simulation);
                                        default: unchanged

Must not import torch.
"""

from __future__ import annotations

from ...plugins import SideRegistry

REGISTRY = SideRegistry("predict", __name__, defaults=f"{__name__}._defaults")
