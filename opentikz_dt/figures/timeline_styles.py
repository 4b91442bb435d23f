"""How each timeline box kind looks: fill, outline, mark and label colour, in one table.

The colours were chosen (colorvision.py) so that every pair of kinds that can share one
figure differs by CIEDE2000 >= 15 for normal, protan, deutan and tritan readers, in the
light and the dark palette; where hue cannot carry the difference a mark does (a
dashed outline for the straggler delay, hatching for idle time, dots and cross-hatching
for the second and third all-reduce phase, a cross for an fp16 step the scaler skipped). `figure_encodings` lists, per figure of a
spec, what each meaning is drawn with; the `distinguishable-colors` invariant checks
them, so a recolour that makes gradients orange like the compute boxes is refused.
Must not import torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..palette import PALETTE_NAMES
from .colorvision import contrast_ratio, indistinguishable, rgb
from .plugin import REGISTRY, plugin_of


@dataclass(frozen=True)
class BoxStyle:
    color: str  # a figure.colors role (grad, weight, data, server) or a palette name
    shade: str  # the xcolor mix after the colour: "!30!otpaper" (lighter), "!55!otink" (darker), "" (pure)
    mark: str = ""  # "" | dashed | hatched | dotted | crosshatch | crossed: the non-colour cue


BOX_STYLES = {
    "fetch": BoxStyle("weight", "!12!otpaper"),
    "forward": BoxStyle("otorange", "!30!otpaper"),
    "backward": BoxStyle("otorange", "!55!otink"),
    # a zero-bubble schedule's weight-gradient half of the backward: dotted, a shade between
    # the compute orange and the backward's (apart from a mesh's dotted data all-reduce)
    "wgrad": BoxStyle("otorange", "!75!otink", "dotted"),
    "slowdown": BoxStyle("otorange", "!8!otpaper", "dashed"),
    "optimizer": BoxStyle("server", "!12!otpaper"),
    "update": BoxStyle("server", ""),
    # an optimizer step or update the fp16 scaler skipped: the optimizer's fill, crossed out
    "skipped": BoxStyle("server", "!12!otpaper", "crossed"),
    "push": BoxStyle("grad", "!80!otpaper"),
    "allreduce": BoxStyle("grad", "!80!otpaper"),
    "allreduce-b": BoxStyle("grad", "!80!otpaper", "dotted"),
    "allreduce-c": BoxStyle("grad", "!80!otpaper", "crosshatch"),
    "gossip": BoxStyle("weight", "!80!otpaper"),
    "send": BoxStyle("data", "!55!otink"),
    "recv": BoxStyle("data", "!80!otpaper"),
    "wait": BoxStyle("otpaper", "", "hatched"),
}
PATTERNS = {"hatched": "north east lines", "dotted": "dots", "crosshatch": "crosshatch"}
# The "crossed" mark: the box's two diagonals, drawn by `path picture` inside the box (a
# pattern would read as one more kind of idle time; a cross reads as "did not happen").
CROSSED = ("path picture={{\\draw[{color}, line width=0.5pt] (path picture bounding box.south west) -- "
           "(path picture bounding box.north east) (path picture bounding box.north west) -- "
           "(path picture bounding box.south east);}}")
# Topology flows: (colour role, shade, mark) as templates/topology.tex.j2 draws them.
FLOW_STYLES = {"data": BoxStyle("data", "!45!otpaper"), "gradient": BoxStyle("grad", "!85!otink"),
               "weight": BoxStyle("weight", "!70!otink", "dashed")}


def fill_of(style: BoxStyle, colors: dict) -> str:
    """The xcolor expression of a style's fill under the spec's role colours."""
    base = style.color if style.color in PALETTE_NAMES or style.color == "otpaper" else colors[style.color]
    return base + style.shade


def label_color(style: BoxStyle, colors: dict, variant: str) -> str:
    """otink or otpaper, whichever reads better on the fill (WCAG contrast)."""
    fill = rgb(fill_of(style, colors), variant)
    ink, paper = (contrast_ratio(rgb(name, variant), fill) for name in ("otink", "otpaper"))
    return "otink" if ink >= paper else "otpaper"


def tikz_styles(colors: dict, variant: str) -> dict:
    """kind -> the TikZ keys of its tl-<kind> style (fill, outline, pattern); label colour under '<kind>-text'."""
    out = {}
    for kind, style in BOX_STYLES.items():
        fill = fill_of(style, colors)
        base = style.color if style.color in PALETTE_NAMES else colors.get(style.color, "otgray")
        if style.mark == "hatched":
            keys = "fill=none, draw=otgray!60!otpaper, line width=0.3pt, pattern=north east lines, pattern color=otgray!65!otpaper"
        else:
            keys = f"fill={fill}, draw={base}!70!otink, line width=0.4pt"
            if style.mark == "dashed":
                keys += ", densely dashed, line width=0.6pt"
            elif style.mark == "crossed":
                keys += ", " + CROSSED.format(color=f"{base}!70!otink")
            elif style.mark in PATTERNS:
                keys += f", postaction={{pattern={PATTERNS[style.mark]}, pattern color={base}!40!otink}}"
        out[kind] = keys
        out[f"{kind}-text"] = label_color(style, colors, variant)
    return out


def figure_styles(spec) -> dict:
    """Per figure of the spec ('timeline', 'topology'): meaning -> its BoxStyle."""
    kinds = plugin_of(spec).TIMELINE_BOXES  # the boxes that can share one figure of its strategy
    return {"timeline": {kind: BOX_STYLES[kind] for kind in kinds}, "topology": dict(FLOW_STYLES)}


def check_distinguishable(spec):
    """(spec path, message) for every pair of meanings in one figure a reader could confuse:
    a role coloured like the compute boxes (their orange is reserved), or two unmarked
    meanings closer than CIEDE2000 15 for some reader."""
    colors = spec.figure.colors
    for figure, styles in figure_styles(spec).items():
        fixed: dict = {}
        for meaning, style in styles.items():
            if style.color in PALETTE_NAMES and not style.mark:
                fixed.setdefault(style.color, meaning)
        for meaning, style in styles.items():
            base = colors.get(style.color)
            if base in fixed and not style.mark:
                yield (("figure", "colors", style.color),
                       f"{figure} figure: '{meaning}' (figure.colors.{style.color}) would be {base}, "
                       f"the colour reserved for '{fixed[base]}'")
        encodings = {meaning: (fill_of(style, colors), style.mark) for meaning, style in styles.items()}
        for problem in indistinguishable(encodings, spec.figure.palette):
            yield ("figure", "colors"), f"{figure} figure: {problem}"


def __getattr__(name):
    # STRATEGY_KINDS, the boxes that can share one figure per strategy, as older code
    # reads them: computed from the figures plugins (TIMELINE_BOXES) on use.
    if name == "STRATEGY_KINDS":
        return {kind: REGISTRY.get(kind).TIMELINE_BOXES for kind in REGISTRY.kinds()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
