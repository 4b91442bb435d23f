"""Where a run directory's numbers come from, as its figures say it and name their files.

A run directory is measured (`dtgen run`: on which hardware) or predicted (`dtgen
predict`: from which calibration, or from the illustrative cost model, which is no
measurement at all). Every figure of it states which in its title or footer, and its
files are named `<source>-<run>-<kind>` so two runs' figures share a folder without
overwriting each other. A measured figure draws each role with the device its ranks
really used (a CPU icon for CPU ranks) and says what ran where; a predicted one keeps the
spec's icons and claims no hardware. Words come from figure.labels. Must not import torch.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from ..figures.texts import label_text
from .run import Run

DEVICE_ICONS = ("gpu", "cpu")  # the icons that claim a device; server, dataset, ... claim none
ICON_ROLE = {"worker": "worker", "stage": "worker", "server": "server", "storage": "server"}  # rank role -> icon


def source(run: Run) -> str:
    """measured | predicted."""
    return "predicted" if run.info.get("predicted") is not None else "measured"


def illustrative(run: Run) -> bool:
    """A prediction made without a calibration: the illustrative cost model's numbers."""
    predicted = run.info.get("predicted")
    return isinstance(predicted, dict) and illustrative_assumptions(predicted)


def illustrative_assumptions(assumed: dict) -> bool:
    """Whether a prediction's assumptions (predict.py's `assumed`: run.json's `predicted`, a
    sweep's caption) are the illustrative cost model's rather than a calibration's."""
    return bool(assumed.get("illustrative")) or str(assumed.get("calibration", "")).startswith("illustrative")


def run_name(run: Run) -> str:
    """The run directory's name, as a file name part (runs/a -> a; a prediction's default
    folder runs/ps-sync-predicted -> ps-sync, which its files' `predicted-` prefix says)."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(run.path).resolve().name).strip("-.") or "run"
    if source(run) == "predicted" and name.endswith("-predicted"):
        name = name.removesuffix("-predicted")
    return name


def figure_stem(run: Run, kind: str) -> str:
    """measured-<run>-timeline, predicted-<run>-topology, measured-<run>-loss, ..."""
    return f"{source(run)}-{run_name(run)}-{kind}"


def prediction_note(run: Run) -> str:
    """What a predicted run's figures say it is: predicted from which calibration, or illustrative."""
    if illustrative(run):
        return label_text(run.spec, "illustrative_note")
    predicted = run.info.get("predicted") or {}
    if predicted.get("source") == "datasheet":  # a cluster prediction (predict/cluster.py): whose costs, what a lane is
        per_lane = int(predicted.get("ranks") or 0) // max(1, int(predicted.get("lanes") or 1))
        lanes = f"; a lane stands for its stage's {per_lane:,} ranks" if per_lane > 1 else ""
        return f"predicted (dtgen predict): {predicted.get('caption', 'datasheet costs')}{lanes}"
    note = label_text(run.spec, "calibration_note", file=Path(str(predicted.get("calibration") or "?")).name)
    preset = predicted.get("link_preset")
    if isinstance(preset, dict):  # a preset's links: say which, from where, and whose compute
        note += f"; links {preset.get('name')} ({preset.get('source')}), compute of {preset.get('compute')}"
    if predicted.get("calibration_note"):  # a calibration from a profile: its assumptions (profile_fit.py)
        note += f"; {predicted['calibration_note']}"
    if predicted.get("transfer_note"):  # costs carried from another strategy or size
        note += f"; {predicted['transfer_note']}"
    return note


def hardware_note(run: Run) -> str | None:
    """What a measured run ran on: device, its model, cores or GPUs, ranks, backend (None when
    run.json has no `hardware`: runs from before it was recorded)."""
    hardware = run.info.get("hardware")
    every = run.info.get("ranks") or []
    ranks = [r for r in every if r.get("node_rank") in (None, 0)]  # hardware is node 0's (the one writing run.json)
    if not isinstance(hardware, dict) or not ranks:
        return None
    nodes = len({r.get("node_rank") for r in every})
    line = _node_hardware(run, hardware, ranks)
    return label_text(run.spec, "first_node_note", hardware=line, n=nodes) if nodes > 1 else line


def _node_hardware(run: Run, hardware: dict, ranks: list) -> str:
    devices = [str(r.get("device") or "") for r in ranks]
    backend = "/".join(sorted({str(r.get("backend")) for r in ranks if r.get("backend")})) or "?"
    gpus = sorted({d for d in devices if d.startswith("cuda")})
    if gpus:
        models = sorted({(hardware.get("gpus") or {}).get(d.partition(":")[2], "?") for d in gpus})
        return label_text(run.spec, "gpu_note", gpus=len(gpus), model=", ".join(models), ranks=len(ranks),
                          backend=backend)
    return label_text(run.spec, "cpu_note", model=hardware.get("cpu", "?"), cores=hardware.get("cores", "?"),
                      ranks=len(ranks), backend=backend)


def source_note(run: Run) -> str | None:
    """The line every figure of the run carries: the prediction's source, or the hardware measured on."""
    return prediction_note(run) if source(run) == "predicted" else hardware_note(run)


def plot_source(run: Run) -> str:
    """The source line of a result plot (loss, throughput, staleness): "measured: ran on ...",
    or the prediction's source (from which calibration, or the illustrative cost model)."""
    if source(run) == "predicted":
        return prediction_note(run)
    hardware = hardware_note(run)
    return f"measured: {hardware}" if hardware else "measured (run.json records no hardware)"


def plot_sources(runs: list) -> list:
    """The source lines of a plot of one run or of several (dtgen compare): one line where every
    run has the same source, else one line per source naming its runs (run.label: a
    prediction's name says "(predicted)")."""
    rows: dict = {}
    for run in runs:
        rows.setdefault(plot_source(run), []).append(run.label)
    if len(rows) == 1:
        return [next(iter(rows))]
    return [f"{', '.join(names)}: {line}" for line, names in rows.items()]


def table_source(run: Run) -> str:
    """A summary table's row source, said in the table's note: a measured row says it was
    measured and where (runs from before run.json recorded hardware say that instead); a
    predicted one says from which calibration, or that it is the illustrative cost model."""
    if source(run) == "predicted":
        return prediction_note(run)
    hardware = hardware_note(run)
    return f"measured, {hardware}" if hardware else "measured (run.json records no hardware)"


def device_icons(run: Run):
    """The run's spec with each role's device icon (gpu, cpu) the device its ranks used:
    GPU icons for a run on the CPU would say what did not happen. Roles drawn as a
    server, dataset, ... keep their icon; a prediction keeps the spec's (it ran nowhere)."""
    if source(run) == "predicted":
        return run.spec
    used: dict = {}
    for rank in run.info.get("ranks") or []:
        device = str(rank.get("device") or "")
        if device:
            role = ICON_ROLE.get(rank.get("role"), rank.get("role"))
            used.setdefault(role, set()).add("gpu" if device.startswith("cuda") else "cpu")
    icons = dict(run.spec.figure.icons)
    for role in ("worker", "server"):
        found = used.get(role, set())
        if icons.get(role) in DEVICE_ICONS and len(found) == 1:
            icons[role] = next(iter(found))
    if icons == run.spec.figure.icons:
        return run.spec
    return replace(run.spec, figure=replace(run.spec.figure, icons=icons))
