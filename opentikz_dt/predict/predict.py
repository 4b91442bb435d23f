"""`dtgen predict`: a spec (with overrides) and a calibration -> a predicted run directory.

Overrides (`--set key=value`, `--workers N`) edit the resolved spec data and validate it
again, so a prediction is always of a spec that could run. Must not import torch.
"""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path

import yaml

from ..errors import DtgenError, SpecError, UsageError
from ..spec import load_spec, spec_from_data
from .calibration import OLD_DEVICE, Calibration, describe_device, illustrative_calibration, load_calibration
from .contention import collective_wait, contention_for, crowd_untraced, crowd_wait, wait_scale
from .costs import Costs, parse_link
from .device_probe import DeviceProbe, check_probe_device, is_device_probe, load_device_probe
from .interval import interval, probe_round_ends
from .presets import DEVICES, device_preset, link_preset, matches
from ..memory import predicted_memory
from .rundir import metrics_of, write_run_dir
from .simulate import roles, simulate
from .plugin import REGISTRY
from ..strategies import strategy as described
from .transfer import COLLECTIVE_NOTE, carried_latency, caveats, short, untraced_floor, untraced_typical

ILLUSTRATIVE_WARNING = ("no --calibration: the numbers come from the illustrative cost model, not from this "
                        "machine (dtgen calibrate SPEC measures it)")
MAX_RANKS = 16384
MAX_RANK_STEPS = 2_000_000  # ranks x steps a prediction may simulate (about a minute here)
MAX_EVENTS = 3_000_000      # trace events a predicted trace.json may hold (about 300 MB)
PROBE_STEPS = 2             # steps simulated first to foresee a trace's size


def apply_overrides(spec, sets: tuple = (), workers: int | None = None):
    """The spec with `key.path=value` overrides (YAML values) applied and validated again."""
    data = copy.deepcopy(spec.data)
    pairs = list(sets) + ([f"topology.workers.count={workers}"] if workers is not None else [])
    for item in pairs:
        key, sep, raw = str(item).partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--set {item!r}: expected key.path=value, e.g. topology.workers.count=64")
        node = data
        parts = key.strip().split(".")
        for part in parts[:-1]:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        try:
            node[parts[-1]] = yaml.safe_load(raw)
        except yaml.YAMLError:
            raise UsageError(f"--set {item!r}: the value is not YAML") from None
    if not pairs:
        return spec
    if workers is not None:
        _resize_strategy(data["strategy"], workers)
    _drop_unread_stages(data["strategy"])
    dataset = data["training"]["dataset"]
    if workers is not None and dataset.get("kind", "synthetic") == "synthetic":
        # a prediction reads no data: let the synthetic set hold one global batch at any width
        dataset["samples"] = max(int(dataset.get("samples", 1)), data["training"]["batch_size"] * workers)
    # The issues' position names the overrides: they have no line of their own to point at.
    given = [f"--set {item}" for item in sets] + ([f"--workers {workers}"] if workers is not None else [])
    try:
        return spec_from_data(data, name=f"{spec.source} (with {' '.join(given)})")
    except SpecError as exc:
        raise UsageError(f"the overrides make an invalid spec:\n{exc}") from None


def _drop_unread_stages(strategy) -> None:
    """`strategy.stages` resolves to the worker count for every kind; a kind that does not
    read it (any but a pipeline) gets it resolved again, else a spec of more than 64
    workers (the schema's bound on stages) could take no override at all."""
    kind = strategy.get("kind") if isinstance(strategy, dict) else None
    if isinstance(kind, str) and REGISTRY.has(kind) and "stages" not in described(kind).options:
        strategy.pop("stages", None)


def _resize_strategy(strategy, workers: int) -> None:
    """What else the strategy block says about the worker count follows --workers (a
    pipeline's stages): its plugin's `resize`. A kind no plugin serves is left for the
    validation to name."""
    kind = strategy.get("kind") if isinstance(strategy, dict) else None
    if isinstance(kind, str) and REGISTRY.has(kind):
        REGISTRY.get(kind).resize(strategy, workers)


