"""`dtgen calibrate`'s crowded run: what a message waits for a core when processes outnumber cores.

A run with more processes than cores pays, at every blocking receive, for the receiver to
be scheduled again; how much depends on how the runner's ranks compute, block and wake,
which no micro-benchmark reproduced here (a ring of bare send/receive pairs between
model steps, 4 processes on 2 cores, measured 0 to 120 µs of wait per message; the
runner's own ring on the same model, 400 µs). A calibration made with no more processes
than cores never sees it, so its prediction of a bigger run cannot carry it.

So the calibration makes one more short real run where it did not crowd the cores: the
spec's model, data and training with dtgen's ring all-reduce over 2c workers (c = this
machine's cores), on the CPU. Its traced ring hops, fitted as any ring run's
(predict/fit.py), give a message alone (their low quantile) and the rest, the wait for a
core at 2c processes, and the hop as the ring's fit solves it from the run's step time
(`comm.p2p.crowding` in the calibration: `alone_s`, `wait_s`, `hop_s`). predict/transfer.py
carries the wait to another strategy's process count, and the whole hop to a ring's; a
spec with a core per rank pays none.
"""

from __future__ import annotations

import copy
from pathlib import Path

MAX_PROCESSES = 16  # 2 x cores above this: a machine nobody oversubscribes, nothing to measure
STEPS = 60  # its wait is a mean of rare multi-ms preemptions: 20 steps gave 258-510 µs in three passes


def crowded_workers(cores: int, ranks: int) -> int | None:
    """Workers of the crowded run for a calibration with `ranks` processes on `cores` cores, or
    None where it is not made: the calibration's own run crowded the cores at least as much,
    one core (nothing runs uncrowded to compare with), or too many processes."""
    k = 2 * cores
    return k if cores >= 2 and ranks < k <= MAX_PROCESSES else None


def crowded_spec_data(spec, workers: int) -> dict:
    """The spec's model, data, precision and optimizer under dtgen's ring over `workers` CPU
    ranks on one host, STEPS steps, no stragglers (launch_run's measure_only also drops an
    injected fault)."""
    data = copy.deepcopy(spec.data)
    data["name"] = f"{spec.name}-crowded"
    data["strategy"] = {"kind": "allreduce", "algorithm": "ring"}
    data["topology"] = {"workers": {"count": workers}}
    training = data.setdefault("training", {})
    training["steps"] = STEPS
    dataset = training.setdefault("dataset", {})
    if dataset.get("kind", "synthetic") == "synthetic":  # every worker a full batch: one global batch per step
        dataset["samples"] = max(int(dataset.get("samples", 4096)), 8 * workers * int(training.get("batch_size", 64)))
    data.setdefault("runtime", {})["device"] = "cpu"
    return data


def crowded_wait(spec, spec_path, tmp: Path, base, echo=None, repeat_steps: int = 0) -> dict | None:
    """Make the crowded run in `tmp` and return what goes into comm.p2p.crowding, or None
    where it is not made (crowded_workers) or its trace holds too few hops to split.

    With `repeat_steps`, the run is repeated that long: the wait is the mean of both runs'
    (weighted by their steps; one run's is the noisiest number of a calibration: 282 and
    508 µs from two calibrations of one spec here), and the repeat's mean step over the
    run's widens predictions' intervals (`repeat_ratio`, predict/interval.py)."""
    import os

    import yaml

    from ..predict.fit import fit_from_run
    from ..predict.simulate import roles
    from ..spec import spec_from_data
    from .launch import launch_run
    from .provenance import dataset_file
    from .repeat import run_again

    cores = os.cpu_count() or 1
    workers = crowded_workers(cores, len(roles(spec)))
    # a python model's module is imported from beside its spec: not made for one (said in the caveat)
    if workers is None or spec.training.model_kind == "python":
        return None
    data = crowded_spec_data(spec, workers)
    dataset = data["training"]["dataset"]
    if dataset.get("path"):  # read beside the spec, as `dtgen run` does
        dataset["path"] = dataset_file(spec, Path(spec_path).resolve().parent if spec_path else Path.cwd())
    crowded = spec_from_data(data)  # the spec's own model and data: valid if the spec was
    path = tmp / "crowded.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")
    if echo:
        echo(f"dtgen calibrate: a {STEPS}-step ring run with {workers} workers on {cores} cores, for what a "
             "message waits for a core when processes outnumber cores")
    launch_run(path, out=tmp / "crowded", echo=lambda line: None, progress=False, measure_only=True)
    runs, ratio = [(tmp / "crowded", STEPS)], None
    if repeat_steps:
        if echo:
            echo(f"dtgen calibrate: that run again ({repeat_steps} steps)")
        ratio = run_again(path, tmp / "crowded", tmp / "crowded-repeat", repeat_steps)
        runs.append((tmp / "crowded-repeat", repeat_steps))
    fits = [(fit_from_run(d, base).data, n) for d, n in runs]
    fits = [(fitted, n) for fitted, n in fits if "core_wait_s" in fitted["comm"]["p2p"]]
    if not fits:
        return None
    total = sum(n for _, n in fits)

    def mean(value) -> float:  # over both runs, weighted by their steps
        return round(sum(value(fitted) * n for fitted, n in fits) / total, 9)

    crowding = {"cores": cores, "processes": workers,
                "wait_s": mean(lambda d: float(d["comm"]["p2p"]["core_wait_s"])),
                "alone_s": mean(lambda d: float(d["comm"]["p2p"]["alpha_floor_s"])),
                # its hop latency as the ring's fit solves it from the step time (its hops hold
                # their predecessors' stalls, which a simulation draws itself): what a ring
                # prediction at more processes carries (contention.ring_chain_hop)
                "hop_s": mean(lambda d: float(d["comm"]["p2p"]["alpha_s"])),
                # the ring's untraced time per step at 2c processes: a ring calibration's
                # prediction at more processes grows its own with it (contention.crowd_untraced)
                "strategy": dict(crowded.data["strategy"]),  # with its defaults, as made_for (fit.py)
                "untraced_s": mean(lambda d: float(d["compute"]["step_overhead_s"])),
                "source": f"a {STEPS}-step allreduce ring run of the model with {workers} workers"}
    if len(runs) > 1:
        crowding["source"] += f" and its {repeat_steps}-step repeat"
        if len(fits) > 1:
            crowding["waits_s"] = [round(float(d["comm"]["p2p"]["core_wait_s"]), 9) for d, _ in fits]
        if ratio is not None:
            crowding["repeat_ratio"] = ratio
    return crowding
