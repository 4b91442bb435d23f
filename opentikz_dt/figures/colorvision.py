"""Colour science for the figures' colour invariants: xcolor mixes, colour-vision
simulation, CIEDE2000 and WCAG contrast. Pure Python (no numpy): a figure has a
dozen colours, not an image's worth.

- `rgb(expr, variant)`: the sRGB colour of an xcolor expression over the palette
  (`otorange!25!otpaper` is 25 % orange, 75 % page, mixed in sRGB as xcolor does).
- `simulate(rgb, kind)`: protan / deutan / tritan vision with the Machado, Oliveira and
  Fernandes (2009) matrices at severity 1.0, applied to linear RGB.
- `delta_e(a, b)`: CIEDE2000 between two sRGB colours (CIELAB, D65 white).
- `worst_delta_e(a, b)`: the smallest CIEDE2000 over normal vision and the three
  simulations: what the least favoured reader sees.
- `contrast_ratio(a, b)`: WCAG 2 contrast of text colour a on background b.
Must not import torch.
"""

from __future__ import annotations

import math
import re

from ..palette import palette_colors

MIN_DELTA_E = 15.0  # two meanings must stay this far apart for every reader
MIN_CONTRAST = 4.5  # WCAG AA for text on its fill

# Machado et al. 2009, "A Physiologically-based Model for Simulation of Color Vision
# Deficiency", severity 1.0 (dichromacy); rows map linear (R, G, B) to simulated RGB.
MACHADO = {
    "protan": ((0.152286, 1.052583, -0.204868), (0.114503, 0.786281, 0.099216), (-0.003882, -0.048116, 1.051998)),
    "deutan": ((0.367322, 0.860646, -0.227968), (0.280085, 0.672501, 0.047413), (-0.011820, 0.042940, 0.968881)),
    "tritan": ((1.255528, -0.076749, -0.178779), (-0.078411, 0.930809, 0.147602), (0.004733, 0.691367, 0.303900)),
}
VISIONS = ("normal",) + tuple(MACHADO)

_MIX = re.compile(r"^([a-z]+)(?:!(\d+(?:\.\d+)?)!(.+))?$")


def rgb(expr: str, variant: str = "light") -> tuple:
    """sRGB (0..1 each) of an xcolor expression made of palette names: `a`, `a!p!b`, `a!p!b!q!c`."""
    match = _MIX.match(expr)
    if not match:
        raise ValueError(f"not a palette colour expression: {expr!r}")
    name, percent, rest = match.groups()
    colors = palette_colors(variant)
    if name not in colors:
        raise ValueError(f"{name!r} is not a palette colour")
    base = tuple(int(colors[name][i:i + 2], 16) / 255 for i in (0, 2, 4))
    if percent is None:
        return base
    other = rgb(rest, variant)
    p = float(percent) / 100
    return tuple(p * a + (1 - p) * b for a, b in zip(base, other))


def _to_linear(c: float) -> float:
    return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4


def _to_srgb(c: float) -> float:
    c = min(1.0, max(0.0, c))
    return 12.92 * c if c <= 0.0031308 else 1.055 * c ** (1 / 2.4) - 0.055


def simulate(color: tuple, vision: str) -> tuple:
    """The sRGB colour a reader with `vision` (normal, protan, deutan, tritan) perceives."""
    if vision == "normal":
        return color
    linear = [_to_linear(c) for c in color]
    return tuple(_to_srgb(sum(m * c for m, c in zip(row, linear))) for row in MACHADO[vision])


def lab(color: tuple) -> tuple:
    """CIELAB (D65) of an sRGB colour."""
    r, g, b = (_to_linear(c) for c in color)
    x = (0.4124564 * r + 0.3575761 * g + 0.1804375 * b) / 0.95047
    y = 0.2126729 * r + 0.7151522 * g + 0.0721750 * b
    z = (0.0193339 * r + 0.1191920 * g + 0.9503041 * b) / 1.08883

    def f(t):
        return t ** (1 / 3) if t > (6 / 29) ** 3 else t / (3 * (6 / 29) ** 2) + 4 / 29

    fx, fy, fz = f(x), f(y), f(z)
    return 116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz)