def check_size(spec, steps: int) -> None:
    """Refuse simulations too large to be useful, with the bound and its reason. A rank-step
    counts as much as its strategy's simulation_weight says (a mesh's microbatches and
    collectives make its rank-steps dearer than a data-parallel one)."""
    ranks = len(roles(spec))
    if ranks > MAX_RANKS:
        raise DtgenError(f"{ranks:,} ranks: predictions go up to {MAX_RANKS:,} ranks (the trace and figures "
                         "of one run stay readable and the simulation under a minute)")
    weight = REGISTRY.get(spec.strategy.kind).simulation_weight(spec)
    if ranks * steps * weight > MAX_RANK_STEPS:
        weighed = f" x {weight:.3g} (the cost of one of its rank-steps)" if weight > 1 else ""
        raise DtgenError(f"{ranks:,} ranks x {steps:,} steps{weighed} = {ranks * steps * weight:,.0f} rank-steps: "
                         f"at most {MAX_RANK_STEPS:,} per prediction (about a minute of simulation); use --steps")


def costs_for(spec, calibration: str | Path | None, link: str | None = None, latency_ms: float | None = None,
              dedicated: bool = False, device: str | None = None) -> tuple[Costs, dict, list]:
    """Costs for the spec, what the prediction assumed, and warnings to print.

    `link` is a bandwidth (10gbit) or a link preset (presets.py), `device` a device preset
    whose link is the default; a preset's numbers and source go into what was assumed."""
    target = device_preset(device) if device is not None else None
    if calibration is None:
        if target is not None:
            raise UsageError(f"--device {target.name}: compute comes from a calibration made on that device "
                             f"({target.device_key}); run dtgen calibrate SPEC there and pass --calibration FILE, or give "
                             f"the spec hardware: {{device: {target.name}}} for datasheet costs")
        cal: Calibration = illustrative_calibration(spec)
        warnings = [ILLUSTRATIVE_WARNING]
    else:
        cal = load_calibration(calibration, spec, for_device=target.device_key if target else None)
        warnings = list(cal.warnings)
    if target is not None:
        check_device(cal, target, f"--device {target.name}")
    if link is None and target is not None:
        link = target.link
    preset = link_preset(link) if link else None
    if preset is not None and preset.device is not None:
        check_device(cal, DEVICES[preset.device], f"--link {preset.name} (a link inside {preset.device} nodes)")
    rate = preset.bytes_per_s if preset is not None else (parse_link(link) if link else None)
    latency = latency_ms / 1e3 if latency_ms is not None else (preset.latency_s if preset is not None else None)
    scale, crowded = wait_scale(cal, spec, dedicated), crowd_wait(cal, spec, dedicated)
    floor, waits = untraced_floor(cal, spec, dedicated), collective_wait(cal, spec, dedicated)
    traced, grown = carried_latency(cal, spec), crowd_untraced(cal, spec, dedicated)

    def costs_with(untraced_s, p2p_alpha_s, calibrated=cal):
        # each Costs its own contention layer: the simulator settles each one's duty
        return Costs(calibrated, spec, link=rate, latency_s=latency, untraced_s=untraced_s, p2p_alpha_s=p2p_alpha_s,
                     contention=contention_for(calibrated, spec, dedicated, rate, latency))

    costs = costs_with(floor, traced)
    if rate is None or latency is None:  # (a given link and latency replace every probed cost)
        costs.probe_ends = [costs_with(floor, traced, end) for end in probe_round_ends(cal)]
    if (floor is not None and not dedicated) or traced is not None:
        # the interval's upper end: the calibrated strategy's median untraced time, the fitted latency
        typical = None if dedicated or floor is None else untraced_typical(cal)
        costs.upper = costs_with(floor if dedicated else typical, None)
        holds = [] if typical is None else [f"median untraced time per step ({typical * 1e3:.2f} ms)"]
        holds += [] if traced is None else ["message latency fitted to its step time"]
        costs.upper_holds = "the calibrated strategy's " + " and ".join(holds) + " carried"
    assumed = {"calibration": str(calibration) if calibration else "illustrative (no calibration)",
               "source": cal.data.get("source", "?"), "cores_effective": None if dedicated else cal.cores,
               "link_bytes_per_s": rate, "latency_s": latency, "dedicated_cores": dedicated,
               "illustrative": calibration is None}
    if scale is not None:  # only then: predictions of the calibrated spec stay byte-identical
        assumed["message_wait_scale"] = round(scale, 4)
    if crowded is not None:
        assumed["message_wait_for_core_s"] = round(crowded, 7)
    if floor is not None:
        assumed["untraced_per_step_s"] = round(floor, 7)
    if grown is not None:
        assumed["untraced_growth"] = round(grown, 4)
    if traced is not None:
        assumed["message_latency_traced_s"] = round(traced, 7)
    if waits is not None and latency is None:
        assumed["collective_wait_for_core_s"] = round(waits(), 7)
    if preset is not None:  # only then: predictions without presets stay byte-identical
        assumed["link_preset"] = {"name": preset.name, "source": preset.source,
                                  "compute": describe_device(cal.data.get("device") or OLD_DEVICE)
                                  if calibration else "illustrative",
                                  "latency": "given" if latency_ms is not None else
                                  ("preset" if preset.latency_s is not None else "calibrated (no source gives one)")}
    notes = caveats(cal, spec, dedicated)
    if notes:  # only then: predictions of the calibrated spec stay byte-identical
        assumed["transfer"] = notes
        assumed["transfer_note"] = short(notes)
        warnings += notes
    if target is not None:
        assumed["device_preset"] = {"name": target.name, "source": target.source}
    profiled = (cal.data.get("provenance") or {}).get("caption")
    if profiled:  # a calibration from a user's profile (profile_fit.py) states its modelling assumptions
        assumed["calibration_note"] = str(profiled)
    return costs, assumed, warnings


