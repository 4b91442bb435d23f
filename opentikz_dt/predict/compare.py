"""`dtgen compare RUN PREDICTION`: measured against predicted, per phase, with the error.

Rows: the mean step time and samples/s from metrics.json, then every phase (role and
span name, phases.py) either side has, in ms per rank and step. Error = (predicted -
measured) / measured. Written as a booktabs table (compare-phases) and printed as text.
Must not import torch.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from ..figures.model import Tex
from ..figures.render import base_context, environment
from ..measured.source import illustrative, prediction_note
from ..texsafe import escape_text
from .phases import phase_times

ORDER = ("fetch", "wait", "forward", "backward", "slowdown", "push", "allreduce", "gossip", "recv", "send",
         "optimizer", "update")


@dataclass(frozen=True)
class Row:
    label: str
    measured: float | None
    predicted: float | None
    unit: str
    interval: tuple | None = None  # the prediction's [low, high] (step time and samples/s only)

    @property
    def inside(self) -> bool | None:
        """Whether the measured value falls in the predicted interval (None: no interval)."""
        if self.interval is None or self.measured is None:
            return None
        return self.interval[0] <= self.measured <= self.interval[1]

    @property
    def error(self) -> float | None:
        if not self.measured or self.predicted is None:
            return None
        return (self.predicted - self.measured) / self.measured


def mean_step_ms(run) -> float | None:
    times = list(run.metrics["step_time_s"].values())
    return statistics.fmean(times) * 1000 if times else None


def phase_rows(measured, predicted) -> list[Row]:
    steps = predicted.metrics.get("step_time_interval_s")
    rates = predicted.metrics.get("samples_per_s_interval")
    rows = [Row("step time", mean_step_ms(measured), mean_step_ms(predicted), "ms",
                (steps[0] * 1000, steps[1] * 1000) if steps else None),
            Row("samples/s", measured.metrics["samples_per_s"] or None, predicted.metrics["samples_per_s"] or None,
                "1/s", tuple(rates) if rates else None)]
    m, p = phase_times(measured), phase_times(predicted)
    keys = sorted(set(m) | set(p), key=lambda k: (k[0] != "worker" and k[0] != "stage", k[0],
                                                 ORDER.index(k[1]) if k[1] in ORDER else len(ORDER), k[1]))
    for key in keys:
        rows.append(Row(f"{key[0]} {key[1]}", m[key] / 1000 if key in m else None,
                        p[key] / 1000 if key in p else None, "ms"))
    return rows


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "--"
    return f"{value:,.0f}" if unit == "1/s" else f"{value:.3f}"


def _err(row: Row) -> str:
    if row.error is None:
        return "--"
    return "0%" if round(row.error * 100) == 0 else f"{row.error:+.0%}"  # never "-0%"


def _span(row: Row) -> str:
    """'9.46-10.74 in' / '... OUT' / '' (no interval)."""
    if row.interval is None:
        return ""
    where = {True: "in", False: "OUT", None: ""}[row.inside]
    return f"{_fmt(row.interval[0], row.unit)}-{_fmt(row.interval[1], row.unit)} {where}".strip()


def format_rows(rows: list[Row], measured_name: str, predicted_name: str) -> str:
    spans = any(r.interval is not None for r in rows)
    head = f"{'phase (ms per rank and step)':32} {'measured':>10} {'predicted':>10} {'error':>7}"
    lines = [head + (f"  {'predicted interval':>22}" if spans else "")]
    for r in rows:
        line = f"{r.label:32} {_fmt(r.measured, r.unit):>10} {_fmt(r.predicted, r.unit):>10} {_err(r):>7}"
        lines.append((line + f"  {_span(r):>22}").rstrip() if spans else line)
    lines.append(f"measured: {measured_name}; predicted: {predicted_name}")
    return "\n".join(lines)


def render_phase_table(rows: list[Row], measured, predicted, body_only: bool = False) -> str:
    spans = any(r.interval is not None for r in rows)
    header = ["Phase", "Measured", "Predicted", "Error"] + (["Interval (measured in?)"] if spans else [])
    body = []
    for r in rows:
        unit = " (ms)" if r.unit == "ms" else ""
        # A hyphen is not a minus: "-37%" would set shorter than "+60%"; an en dash matches.
        err = _err(r).replace("%", "\\%").replace("-", "--", 1) if r.error is not None else _err(r)
        cells = [escape_text(r.label + unit), _fmt(r.measured, r.unit).replace(",", "\\,"),
                 _fmt(r.predicted, r.unit).replace(",", "\\,"), err]
        if spans:
            cells.append(_tex_span(r))
        body.append(Tex(" & ".join(cells)))
    source = f"{measured.path} vs {predicted.path}"[:300]
    context = base_context(measured.spec, "measured vs predicted", body_only, [], source=source)
    # the prediction says where its numbers come from (a calibration, or none: illustrative)
    notes = [f"{measured.name}: measured run vs {predicted.label}, {prediction_note(predicted)}; "
             "ms per rank and step, first step left out"]
    if spans:
        sources = predicted.metrics.get("interval_sources")
        notes.append("Interval from " + "; ".join(sources) + "." if sources else
                     "Interval: a point (the illustrative cost model has no spread)." if illustrative(predicted)
                     else "Interval: a point (the calibration holds no spread).")
    # a list: set under the table at its own width, wrapped (table-summary.tex.j2); the
    # interval's sources on one line made the table as wide as they were long
    context.update(colspec=Tex("lrrr" + ("r" if spans else "")), header=Tex(" & ".join(header)), rows=body,
                   footnote=[Tex(escape_text(n)) for n in notes], ncols=len(header))
    return environment().get_template("table-summary.tex.j2").render(context)


def _tex_span(row: Row) -> str:
    if row.interval is None:
        return ""
    low, high = (_fmt(v, row.unit).replace(",", "\\,") for v in row.interval)
    where = {True: " in", False: " \\textbf{out}", None: ""}[row.inside]
    return f"{low}--{high}{where}"


def pair(runs: list):
    """(measured, predicted) when the runs are one measurement and one prediction, else None."""
    if len(runs) != 2:
        return None
    flags = [run.info.get("predicted") is not None for run in runs]
    if flags.count(True) != 1:
        return None
    return (runs[1], runs[0]) if flags[0] else (runs[0], runs[1])


def write_phase_comparison(measured, predicted, out_dir, formats, body_only: bool = False) -> tuple[list, str]:
    """compare-phases (.tex and formats) and the text table; returns (paths, text)."""
    from ..measured.export import write_outputs

    rows = phase_rows(measured, predicted)
    text = format_rows(rows, str(measured.path), str(predicted.path))
    paths = write_outputs(render_phase_table(rows, measured, predicted), out_dir, "compare-phases", formats,
                          body=render_phase_table(rows, measured, predicted, True) if body_only else None)
    (out_dir / "compare-phases.txt").write_text(text + "\n", encoding="utf-8")
    return paths + [out_dir / "compare-phases.txt"], text
