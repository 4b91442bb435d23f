"""The one shared palette (Okabe-Ito, as the OpenTikZ seed template) and its TeX preamble.

Every figure's colours come from here; templates only ever see these names.
"""

from __future__ import annotations

# Values byte-identical to the seed template's \definecolor lines.
LIGHT = {
    "otblue": "0072B2",
    "otorange": "E69F00",
    "otteal": "009E73",
    "otpurple": "CC79A7",
    "otgray": "5A5A5A",
}

# Dark variant: the same hues lifted so they read on a dark page, plus the page colour
# and the ink colour used for text (`otink`) so templates never name `black`/`white`.
DARK = {
    "otblue": "56B4E9",
    "otorange": "F0B840",
    "otteal": "3FC49A",
    "otpurple": "E08FC0",
    "otgray": "B4B4B4",
}

PALETTE_NAMES = tuple(LIGHT)  # the only colour names a spec may use
PAGE = {"light": "FFFFFF", "dark": "1E1E1E"}  # otpaper
INK = {"light": "000000", "dark": "EDEDED"}  # otink


def palette_colors(variant: str) -> dict[str, str]:
    """All colour definitions for a variant: the five names plus otpaper and otink."""
    base = LIGHT if variant == "light" else DARK
    return {**base, "otpaper": PAGE[variant], "otink": INK[variant]}


def render_palette(variant: str) -> str:
    """The \\definecolor block that starts every generated figure."""
    lines = [f"\\definecolor{{{name}}}{{HTML}}{{{value}}}" for name, value in palette_colors(variant).items()]
    return "\n".join(lines)