def check_device(cal: Calibration, preset, what: str) -> None:
    """Compute is carried to a preset only from a calibration of the preset's device."""
    device = cal.data.get("device") or {}
    if cal.data.get("source") == "illustrative":
        raise UsageError(f"{what}: compute comes from a calibration made on {preset.device_key}; "
                         "run dtgen calibrate SPEC on that device and pass --calibration FILE")
    if device.get("kind") != "cuda" or not matches(preset, device.get("name")):
        raise UsageError(f"{what}: compute comes from a calibration made on {preset.device_key}, but {cal.path} "
                         f"measured {describe_device(device or OLD_DEVICE)}; run dtgen calibrate SPEC on that "
                         "device and pass that file (or give --link as a bandwidth, e.g. 450gb, to keep this "
                         "calibration's compute)")


def on_cluster_path(spec, calibration=None, device: str | None = None, link: str | None = None):
    """(whether the spec is predicted from its `hardware:` datasheets, one lane per stage;
    the calibration that sets its compute, if one was made on that device). A `--device`,
    `--link` or CPU calibration takes the calibration's path instead: it predicts its machine."""
    if spec.hardware is None or device is not None or link is not None:
        return False, None
    on_device = hardware_calibration(spec, calibration)
    return calibration is None or on_device is not None, on_device


def hardware_calibration(spec, calibration) -> Calibration | DeviceProbe | None:
    """The calibration when it was made on the spec's `hardware:` device (a GPU of that
    model): its compute replaces the datasheet's, the links stay the datasheets'. None for
    no calibration or a CPU one (which keeps predicting its own machine); a GPU calibration
    of another device is refused, located at hardware.device. A device probe of that GPU
    (`dtgen calibrate --device-probe`) is returned as it is: its measured rates replace the
    datasheet's; a probe of anything else is refused there too."""
    if calibration is None:
        return None
    if is_device_probe(calibration):  # measured rates of the plan's device (predict/device_probe.py)
        probe = load_device_probe(calibration)
        check_probe_device(probe, spec)
        return probe
    preset = DEVICES[spec.hardware.device]
    made = load_calibration(calibration)
    device = made.data.get("device") or OLD_DEVICE
    if device.get("kind") != "cuda" or made.data.get("source") == "illustrative":
        return None
    if not matches(preset, device.get("name")):
        message = (f"compute is carried from a calibration made on {preset.device_key}, but {made.path} measured "
                   f"{describe_device(device)}; calibrate on that device, or predict without --calibration "
                   "for datasheet costs")
        where = spec.located.issue(("hardware", "device"), message) if spec.located is not None else None
        raise UsageError(str(where) if where is not None else f"hardware.device: {message}")
    return load_calibration(calibration, spec, for_device=preset.device_key)


