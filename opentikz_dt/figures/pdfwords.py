"""What a compiled figure prints, read back from the PDF: word boxes (pdftotext -bbox) and the
page size (pdfinfo), to check legibility at final size and text running into text.

- `pdf_words(pdf)`: every word with its box in points (y grows downwards, as pdftotext gives).
- `page_size_cm(pdf)`: the page's width and height.
- `smallest_text_pt(words)`: the font size of the smallest word (a word box is about 0.885
  times the font size high in Latin Modern, measured on this toolchain).
- `overlapping_words(words)`: pairs of words whose boxes overlap.
- `glued_labels(words, labels)`: labels drawn as separate nodes that no longer print as
  words of their own: pdftotext joins text that touches ("Worker 1Worker 2" reads as the
  words "Worker", "1Worker", ...), so a missing word means two labels ran together.
Must not import torch.
"""

from __future__ import annotations

import html
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

import shutil

from .compile import CompileError, ToolMissingError, _run

WORD_HEIGHT_PER_PT = 0.885
_WORD = re.compile(r'<word xMin="([\d.]+)" yMin="([\d.]+)" xMax="([\d.]+)" yMax="([\d.]+)">(.*?)</word>')
_SIZE = re.compile(r"Page size:\s+([\d.]+) x ([\d.]+) pts")


@dataclass(frozen=True)
class Word:
    text: str
    x0: float
    y0: float
    x1: float
    y1: float

    def overlap(self, other: "Word") -> float:
        w = min(self.x1, other.x1) - max(self.x0, other.x0)
        h = min(self.y1, other.y1) - max(self.y0, other.y0)
        return w * h if w > 0 and h > 0 else 0.0


def _poppler(program: str, args: list, pdf: bytes, timeout: float) -> str:
    with tempfile.TemporaryDirectory(prefix="dtgen-words-") as tmp:
        cwd = Path(tmp)
        (cwd / "figure.pdf").write_bytes(pdf)
        path = shutil.which(program)
        if path is None:
            raise ToolMissingError(f"'{program}' is not installed; on Debian/Ubuntu: sudo apt-get install poppler-utils")
        proc = _run([path] + args, cwd, timeout, program)
        if proc.returncode != 0:
            raise CompileError(f"{program} failed: {proc.stderr.decode(errors='replace').strip()}")
        return proc.stdout.decode("utf-8", errors="replace")


def pdf_words(pdf: bytes, timeout: float = 60) -> list[Word]:
    text = _poppler("pdftotext", ["-bbox", "figure.pdf", "-"], pdf, timeout)
    return [Word(html.unescape(m.group(5)), *map(float, m.group(1, 2, 3, 4))) for m in _WORD.finditer(text)]


def page_size_cm(pdf: bytes, timeout: float = 60) -> tuple[float, float]:
    match = _SIZE.search(_poppler("pdfinfo", ["figure.pdf"], pdf, timeout))
    if not match:
        raise CompileError("pdfinfo printed no page size")
    return float(match.group(1)) * 2.54 / 72, float(match.group(2)) * 2.54 / 72


def smallest_text_pt(words: list[Word]) -> float:
    """Font size of the smallest word; rotated words (taller than wide) count by their width."""
    sizes = [min(w.y1 - w.y0, w.x1 - w.x0) if (w.y1 - w.y0) > 2 * (w.x1 - w.x0) and len(w.text) > 2 else w.y1 - w.y0
             for w in words]
    return min(sizes, default=float("inf")) / WORD_HEIGHT_PER_PT


ELLIPSIS = set(".·…⋮⋯")  # $\vdots$ prints as stacked dots that pdftotext reads as overlapping words


def overlapping_words(words: list[Word], min_area: float = 0.5) -> list[str]:
    words = [w for w in words if not set(w.text) <= ELLIPSIS]
    problems = []
    for i, a in enumerate(words):
        for b in words[i + 1:]:
            if a.overlap(b) > min_area:
                problems.append(f"'{a.text}' and '{b.text}' overlap")
    return problems


def glued_labels(words: list[Word], labels: list[str]) -> list[str]:
    """Labels (each one text node) whose words are not all words of their own in the PDF."""
    present = {w.text for w in words}
    return [label for label in labels if any(part not in present for part in label.split())]
