"""A run directory as the measured figures see it: resolved spec, run.json, metrics.json, trace.

The layout is fixed by docs/dev/runner-interface.md. The trace is loaded only when a
figure needs it (plots and tables read metrics.json alone). Must not import torch.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import SpecError, TraceError
from ..spec import Spec, load_spec
from .trace import Trace, load_trace


_WORKER = re.compile(r"^w[1-9][0-9]{0,5}$")


@dataclass
class Run:
    path: Path
    spec: Spec
    info: dict  # run.json ({} when missing)
    metrics: dict  # metrics.json, checked and with missing keys defaulted
    _trace: Trace | None = field(default=None, repr=False)
    repeats: int = 1  # >1: the mean of that many runs of one spec (measured.repeats), with metrics["spread"]
    # The name figures and tables use when runs compared side by side share their spec's
    # name (measured.repeats.name_apart: the run folder's name); None: the spec's name.
    display: str | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def label(self) -> str:
        """The run as figures and tables name it: its spec's name, and "(predicted)" for a
        prediction (a run and a prediction of it share their spec's name); its run folder's
        name where compared runs of different specs share a name (`display`)."""
        name = self.display or self.name
        return f"{name} (predicted)" if self.info.get("predicted") is not None else name

    @property
    def trace(self) -> Trace:
        if self._trace is None:
            self._trace = load_trace(self.path)
        return self._trace

    @property
    def failed(self) -> bool:
        """Ended early: a rank failed, or Ctrl-C (`interrupted`)."""
        return self.info.get("status") in ("failed", "interrupted")

    @property
    def interrupted(self) -> bool:
        return self.info.get("status") == "interrupted"

    @property
    def ended(self) -> str:
        """How a run that ended early ended, in a word: interrupted (Ctrl-C) or failed."""
        return "interrupted" if self.interrupted else "failed"


def is_run_dir(path: str | Path) -> bool:
    path = Path(path)
    return path.is_dir() and (path / "spec.yaml").is_file() and (
        (path / "run.json").is_file() or (path / "trace.json").is_file() or (path / "metrics.json").is_file())


def load_run(path: str | Path) -> Run:
    """Read a run directory; TraceError when it is not one."""
    path = Path(path)
    if not path.is_dir():
        raise TraceError(f"{path}: not a run directory")
    if not (path / "spec.yaml").is_file():
        if is_run_dir(path / "r1"):  # `dtgen run --repeat N` wrote r1..rN here
            raise TraceError(f"{path}: a folder of repeats (r1, r2, ...), not one run: draw one of them "
                             f"({path / 'r1'}), or all with their spread (dtgen compare {path})")
        raise TraceError(f"{path}: not a run directory (no spec.yaml)")
    try:
        # without its data: a run's figures never read it, and the run may have moved
        spec = load_spec(path / "spec.yaml", data_files=False)
    except SpecError as exc:
        raise TraceError(f"{path / 'spec.yaml'}: the run's resolved spec does not load:\n{exc}") from None
    info = _read_json(path / "run.json", required=False)
    metrics = check_metrics(_read_json(path / "metrics.json", required=False), path / "metrics.json")
    return Run(path, spec, info, metrics)


def _read_json(path: Path, required: bool) -> dict:
    if not path.is_file():
        if required:
            raise TraceError(f"{path}: missing")
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise TraceError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict):
        raise TraceError(f"{path}: expected a JSON object")
    return data


def _numbers(values, where: Path, key: str) -> list:
    if not isinstance(values, list):
        raise TraceError(f"{where}: {key}: expected a list of numbers")
    out = []
    for value in values:
        if value is None:
            out.append(math.nan)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out.append(float(value))
        else:
            raise TraceError(f"{where}: {key}: {value!r} is not a number")
    return out


def _mapping(values, where: Path, key: str) -> dict:
    if not isinstance(values, dict):
        raise TraceError(f"{where}: {key}: expected an object")
    return values


def check_metrics(data: dict, where: Path) -> dict:
    """metrics.json with every key of the interface present and typed (missing ones empty)."""
    steps = data.get("steps", 0)
    out = {
        "steps": steps if type(steps) is int and steps >= 0 else 0,
        "loss": _numbers(data.get("loss", []), where, "loss"),
        "wall_s": _numbers(data.get("wall_s", []), where, "wall_s"),
        "step_time_s": _per_worker(data.get("step_time_s", {}), where, "step_time_s"),
        "bytes": {},
        "staleness": _numbers(data.get("staleness", []), where, "staleness"),
        "per_worker_samples_per_s": _per_worker(data.get("per_worker_samples_per_s", {}), where,
                                                "per_worker_samples_per_s"),
        "steps_per_worker": {w: int(v) for w, v in _per_worker(data.get("steps_per_worker", {}), where,
                                                               "steps_per_worker").items()},
        "eval": _eval(data.get("eval")),
        "memory": _memory(data.get("memory")),
        # how far each rank got (an interrupted or failed run's counts end there)
        "steps_done": done if type(done := data.get("steps_done")) is int and done >= 0 else steps,
        "steps_per_rank": {int(r): v for r, v in (data.get("steps_per_rank") or {}).items()
                           if str(r).isdigit() and type(v) is int and v > 0} if isinstance(data.get("steps_per_rank"), dict) else {},
        "ranks_missing": [r for r in data.get("ranks_missing") or [] if type(r) is int]
        if isinstance(data.get("ranks_missing"), list) else [],
    }
    for rank, value in _mapping(data.get("bytes", {}), where, "bytes").items():
        if str(rank).isdigit() and isinstance(value, dict):
            sent, recv = value.get("sent", 0), value.get("recv", 0)
            if type(sent) is int and type(recv) is int:
                out["bytes"][int(rank)] = {"sent": sent, "recv": recv}
    for key in ("step_time_interval_s", "samples_per_s_interval"):  # a prediction's interval (predict/interval.py)
        out[key] = _pair(data.get(key))
    sources = data.get("interval_sources")
    out["interval_sources"] = [str(x) for x in sources if isinstance(x, str)] if isinstance(sources, list) else []
    samples = data.get("samples_per_s", 0.0)
    out["samples_per_s"] = float(samples) if isinstance(samples, (int, float)) and math.isfinite(samples) else 0.0
    return out


def rank_steps(metrics: dict, rank: int) -> int:
    """The steps rank `rank` completed as its counts were last written (at least 1): what its
    bytes divide by. A finished run's ranks all completed metrics["steps"]."""
    return max(1, metrics.get("steps_per_rank", {}).get(rank) or metrics.get("steps_done") or metrics["steps"])


def bytes_per_step(metrics: dict) -> dict:
    """metrics["bytes"] per step: each rank's by the steps it completed, not by the steps asked for."""
    return {r: {d: b[d] / rank_steps(metrics, r) for d in ("sent", "recv")} for r, b in metrics["bytes"].items()}


def steps_measured(metrics: dict) -> str:
    """The steps the counts cover: 500, or 109–158 where ranks stopped at different steps."""
    counts = [rank_steps(metrics, r) for r in metrics["bytes"]] or [metrics.get("steps_done") or metrics["steps"]]
    low, high = min(counts), max(counts)
    return f"{high:,}" if low == high else f"{low:,}\u2013{high:,}"


def partial_ranks(metrics: dict, ids: dict | None = None) -> str:
    """Which ranks' counts stop short of the others' (partial) or are absent (missing), in
    words; '' when every rank counted every step it took part in."""
    name = (lambda r: (ids or {}).get(r) or f"rank {r}")
    done = max([rank_steps(metrics, r) for r in metrics["bytes"]] or [0])
    partial = [f"{name(r)} ({rank_steps(metrics, r):,} steps)" for r in sorted(metrics["bytes"])
               if rank_steps(metrics, r) < done]
    missing = [name(r) for r in metrics.get("ranks_missing", [])]
    parts = ([f"partial: {', '.join(partial)}"] if partial else []) + ([f"missing: {', '.join(missing)}"] if missing else [])
    return "; ".join(parts)


def _pair(value) -> list | None:
    """[low, high] of finite numbers, or None (absent or malformed: no interval is drawn)."""
    if (isinstance(value, list) and len(value) == 2 and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                            and math.isfinite(v) for v in value)
            and value[0] <= value[1]):
        return [float(value[0]), float(value[1])]
    return None


MEMORY_KEYS = ("params", "grads", "optimizer", "activations", "peak")


def _memory(value) -> dict:
    """metrics.json's memory per rank (runner/memory.py): {rank: {category: bytes or None,
    "source": text}}; ranks and values that are not that are dropped."""
    if not isinstance(value, dict):
        return {}
    out = {}
    for rank, entry in value.items():
        if not str(rank).isdigit() or not isinstance(entry, dict):
            continue
        numbers = {k: entry.get(k) if type(entry.get(k)) is int and entry.get(k) >= 0 else None for k in MEMORY_KEYS}
        out[int(rank)] = {**numbers, "source": str(entry.get("source", ""))}
    return dict(sorted(out.items()))


def _eval(value) -> dict | None:
    """metrics.json's held-out evaluation (training.eval): its finite numbers, or None."""
    if not isinstance(value, dict):
        return None
    return {k: float(v) for k, v in value.items() if k in ("loss", "perplexity", "samples")
            and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)} or None


def _per_worker(values, where: Path, key: str) -> dict:
    """{w1: number, ...}; keys that are not worker ids and values that are not numbers are dropped."""
    return {k: float(v) for k, v in _mapping(values, where, key).items()
            if _WORKER.match(str(k)) and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}