def predict(spec_path, out, calibration=None, sets: tuple = (), workers: int | None = None,
            steps: int | None = None, link: str | None = None, latency_ms: float | None = None,
            dedicated: bool = False, device: str | None = None) -> tuple[Path, list]:
    """Write the predicted run directory; returns (its path, warnings)."""
    spec = apply_overrides(load_spec(spec_path), sets, workers)
    if steps is not None:
        spec = apply_overrides(spec, (f"training.steps={steps}",))
    steps = spec.training.steps
    cluster, on_device = on_cluster_path(spec, calibration, device, link)
    if cluster:
        from .cluster import predict_cluster  # the datasheet's costs, one lane per stage

        return predict_cluster(spec, out, on_device)
    check_size(spec, steps)
    costs, assumed, warnings = costs_for(spec, calibration, link, latency_ms, dedicated, device)
    if steps > PROBE_STEPS:  # a trace too large is refused before minutes of simulation, not after
        probe = copy.copy(costs)
        probe.contention = copy.copy(costs.contention)  # its duty settled apart, as the prediction's is
        probe.draw = random.Random(0) if costs.draw is not None else None  # the prediction's own draws stay
        sample = simulate(spec, probe, PROBE_STEPS)
        expected = sum(len(v) for v in sample.events.values()) * steps / PROBE_STEPS
        if expected > MAX_EVENTS:
            raise DtgenError(f"the prediction would write about {expected:,.0f} trace events (at most "
                             f"{MAX_EVENTS:,}; {PROBE_STEPS} simulated steps wrote "
                             f"{sum(len(v) for v in sample.events.values()):,}): use fewer --steps or workers")
    result = simulate(spec, costs, steps)
    if "collective_wait_for_core_s" in assumed and not costs.probed_used:
        assumed, warnings = without_collective_note(assumed, warnings)  # a strategy that runs none
    events = sum(len(v) for v in result.events.values())
    if events > MAX_EVENTS:
        raise DtgenError(f"the prediction would write {events:,} trace events (at most {MAX_EVENTS:,}): "
                         "use fewer --steps or workers")
    out = Path(out) if out is not None else Path("runs") / f"{spec.name}-predicted"
    spread = interval(spec, costs, steps, metrics_of(result, spec, steps))
    path = write_run_dir(out, spec, result, steps, predicted=assumed,
                         extra_metrics={**spread, "memory": predicted_memory(spec)})
    return path, warnings


def without_collective_note(assumed: dict, warnings: list) -> tuple[dict, list]:
    """What a prediction says, less the probed collectives' wait where its strategy ran no
    collective (contention.collective_wait: the caveat is made before the simulation)."""
    assumed = {k: v for k, v in assumed.items() if k != "collective_wait_for_core_s"}
    keep = [n for n in assumed.get("transfer", []) if not n.startswith(COLLECTIVE_NOTE)]
    assumed.pop("transfer", None), assumed.pop("transfer_note", None)
    if keep:
        assumed["transfer"], assumed["transfer_note"] = keep, short(keep)
    return assumed, [w for w in warnings if not w.startswith(COLLECTIVE_NOTE)]


def is_prediction(run_dir: str | Path) -> bool:
    try:
        info = json.loads((Path(run_dir) / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(info, dict) and info.get("predicted") is not None
