"""How wide a label prints, estimated from its text (no TeX run): a conservative width per
character of \\footnotesize sans serif, wider for math glyphs and Chinese or Japanese ones,
a fraction as wide as its wider part; where to break a label in two, and how to wrap a
long line of text. Pure; must not import torch.
"""

from __future__ import annotations

import re

from ..texsafe import is_cjk

CHAR_CM = 0.15  # upper estimate of one \footnotesize sans-serif character (measured 0.13-0.145)
MATH_CHAR_CM = 0.2  # and of one math glyph (italic, with its spacing)
LABEL_PAD = 0.14  # slbl inner sep, both sides
_MACRO = re.compile(r"\\[A-Za-z]+")
_FONT = re.compile(r"\\(?:mathbf|mathrm|mathit|mathsf|mathcal|boldsymbol|text|textbf|textit)\b")
_MATH = re.compile(r"\$[^$]*\$")
_FRAC = re.compile(r"\\[dt]?frac\s*")
_COLOR = re.compile(r"\\color\{[^{}]*\}")  # a colour switch and its colour expression print nothing


def text_cm(label: str) -> float:
    """Estimated width (cm) of a label as printed: a TeX command counts as one character
    (a font switch as none); math glyphs are wider and math spaces do not print."""
    def visible(text: str, spaces: bool = True) -> int:
        shown = re.sub(r"[${}^_]", "", _MACRO.sub("x", _FONT.sub("", text)))
        return len(shown if spaces else shown.replace(" ", ""))

    label = _COLOR.sub("", label)
    math = _stacked_fractions("".join(_MATH.findall(label)))
    wide = sum(1 for ch in label if is_cjk(ch))  # a Chinese or Japanese glyph is a full em: two characters
    return CHAR_CM * (visible(_MATH.sub("", label)) + wide) + MATH_CHAR_CM * visible(math, spaces=False) + LABEL_PAD



def _group(text: str, start: int) -> tuple[str, int]:
    """The braced group (or single token) at text[start:], without its braces, and the index after it."""
    if start < len(text) and text[start] == "{":
        depth = 0
        for index in range(start, len(text)):
            depth += {"{": 1, "}": -1}.get(text[index], 0)
            if depth == 0:
                return text[start + 1:index], index + 1
        return text[start + 1:], len(text)
    token = re.match(r"\\[A-Za-z]+|.", text[start:], re.DOTALL)
    return (token.group(0), start + len(token.group(0))) if token else ("", start)


def _stacked_fractions(math: str) -> str:
    """Math with each \\frac{a}{b} replaced by the wider of a and b: the two stack, so the
    fraction is as wide as its wider part (narrower still, in script style)."""
    match = _FRAC.search(math)
    while match:
        top, after = _group(math, match.end())
        bottom, after = _group(math, after)
        wider = max(_stacked_fractions(top), _stacked_fractions(bottom), key=len)
        math = math[:match.start()] + wider + math[after:]
        match = _FRAC.search(math, match.start() + len(wider))
    return math


def split_in_two(line: str) -> list[str]:
    """The line split at the space outside math that leaves the shortest longer half, the
    later space of two as good ("Worker 1 / (GPU1)"); the line itself when it has no such space."""
    spaces, in_math, escaped = [], False, False
    for index, ch in enumerate(line):
        if ch == "$" and not escaped:
            in_math = not in_math
        elif ch == " " and not in_math:
            spaces.append(index)
        escaped = ch == "\\" and not escaped
    if not spaces:
        return [line]
    best = min(spaces, key=lambda i: (round(max(text_cm(line[:i]), text_cm(line[i + 1:])), 3), -i))
    return [line[:best].rstrip(), line[best + 1:].lstrip()]


# Chinese and Japanese punctuation that must not start a line: it stays with the glyph before it.
_NO_LINE_START = set("，。、：；！？）》」』】〕…")


def wrap_line(line: str, width: int) -> list[str]:
    """Plain text as lines of at most `width` characters where it can (a longer word keeps a
    line of its own): broken at spaces, and between two Chinese or Japanese glyphs, which
    text in those scripts has no spaces between and which count as two characters each."""
    lines = [""]
    for word in line.split(" "):
        for k, piece in enumerate(_breakable_pieces(word)):
            joint = " " if k == 0 and lines[-1] else ""
            if lines[-1] and _chars(lines[-1]) + len(joint) + _chars(piece) > width:
                lines.append(piece)
            else:
                lines[-1] += joint + piece
    return lines


def _breakable_pieces(word: str) -> list[str]:
    """A word's pieces a line may break between: each wide glyph (with the punctuation after
    it) on its own, the rest of the word in runs."""
    pieces: list[str] = []
    for ch in word:
        wide = is_cjk(ch)
        if pieces and (ch in _NO_LINE_START or not wide and not is_cjk(pieces[-1][-1])):
            pieces[-1] += ch
        else:
            pieces.append(ch)
    return pieces or [""]


def _chars(text: str) -> int:
    return sum(2 if is_cjk(ch) else 1 for ch in text)
