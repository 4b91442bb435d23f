"""`dtgen figure`: render a spec's figures and write them (and compiled formats) to a folder.

render_figures is the one entry point: Spec -> files. It takes an optional Timeline so
`dtgen figure RUN_DIR` can pass the measured timeline (built from trace.json) and get
the same template, axis and files as the expected one. Must not import torch.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import DtgenError
from .compile import compile_pdf, pdf_to_png, tex_to_svg
from .render import render_timeline, render_topology
from .topology_fit import BORDER_PT

KINDS = ("topology", "timeline")
FORMATS = ("tex", "pdf", "svg", "png")


def default_out_dir(spec) -> Path:
    """figures/<spec name>/ under the current directory."""
    return Path("figures") / spec.name


def render_texts(spec, kinds=KINDS, body_only: bool = False, timeline=None) -> dict[str, str]:
    """kind -> TeX, pure (no files, no compile)."""
    texts = {}
    for kind in kinds:
        if kind == "topology":
            texts[kind] = render_topology(spec, body_only=body_only)
        elif kind == "timeline":
            texts[kind] = render_timeline(spec, timeline=timeline, body_only=body_only)
        elif kind == "memory":  # asked for by name only (not part of `all`)
            from .memory import render_spec_memory

            texts[kind] = render_spec_memory(spec, body_only=body_only)
        elif kind == "partitioning":  # asked for by name only: the model split two ways (illustrative)
            from .partitioning import partitioning_layout

            texts[kind] = render_topology(spec, body_only=body_only, layout=partitioning_layout(spec))
        elif kind == "schedules":  # asked for by name only: pipeline schedules side by side (illustrative)
            texts[kind] = render_timeline(spec, timeline=_schedules_timeline(spec), body_only=body_only)
        else:
            raise DtgenError(f"unknown figure kind {kind!r} (one of "
                             f"{', '.join(KINDS + ('memory', 'partitioning', 'schedules'))})")
    return texts


def _schedules_timeline(spec):
    """GPipe, 1F1B, interleaved 1F1B, ZB-V and DualPipeV for the spec's pipeline, one time axis,
    as the simulator runs them (the strategy's figures plugin picks them, or refuses)."""
    from ..predict.expected import schedules_timeline

    return schedules_timeline(spec)


def render_figures(spec, out_dir: str | Path | None = None, kinds=KINDS, formats=("tex",), body_only: bool = False,
                   timeline=None, dpi: int = 300, notify=None) -> list[Path]:
    """Write <name>-<kind>.tex (always) plus the requested formats; return the paths written.

    With body_only the .tex files hold the bare picture for \\input into a paper; PDF,
    SVG and PNG are still compiled from the standalone document.
    """
    unknown = sorted(set(formats) - set(FORMATS))
    if unknown:
        raise DtgenError(f"unknown format {unknown[0]!r} (one of {', '.join(FORMATS)})")
    out = Path(out_dir) if out_dir is not None else default_out_dir(spec)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for kind, tex in render_texts(spec, kinds, body_only=False, timeline=timeline).items():
        stem = out / f"{spec.name}-{kind}"
        body = render_texts(spec, (kind,), body_only=True, timeline=timeline)[kind] if body_only else tex
        written.append(_write(stem.with_suffix(".tex"), body.encode("utf-8")))
        pdf = None
        if "pdf" in formats or "png" in formats:
            compiled = compile_pdf(tex, keep_log=None)
            pdf = compiled.pdf
            shortfall = fit_shortfall(compiled.log)
            if shortfall and notify is not None:
                notify(f"{stem.with_suffix('.tex')}: {shortfall}")  # the .tex is always written
        if "pdf" in formats:
            written.append(_write(stem.with_suffix(".pdf"), pdf))
        if "svg" in formats:
            written.append(_write(stem.with_suffix(".svg"), tex_to_svg(tex)))
        if "png" in formats:
            written.append(_write(stem.with_suffix(".png"), pdf_to_png(pdf, dpi=dpi)))
    return written


def fit_shortfall(log: str) -> str:
    """'' unless a fitted topology stayed wider than its target (its text would fall below
    6 pt if scaled further): the compiled picture's FIT line says by how much."""
    import re

    match = re.search(r"^FIT natural ([\d.]+)pt target ([\d.]+)pt scale ([\d.]+)$", log, re.MULTILINE)
    if not match:
        return ""
    natural, target, scale = (float(g) for g in match.groups())
    if natural * scale <= target + 0.5:
        return ""
    # The FIT line measures the picture; the user asked for a page width (border included).
    drawn, asked = natural * scale + 2 * BORDER_PT, target + 2 * BORDER_PT
    return (f"drawn {drawn / 72.27 * 2.54:.1f} cm wide, not the {asked / 72.27 * 2.54:.1f} cm asked: "
            f"scaled further, its smallest text would be under 6 pt")


def _write(path: Path, data: bytes) -> Path:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
    return path


def _written_gaps(spec) -> set[str]:
    """The gaps (figure.colsep, figure.rowsep) the spec's file sets itself, not by default."""
    data = spec.located.data if spec.located is not None else spec.data
    figure = data.get("figure") if isinstance(data, dict) else None
    return {f"figure.{key}" for key in ("colsep", "rowsep") if isinstance(figure, dict) and key in figure}


def figure_command(target: str | Path, out_dir, kind: str, formats, body_only: bool,
                   width: str | None = None, notify=None, calibration=None) -> list[Path]:
    """What `dtgen figure SPEC` does: load the spec, render the asked kinds, write them.
    `notify(line)` hears of every gap the spec sets that is drawn wider than it asks (the CLI
    prints it on stderr; a gap left to its default is the layout's to choose, and only the
    .tex says it was widened) and of a calibration's warnings; with `calibration` the
    timeline is the predicted one."""
    from ..spec import load_spec

    # A run directory is drawn by opentikz_dt.measured.figures.figure_run_command instead;
    # load_spec reports a directory given here as "is a directory, not a spec file".
    from .fit import with_width

    spec = with_width(load_spec(Path(target)), width)
    kinds = KINDS if kind == "all" else (kind,)
    if notify is not None:
        from ..memory import fit_warning

        over = fit_warning(spec)
        if over:
            notify(f"dtgen: warning: {over}")
    if notify is not None and "topology" in kinds:
        from .topology import build_layout

        written = _written_gaps(spec)
        for note in build_layout(spec).notes:
            if note.split(" ", 1)[0] in written:
                notify(f"{target}: {note}")
    timeline, cluster, on_device = None, False, None
    if "timeline" in kinds:
        from ..predict.predict import on_cluster_path  # the hardware's datasheets, compute from its GPU's calibration

        cluster, on_device = on_cluster_path(spec, calibration)
    if calibration is not None and not cluster and "timeline" in kinds:  # predicted, not illustrative
        from ..predict.expected import predicted_timeline

        timeline, warnings = predicted_timeline(spec, calibration)
        for line in warnings:
            (notify or print)(f"dtgen: warning: {line}")
    elif cluster:  # expected on that hardware, from its datasheet
        from ..errors import DtgenError
        from ..predict.expected import datasheet_timeline

        try:
            timeline, warnings = datasheet_timeline(spec, on_device)
        except DtgenError as exc:  # a kind or model the datasheet model does not cover: illustrative
            timeline, warnings = None, [f"{exc}; the timeline stays illustrative"]
        for line in warnings:
            (notify or print)(f"dtgen: warning: {line}")
    return render_figures(spec, out_dir, kinds, tuple(formats) or ("tex",), body_only, timeline=timeline,
                          notify=notify)
