"""`dtgen calibrate`: measure what the predictor needs, with as many processes as the run has.

The run's CPU sharing, its gloo costs between processes and its per-call overheads are
only what they are with the run's process count on this machine, so the probe starts
that many processes (gloo on CPU, one thread each) and measures, each rank at once
where the run does things at once:
  - every model block's forward and backward at two batch sizes, first on rank 0
    alone (solo costs) and then on all ranks at once (how much slower sharing the
    cores makes them: the effective core count);
  - SGD optimizer step (per tensor and per element) and gradient summation;
  - point-to-point messages at several sizes (pairs ping-pong at once) and
    all-reduce / broadcast / reduce over all ranks at several sizes, fitted to
    latency + bytes / bandwidth; the collectives in rounds spread over the probe
    (COLLECTIVE_ROUNDS: their median fitted, each round kept for the interval);
  - the per-step work the trace does not cover (batch gathering, loss.item()).
Rank 0 writes the calibration JSON (opentikz_dt/predict/calibration.py documents it).
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

REPS = 25
# The probe's collectives are timed in this many rounds spread over the probe, ROUND_REPS
# calls each: their median is the fit, the fastest and slowest rounds the interval's ends
# (predict.py). One block of 25 calls measured a ring calibration's all-reduce latency at
# 751, 980 and 1353 us in three calibrations on one machine, and a strategy whose
# collectives only the probe measured carried that whole.
COLLECTIVE_ROUNDS, ROUND_REPS = 3, 12
REPEAT_STEPS = 40  # the crowded run repeated (crowding.py, repeat.run_again): for the interval
RUNS = 3  # runs of the spec: the fit is the median one's, the others' spread the interval's (_refine_with_run)


def _median_time(fn, reps: int = REPS) -> float:
    """Mean seconds per call, the slowest call left out. A mean, not a median: on shared
    cores a step pays for the occasional preemption, and step times are means."""
    fn()  # warm: first calls allocate
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    times.sort()
    return statistics.fmean(times[:-1]) if len(times) > 2 else statistics.fmean(times)


def _rate(fn, seconds: float = 0.4) -> tuple[float, list]:
    """(seconds per call, each call's time) of fn called back to back for about `seconds`:
    the throughput with the cores shared, and the spread of single calls (preemptions)."""
    fn()
    times, t0 = [], time.perf_counter()
    while True:
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
        elapsed = time.perf_counter() - t0
        if elapsed >= seconds:
            return elapsed / len(times), times


def _fit(points) -> tuple[float, float]:
    """Least squares y = a + b x over (x, y) points (latency a, cost per byte b), both >= 0."""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mx) ** 2 for x in xs)
    b = max(sum((x - mx) * (y - my) for x, y in points) / var if var else 0.0, 0.0)
    a = my - b * mx
    if a <= 0:
        # Noise on a loaded machine tilted the line below the origin; a message never costs
        # nothing, and the smallest one is latency-bound: take its time as the latency and
        # fit the per-byte cost on what is left.
        x0 = min(xs)
        a = min(y for x, y in points if x == x0)
        sq = sum(x * x for x in xs)
        b = max(sum(x * (y - a) for x, y in points) / sq, 0.0) if sq else 0.0
    return a, b


def _units(spec, model) -> list:
    """Callables per unit, in the order of opentikz_dt.workload (prologue, blocks, epilogue),
    or of runner/describe.py for a python model."""
    kind = spec.training.model_kind
    if kind == "python":
        from .describe import model_units

        return [unit for _, unit in model_units(model)]
    if kind == "mlp":
        layers = list(model.layers)
        last = len(layers) - 1
        return [(lambda x, layer=layer, relu=(i < last): torch.relu(layer(x)) if relu else layer(x))
                for i, layer in enumerate(layers)]
    if kind == "transformer":
        return [model.embed, *model.blocks, model.head]
    if kind == "cnn":
        return [lambda x: torch.relu(model.stem(x)), *model.blocks, lambda h: model.head(h.mean(dim=(2, 3)))]
    raise ValueError(f"the probe cannot time model kind {kind!r}")


def _samples(spec, where: dict, rows: int | None = None):
    """(x, y): the first `rows` samples of the spec's dataset (all of a tensor-backed one)."""
    from .data import Data

    data = Data(spec, "cpu", where.get("dataset_path"), where.get("spec_dir"))
    return data.take(data.indices(0, min(data.n, rows or data.n)))


def _block_times(spec, sizes, where: dict) -> list[dict]:
    """Mean forward and backward seconds of every unit at each batch size (the last with the loss)."""
    from .model import build_model, make_loss

    model = build_model(spec, "cpu", where.get("spec_dir"))
    loss_fn = make_loss(spec, where.get("spec_dir"))
    units = _units(spec, model)
    xs, ys = _samples(spec, where, max(sizes))
    out = [{"forward": [], "backward": []} for _ in units]
    for rows in sizes:
        h, target = xs[:rows], ys[:rows]
        for i, unit in enumerate(units):
            x = h.detach().requires_grad_(h.is_floating_point())
            last = i == len(units) - 1

            def fwd(unit=unit, x=x, last=last):
                y = unit(x)
                return loss_fn(y, target) if last else y

            with torch.no_grad():
                h = unit(x)  # the next unit's input
            grad = None if last else torch.ones_like(h)
            out[i]["forward"].append((rows, _median_time(fwd)))

            def bwd_timed(fwd=fwd, grad=grad):
                y = fwd()
                t0 = time.perf_counter()
                y.backward(grad)
                return time.perf_counter() - t0

            bwd_timed()
            times = sorted(bwd_timed() for _ in range(REPS))
            out[i]["backward"].append((rows, statistics.fmean(times[:-1])))
    return out


def _step_loop(spec, where: dict):
    """One forward and backward of the whole model at the worker batch (the sharing probe)."""
    from .model import build_model, make_loss

    model = build_model(spec, "cpu", where.get("spec_dir"))
    loss_fn = make_loss(spec, where.get("spec_dir"))
    x, y = _samples(spec, where, spec.training.batch_size)

    def step():
        model.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()

    return step


def _optimizer_times(spec, where: dict) -> tuple[list, float]:
    from .model import build_model, build_optimizer

    params = list(build_model(spec, "cpu", where.get("spec_dir")).parameters())
    for p in params:
        p.grad = torch.randn_like(p)
    opt = build_optimizer(spec, params)
    total = sum(p.numel() for p in params)
    flat = torch.nn.Parameter(torch.zeros(total))
    flat.grad = torch.randn(total)
    flat_opt = build_optimizer(spec, [flat])
    t_all, t_flat = _median_time(opt.step), _median_time(flat_opt.step)
    per_param = t_flat / total
    per_tensor = max(0.0, (t_all - t_flat) / max(1, len(params) - 1))
    a, b = torch.zeros(total), torch.randn(total)
    add = _median_time(lambda: a.add_(b)) / total
    return [per_tensor, per_param], add


def _p2p(rank: int, world: int, sizes) -> list:
    """One-way seconds per size, pairs (0,1), (2,3), ... ping-ponging at once."""
    import torch.distributed as dist

    peer = rank ^ 1
    out = []
    for nbytes in sizes:
        buf = torch.zeros(max(1, nbytes // 4))
        dist.barrier()
        if peer >= world:
            out.append((nbytes, math.nan))
            continue

        def pingpong():
            if rank % 2 == 0:
                dist.send(buf, peer)
                dist.recv(buf, peer)
            else:
                dist.recv(buf, peer)
                dist.send(buf, peer)

        out.append((nbytes, _median_time(pingpong) / 2))
    return out


def _collectives(world: int, sizes, reps: int) -> dict:
    """Seconds per call of each collective at each size: {name: [(bytes, seconds), ...]}."""
    import torch.distributed as dist

    ops = {"allreduce": lambda t: dist.all_reduce(t), "broadcast": lambda t: dist.broadcast(t, 0),
           "reduce": lambda t: dist.reduce(t, 0)}
    out = {}
    for name, op in ops.items():
        points = []
        for nbytes in sizes:
            buf = torch.zeros(max(1, nbytes // 4))
            dist.barrier()
            points.append((nbytes, _median_time(lambda: op(buf), reps)))
        out[name] = points
    return out


def _middle_round(rounds: list[dict]) -> dict:
    """Each collective and size's median over the probe's rounds (_rank_main)."""
    return {name: [(nbytes, statistics.median(r[name][i][1] for r in rounds))
                   for i, (nbytes, _) in enumerate(rounds[0][name])] for name in rounds[0]}


def _overhead(spec, where: dict) -> float:
    """Per-step work outside the traced spans: gather the batch rows, loss.item(), a clock read."""
    x, y = _samples(spec, where)
    n = len(x)
    loss = torch.tensor(1.0)
    idx = torch.randperm(n)[:spec.training.batch_size]

    def skeleton():
        x[idx], y[idx]
        loss.item()
        time.perf_counter()

    return _median_time(skeleton, 50)


def _rank_main(rank: int, world: int, spec_data: dict, store_path: str, out_path: str, where: dict) -> None:
    import torch.distributed as dist

    from ..spec import spec_from_data

    torch.set_num_threads(1)
    spec = spec_from_data(spec_data)
    store = dist.FileStore(store_path, world)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
    try:
        batch = spec.training.batch_size
        sizes = sorted({max(1, batch // max(1, spec.strategy.microbatches)), batch})
        if len(sizes) == 1:
            sizes = [max(1, batch // 4), batch] if batch > 1 else [1, 2]
        from ..predict.blocks import model_blocks

        workload = _describe(spec, where)  # a python model: what it is (every rank sizes messages by it)
        model_bytes = 4 * sum(b.params for b in model_blocks(spec))
        coll_sizes = sorted({1024, max(4096, model_bytes), 4 << 20})
        rounds = [_collectives(world, coll_sizes, ROUND_REPS)]  # the first round, before any compute
        solo = _block_times(spec, sizes, where) if rank == 0 else None
        step = _step_loop(spec, where)
        solo_step = _rate(step)[0] if rank == 0 else None
        dist.barrier()
        together, calls = _rate(step)  # every rank at once, as workers compute in a run
        rounds += [_collectives(world, coll_sizes, ROUND_REPS) for _ in range(COLLECTIVE_ROUNDS - 2)]
        optimizer, add = _optimizer_times(spec, where) if rank == 0 else (None, None)
        dist.barrier()
        overhead = _overhead(spec, where)
        msg_sizes = sorted({256, 16 << 10, max(1024, model_bytes // 4), max(4096, model_bytes), 4 << 20})
        p2p = _p2p(rank, world, msg_sizes)
        rounds.append(_collectives(world, coll_sizes, ROUND_REPS))  # the last, after everything else
        gathered = [None] * world
        dist.all_gather_object(gathered, {"together": together, "calls": calls, "overhead": overhead, "p2p": p2p})
        if rank == 0:
            _write(spec, world, solo, solo_step, gathered, optimizer, add, rounds, out_path, workload)
        dist.barrier()  # nobody tears down while a peer may still talk to it (as runner/worker.py)
    finally:
        dist.destroy_process_group()
    # Leave without the interpreter's teardown: a probe rank sometimes died there with
    # "terminate called without an active exception" (SIGABRT, a C++ thread still joinable
    # at exit), seen in 3 of 4 full test runs, never alone. Everything is written by now.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _describe(spec, where: dict) -> dict | None:
    """A python model's description (runner/describe.py), learned by the predictor; None for
    the built-in kinds, which the predictor describes itself."""
    if spec.training.model_kind != "python":
        return None
    from ..predict.blocks import learn_model
    from ..workload import model_section
    from .describe import describe_model
    from .model import build_model

    x, _ = _samples(spec, where, 2)
    description = describe_model(build_model(spec, "cpu", where.get("spec_dir")), x)
    learn_model(model_section(spec), description)
    return description


def _write(spec, world, solo, solo_step, gathered, optimizer, add, rounds, out_path, workload=None) -> None:
    from ..predict.blocks import model_signature
    from ..predict.calibration import FORMAT, Calibration, cpu_device, machine_info, training_of

    batch = spec.training.batch_size
    from ..predict.blocks import model_blocks

    blocks = []
    for unit, entry in zip(model_blocks(spec), solo):
        blocks.append({"name": unit.name, "forward": list(_fit(entry["forward"])),
                       "backward": list(_fit(entry["backward"]))})
    shared = statistics.fmean(g["together"] for g in gathered)
    cores = max(1.0, min(float(world), world * solo_step / shared)) if shared > 0 else float(world)
    pairs = [p for g in gathered for p in g["p2p"] if not math.isnan(p[1])]
    comm = {}
    alpha, beta = _fit(pairs) if pairs else (0.0, 0.0)
    comm["p2p"] = {"alpha_s": alpha, "beta_s_per_byte": beta}
    n = world
    coll = _middle_round(rounds)
    levels = max(1, math.ceil(math.log2(n))) if n > 1 else 1

    # a collective's fit as the cost of one of its steps (the simulator's unit): (steps, the
    # per-byte cost's factor). The all-reduce: 2(n - 1) steps, each moving 1/n of the bytes;
    # broadcast and reduce: a binomial tree's levels, each moving them all.
    shapes = {"allreduce": (2 * (n - 1), n / (2 * (n - 1))) if n > 1 else (1, 1.0),
              "broadcast": (levels, 1 / levels), "reduce": (levels, 1 / levels)}

    def per_step(name, points):
        a, b = _fit(points)
        steps, moved = shapes[name]
        return a / steps, b * moved

    for name in shapes:
        a, b = per_step(name, coll[name])
        # "measured": "probe": called back to back with nothing computing between, so no call
        # waits for its process to get a core back, as a run's do (predict/transfer.py collective_wait)
        comm[name] = {"alpha_s": a, "beta_s_per_byte": b, "measured": "probe",
                      "rounds": [list(per_step(name, r[name])) for r in rounds]}
    # how single steps spread around the mean when every rank computes at once
    ratios = sorted(t / g["together"] for g in gathered for t in g["calls"] if g["together"] > 0)
    if len(ratios) > 400:
        ratios = [ratios[int(i * len(ratios) / 400)] for i in range(400)]
    data = {"dtgen_calibration": FORMAT, "source": "probe", "machine": machine_info(),
            # the probe's processes compute and talk on the CPU, whatever the spec's device, and
            # time the blocks in fp32 with the spec's optimizer: a probe-only calibration of a
            # bf16 spec says fp32, so predict refuses it (a short run of the spec, the default,
            # measures the spec's precision and is fitted on top: fit.py records the run's)
            "device": cpu_device(), "training": dict(training_of(spec.data), precision="fp32"),
            "torch": torch.__version__, "model": dict(model_signature(spec), **({"workload": workload} if workload else {})),
            "ranks": world,
            "cores_effective": round(cores, 3),
            "compute": {"blocks": blocks, "optimizer": optimizer, "add_per_param_s": add,
                        "step_overhead_s": statistics.fmean(g["overhead"] for g in gathered)},
            "comm": comm,
            "noise": {"compute_ratios": [round(r, 4) for r in ratios]},
            "measured": {"batch": batch, "solo_step_s": solo_step, "shared_step_s": shared,
                         "p2p": pairs, "collectives": coll, "collective_rounds": rounds}}
    Calibration(data).save(out_path)


def _where(spec, spec_path) -> dict:
    """Where a python model's module and a dataset file are found: beside the spec, as in `dtgen run`."""
    spec_dir = Path(spec_path).resolve().parent if spec_path else Path.cwd()
    where = {"spec_dir": str(spec_dir), "dataset_path": None}
    if spec.training.dataset.get("kind") in ("file", "text"):
        where["dataset_path"] = str((spec_dir / spec.training.dataset["path"]).resolve())
    return where


def calibrate(spec, out_path: str | Path, ranks: int | None = None, run_steps: int = 0, spec_path=None,
              echo=None) -> Path:
    """Run the probe with `ranks` processes (default: the spec's world size); write the calibration.

    With `run_steps`, then a short real run of the spec (its own strategy, ranks and model,
    in a temporary folder) and a fit of that run's trace on top of the probe: the probe
    gives how costs grow with message size and collective, the run what no micro-benchmark
    sees (the runner's untraced work per step, the framework's per-message costs, the
    spread of a step on these cores)."""
    import torch.multiprocessing as mp

    from ..predict.simulate import roles
    from .compat import check_torch

    from .preflight import preflight
    from .strategies import load_strategy

    check_torch()  # before any process starts, as `dtgen run`
    world = ranks or len(roles(spec))
    world = max(2, world)
    out_path = Path(out_path)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    where = _where(spec, spec_path)
    # as `dtgen run`: a model or dataset that cannot train fails here in one line, before any process
    preflight(spec, where["spec_dir"], where["dataset_path"], load_strategy(spec.strategy.kind).roles(spec))
    with tempfile.TemporaryDirectory(prefix="dtgen-calibrate-") as tmp, _rank_server(spec, world, tmp) as method:
        store = os.path.join(tmp, "store")
        part = os.path.join(tmp, "calibration.json")
        mp.start_processes(_rank_main, args=(world, spec.data, store, part, where),
                           nprocs=world, join=True, start_method=method)
        if run_steps:
            _crowd(spec, spec_path, Path(tmp), part, echo)
            _refine_with_run(spec, spec_path, Path(tmp), part, run_steps, echo)
        out_path.parent.mkdir(parents=True, exist_ok=True)
        os.replace(part, out_path) if Path(part).stat().st_dev == out_path.parent.stat().st_dev else \
            out_path.write_bytes(Path(part).read_bytes())
    return out_path


@contextlib.contextmanager
def _rank_server(spec, world: int, tmp: str):
    """On the CPU the probe's ranks and those of the calibration's runs all fork from one
    server (runner/forkserver.py), which imports torch once for all of them; it does so with
    TMPDIR in the calibration's temporary folder, where torch's cache folder then goes too."""
    from . import forkserver
    from .dist import placement_for

    method = forkserver.start_method(placement_for(spec, world).device)
    if method != "forkserver":
        yield method
        return
    with forkserver.kept(tempfile.gettempdir(), tmpdir=tmp):
        yield method


def _crowd(spec, spec_path, tmp: Path, part: str, echo) -> None:
    """The crowded run (runner/crowding.py) where the calibration does not crowd the cores:
    its wait per message goes into the calibration at `part` (comm.p2p.crowding)."""
    from ..predict.calibration import Calibration, load_calibration
    from .crowding import crowded_wait

    cal = load_calibration(part)
    crowding = crowded_wait(spec, spec_path, tmp, cal, echo, repeat_steps=REPEAT_STEPS)
    if crowding is not None:
        cal.data["comm"]["p2p"]["crowding"] = crowding
        Calibration(cal.data).save(part)


def _refine_with_run(spec, spec_path, tmp: Path, part: str, steps: int, echo) -> None:
    """Run the spec RUNS times for `steps` steps in `tmp` and overwrite the probe at `part`
    with the fit of the run whose mean step is the median of them, the probe as its base;
    the others' means over its go into `noise.repeats` (predict/interval.py).

    Why the median of three: runs of one spec here land up to 45% apart while the steps of
    one run stay within 10% (the processes' placement on the cores and the machine's load
    persist through a run), so a fit of one run carries that run's luck into every
    prediction made from it; and one repeat shows that spread in one pair alone
    (benchmarks/results/machine-drift_cpu2core_2026-11.md)."""
    import yaml

    from ..predict.calibration import Calibration, load_calibration
    from ..predict.fit import fit_from_run, mean_steady_step
    from .launch import launch_run

    if spec_path is None:  # the built-in default spec
        spec_path = tmp / "spec.yaml"
        spec_path.write_text(yaml.safe_dump(spec.data, sort_keys=False, allow_unicode=True), encoding="utf-8")
    runs = [tmp / f"run{i + 1}" for i in range(RUNS)]
    for i, run in enumerate(runs):
        if echo:
            echo(f"dtgen calibrate: a {steps}-step run of {spec.name} ({i + 1} of {RUNS}) for what the probe "
                 "cannot see" + (", and how far its runs land apart" if i else ""))
        launch_run(spec_path, out=run, steps=steps, echo=lambda line: None, progress=False, measure_only=True)
    means = {run: mean_steady_step(_wall_s(run)) for run in runs}
    timed = sorted((run for run in runs if means[run] is not None), key=lambda run: means[run])
    median = timed[len(timed) // 2] if timed else runs[0]
    fitted = fit_from_run(median, load_calibration(part))
    fitted.data["source"] = f"probe and a {steps}-step run" + (f" (the median of {RUNS})" if len(timed) > 1 else "")
    ranks = fitted.data["made_for"]["ranks"]
    repeats = [{"run": f"{spec.name}, {ranks} processes", "processes": ranks,
                "ratio": round(means[run] / means[median], 4)} for run in timed if run != median]
    crowding = fitted.data["comm"]["p2p"].get("crowding") or {}
    if "repeat_ratio" in crowding:
        repeats.append({"run": crowding["source"], "processes": crowding["processes"],
                        "ratio": crowding["repeat_ratio"]})
    if repeats:
        fitted.data["noise"]["repeats"] = repeats
    Calibration(fitted.data).save(part)


def _wall_s(run: Path) -> list:
    import json

    return json.loads((run / "metrics.json").read_text(encoding="utf-8")).get("wall_s") or []