def ciede2000(lab1: tuple, lab2: tuple) -> float:
    """CIEDE2000 colour difference (Sharma, Wu and Dalal 2005), kL = kC = kH = 1."""
    l1, a1, b1 = lab1
    l2, a2, b2 = lab2
    c_bar = (math.hypot(a1, b1) + math.hypot(a2, b2)) / 2
    g = 0.5 * (1 - math.sqrt(c_bar ** 7 / (c_bar ** 7 + 25 ** 7)))
    a1p, a2p = (1 + g) * a1, (1 + g) * a2
    c1p, c2p = math.hypot(a1p, b1), math.hypot(a2p, b2)
    h1p = math.degrees(math.atan2(b1, a1p)) % 360 if c1p else 0.0
    h2p = math.degrees(math.atan2(b2, a2p)) % 360 if c2p else 0.0
    dl, dc = l2 - l1, c2p - c1p
    if c1p * c2p == 0:
        dh = 0.0
    else:
        dh = h2p - h1p
        if dh > 180:
            dh -= 360
        elif dh < -180:
            dh += 360
    dH = 2 * math.sqrt(c1p * c2p) * math.sin(math.radians(dh / 2))
    l_bar, cp_bar = (l1 + l2) / 2, (c1p + c2p) / 2
    if c1p * c2p == 0:
        h_bar = h1p + h2p
    elif abs(h1p - h2p) <= 180:
        h_bar = (h1p + h2p) / 2
    else:
        h_bar = (h1p + h2p + 360) / 2 if h1p + h2p < 360 else (h1p + h2p - 360) / 2
    t = (1 - 0.17 * math.cos(math.radians(h_bar - 30)) + 0.24 * math.cos(math.radians(2 * h_bar))
         + 0.32 * math.cos(math.radians(3 * h_bar + 6)) - 0.20 * math.cos(math.radians(4 * h_bar - 63)))
    d_theta = 30 * math.exp(-(((h_bar - 275) / 25) ** 2))
    r_c = 2 * math.sqrt(cp_bar ** 7 / (cp_bar ** 7 + 25 ** 7))
    s_l = 1 + 0.015 * (l_bar - 50) ** 2 / math.sqrt(20 + (l_bar - 50) ** 2)
    s_c = 1 + 0.045 * cp_bar
    s_h = 1 + 0.015 * cp_bar * t
    r_t = -math.sin(math.radians(2 * d_theta)) * r_c
    return math.sqrt((dl / s_l) ** 2 + (dc / s_c) ** 2 + (dH / s_h) ** 2 + r_t * (dc / s_c) * (dH / s_h))


def delta_e(a: tuple, b: tuple, vision: str = "normal") -> float:
    """CIEDE2000 between two sRGB colours as a reader with `vision` sees them."""
    return ciede2000(lab(simulate(a, vision)), lab(simulate(b, vision)))


def worst_delta_e(a: tuple, b: tuple) -> tuple:
    """(smallest CIEDE2000 over normal vision and the three simulations, the vision giving it)."""
    return min((delta_e(a, b, vision), vision) for vision in VISIONS)


def luminance(color: tuple) -> float:
    r, g, b = (_to_linear(c) for c in color)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast_ratio(a: tuple, b: tuple) -> float:
    """WCAG 2 contrast ratio (1..21) between two sRGB colours."""
    la, lb = sorted((luminance(a), luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def indistinguishable(encodings: dict, variant: str, minimum: float = MIN_DELTA_E) -> list:
    """Pairs of meanings a reader cannot tell apart, as messages.

    `encodings` maps a meaning ("push", "forward") to (fill expression, mark): a mark is
    the non-colour cue drawn with it ("" for none, else e.g. "dashed", "hatched"). Two
    meanings with different marks are distinguishable whatever their colours."""
    problems = []
    items = sorted(encodings.items())
    for i, (name_a, (expr_a, mark_a)) in enumerate(items):
        for name_b, (expr_b, mark_b) in items[i + 1:]:
            if mark_a != mark_b:
                continue
            worst, vision = worst_delta_e(rgb(expr_a, variant), rgb(expr_b, variant))
            if worst < minimum:
                problems.append(f"'{name_a}' ({expr_a}) and '{name_b}' ({expr_b}) differ by CIEDE2000 "
                                f"{worst:.1f} for {vision} vision ({variant} palette; at least {minimum:g} needed)")
    return problems
