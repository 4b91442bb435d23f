"""Pure rendering: Spec (or a Timeline) -> the text of a standalone .tex file. No I/O.

The Jinja environment uses delimiters that leave TeX's braces alone (blocks <% %>,
values << >>, comments <# #>) and StrictUndefined. Escaping is on by default: every
value printed is finalised by `_finalize`, which lets through only `Tex` (safe TeX
built by code from validated values), numbers (formatted here), and short tokens made
of letters, digits and `.,=!-` (names, palette tints, TikZ keys); any other string is
escaped as text. User labels reach templates only through texsafe.render_label.
Must not import torch.
"""

from __future__ import annotations

import re
from functools import lru_cache

import jinja2

from .. import __version__
from ..errors import DtgenError
from ..palette import PALETTE_NAMES, render_palette
from ..resources import templates_dir
from ..texsafe import LabelError, escape_text, needs_cjk
from .model import Layout, Node, Port, Tex
from .names import WORKER_LABEL_MACRO
from .texts import model_note
from .topology import build_layout
from .topology_fit import fit_context

LIBRARIES = "positioning, arrows.meta, calc, fit, backgrounds, decorations.pathreplacing, patterns"
_TOKEN = re.compile(r"[A-Za-z0-9 .,=!\-]*")


class RenderError(DtgenError):
    """A value that cannot be written into a template safely."""


def fmt(value: float) -> str:
    """A TeX number: fixed point, at most 3 decimals, no exponent, no '-0'."""
    text = f"{value:.3f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def _finalize(value):
    if isinstance(value, Tex):
        return value
    if isinstance(value, jinja2.Undefined):
        return str(value)  # StrictUndefined raises here, naming the missing variable
    if isinstance(value, bool) or value is None:
        raise RenderError(f"refusing to print {value!r} into TeX")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return fmt(value)
    if isinstance(value, str):
        if _TOKEN.fullmatch(value):
            return value
        try:
            return escape_text(value)
        except LabelError as exc:
            raise RenderError(str(exc)) from exc
    raise RenderError(f"refusing to print a {type(value).__name__} into TeX")


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        block_start_string="<%", block_end_string="%>",
        variable_start_string="<<", variable_end_string=">>",
        comment_start_string="<#", comment_end_string="#>",
        undefined=jinja2.StrictUndefined, finalize=_finalize, autoescape=False,
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
    )


def _palette_colors(spec) -> dict:
    colors = dict(spec.figure.colors)
    for role, name in colors.items():
        if name not in PALETTE_NAMES:
            raise RenderError(f"figure.colors.{role}: {name!r} is not a palette name")
    return colors


def base_context(spec, kind: str, body_only: bool, names: list[str], source: str | None = None) -> dict:
    """What every template needs: header facts, palette, colours, probe switch."""
    variant = spec.figure.palette
    return {
        "version": __version__,
        "source": Tex(escape_text(source or spec.source)),
        "kind": kind,
        "variant": variant,
        "palette": Tex(render_palette(variant)),
        "libraries": Tex(LIBRARIES),
        "body_only": body_only,
        "probe": not body_only,
        "colors": _palette_colors(spec),
        "names": names,
        "icons": (),  # icon macros the picture uses (topology sets them)
        "cjk": spec_needs_cjk(spec),
        "compact": False,  # a fitted topology: icons without their decorative text
        "node_list": Tex(" ".join(names)),
    }


def without_line_spaces(tex: str) -> str:
    """Every line ends in `%`, so a body \\input into \\sbox or \\resizebox adds no stray spaces
    (each line end of the palette and icon definitions is a space in horizontal mode)."""
    lines = []
    for line in tex.splitlines():
        if not line.strip():
            continue
        lines.append(line if line.lstrip().startswith("%") else line + "%")
    return "\n".join(lines) + "\n"


def finish(tex: str, body_only: bool) -> str:
    return without_line_spaces(tex) if body_only else tex


def spec_needs_cjk(spec) -> bool:
    """True when any text of the spec (title, labels) is Chinese or Japanese: the figure loads CJKutf8."""
    def strings(value):
        if isinstance(value, str):
            yield value
        elif isinstance(value, dict):
            for item in value.values():
                yield from strings(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                yield from strings(item)

    return any(needs_cjk(text) for text in strings(spec.data))


def _at(layout: Layout):
    def at(node: Node) -> Tex:
        return Tex(f"({{{fmt(node.x / layout.colsep)}*\\colsep}},{{{fmt(node.y / layout.rowsep)}*\\rowsep}})")
    return at


def _port(port: Port) -> Tex:
    anchor = "" if port.anchor == "center" else f".{port.anchor}"
    if port.level:
        shift = f"[xshift={fmt(port.dx)}pt, yshift={fmt(port.dy)}pt]" if port.dx or port.dy else ""
        return Tex(f"({shift}{port.level} -| {port.node}{anchor})")
    if port.dx or port.dy:
        return Tex(f"([xshift={fmt(port.dx)}pt, yshift={fmt(port.dy)}pt]{port.node}{anchor})")
    return Tex(f"({port.node}{anchor})")


def render_topology(spec, body_only: bool = False, layout: Layout | None = None, note: str | None = None) -> str:
    """The topology figure of a spec as standalone TeX (or the bare picture). `note`
    replaces the model note from the spec (a run knows its python model's real size)."""
    layout = layout or build_layout(spec)
    context = base_context(spec, "topology", body_only, layout.names())
    context.update(
        colsep=layout.colsep, rowsep=layout.rowsep, spacing_notes=layout.notes, labels=layout.macros,
        worker_macros=[(k, v) for k, v in layout.macros.items() if WORKER_LABEL_MACRO.match(k)],
        nodes=layout.nodes, edges=layout.edges, groups=layout.groups, braces=layout.braces, styles=layout.styles,
        **fit_context(spec, layout),
        at=_at(layout), port=_port, facing={"below": "south", "above": "north"},
        opposite={"below": "above", "above": "below"},
        icons=sorted({n.icon for n in layout.nodes if n.kind == "icon"}),
        aligned={"west": "left", "east": "right"},  # a fitted figure's label lines, flush with the node's edge
        model_note=Tex(escape_text(note or model_note(spec))),  # drawn as node `model` under the picture
    )
    return finish(environment().get_template("topology.tex.j2").render(context), body_only)


def render_timeline(spec, timeline=None, body_only: bool = False) -> str:
    """The timeline figure: a given (measured, predicted) Timeline, else the spec's expected
    one (the simulator's, under the illustrative calibration: predict/expected.py)."""
    from .timeline import draw_timeline

    from .fit import target_width_cm
    from .texts import timeline_words
    from .timeline_styles import tikz_styles

    if timeline is None:
        from ..predict.expected import illustrative_timeline

        timeline = illustrative_timeline(spec)
    drawing = draw_timeline(timeline, target_width_cm(spec), timeline_words(spec))
    context = base_context(spec, "timeline", body_only, drawing.names())
    styles = {kind: Tex(keys) for kind, keys in tikz_styles(_palette_colors(spec), spec.figure.palette).items()}
    context.update(d=drawing, title=drawing.title, box_styles=styles)
    return finish(environment().get_template("timeline.tex.j2").render(context), body_only)
