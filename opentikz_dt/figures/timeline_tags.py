"""Letters above fetch and push boxes too narrow to hold them.

A fetch or push box names its phase with a letter (F, P), as seed 001 draws them. At a
column's width a fetch can be a millimetre wide: the letter no longer fits inside at a
legible size, and shrinking it below 6 pt is not an option. It is set instead just above
its box, in the gap between lanes (draw_timeline widens every lane gap to TAG_GAP when
any letter sits there, so lanes stay evenly spaced). Neighbouring letters on one lane are
spread apart to stay readable (pdftotext still reads each as a word of its own); one that
would land farther than a letter's pitch from its box is left out rather than drawn
where it could be read as another box's. The time axis is never distorted.
Must not import torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from .model import Tex

TAG_KINDS = ("fetch", "push")  # the boxes whose letter names the phase
TAG_PITCH = 0.32  # cm between two letters' centres: a scriptsize capital (~0.16 cm) and a gap pdftotext still reads as a space
TAG_HALF = 0.09  # cm: half a scriptsize capital, so a letter stays inside the plot area
TAG_GAP = 0.32  # cm between lanes when letters sit there (a scriptsize capital is ~0.17 cm tall)
TAG_RISE = 0.03  # cm from the box's top edge to the letter's baseline (F and P have no depth)
MAX_TAGS = 400  # a figure needing more letters than this is too dense to read them: none drawn


@dataclass(frozen=True)
class DrawnTag:
    name: str  # <lane>-<panel>-<kind><n>: the n-th box of that kind on the lane
    text: Tex
    x: float  # centre
    y: float  # baseline


def spread(wanted: list[float], pitch: float, lo: float, hi: float) -> list[float]:
    """Centres at least `pitch` apart, inside [lo, hi], each as near its wanted centre
    (sorted) as its neighbours allow: letters that would touch form a group centred on the
    mean of their wishes (the classic 1-D label placement)."""
    groups: list[list[float]] = []

    def first(group: list[float]) -> float:
        left = sum(group) / len(group) - pitch * (len(group) - 1) / 2
        return max(lo, min(left, hi - pitch * (len(group) - 1)))

    for x in wanted:
        groups.append([x])
        while len(groups) > 1 and first(groups[-2]) + pitch * len(groups[-2]) > first(groups[-1]) + 1e-9:
            last = groups.pop()
            groups[-1].extend(last)
    return [first(group) + pitch * k for group in groups for k in range(len(group))]


def place_tags(letters: list[tuple[float, str, str]], width: float, top: float) -> list[DrawnTag]:
    """Tags for one lane whose boxes' top edge is at `top`: `letters` holds (box centre,
    letter, node name) in time order; a letter pushed more than a pitch from its box is dropped."""
    if not letters:
        return []
    wanted = [x for x, _, _ in letters]
    placed = spread(wanted, TAG_PITCH, TAG_HALF, width - TAG_HALF)
    return [DrawnTag(name, Tex(letter), x, top + TAG_RISE)
            for (want, letter, name), x in zip(letters, placed) if abs(x - want) <= TAG_PITCH + 1e-9]
