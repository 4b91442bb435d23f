"""TeX -> PDF / SVG / PNG with the safe settings of FIGURES.md. Side effects: temp dirs, files.

pdflatex runs with -no-shell-escape -halt-on-error -interaction=nonstopmode in a fresh
temporary directory, with openin_any=p (no reading outside it), SOURCE_DATE_EPOCH and
FORCE_SOURCE_DATE=1 (byte-identical PDFs) and a timeout. A failure quotes the first
'!' line of the log; a missing program names the Debian package that provides it.
Must not import torch.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from ..errors import CompileError, ToolMissingError

DEBIAN_PACKAGES = {
    "pdflatex": "texlive-latex-base (with texlive-latex-extra, texlive-pictures)",
    "latex": "texlive-latex-base (with texlive-latex-extra, texlive-pictures)",
    "dvisvgm": "dvisvgm",
    "pdftocairo": "poppler-utils",
    "pdftoppm": "poppler-utils",
    "pdftotext": "poppler-utils",
    "pdfinfo": "poppler-utils",
    "latexmk": "latexmk",
}
TIMEOUT_S = 60.0
EPOCH = "1700000000"


class CompileTimeout(CompileError):
    """A tool ran past its time limit (a busy machine as often as a bad file)."""


@dataclass(frozen=True)
class Compiled:
    pdf: bytes
    log: str


def tool(name: str) -> str:
    """Absolute path of an external program, or ToolMissingError naming its Debian package."""
    path = shutil.which(name)
    if path is None:
        raise ToolMissingError(f"'{name}' is not installed; on Debian/Ubuntu: sudo apt-get install {DEBIAN_PACKAGES[name]}")
    return path


def _env() -> dict:
    env = dict(os.environ)
    env.update(openin_any="p", openout_any="p", shell_escape="f", SOURCE_DATE_EPOCH=EPOCH, FORCE_SOURCE_DATE="1",
               TEXMFOUTPUT="", max_print_line="10000")
    return env


def _run(argv: list[str], cwd: Path, timeout: float, what: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, cwd=cwd, env=_env(), stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise CompileTimeout(f"{what} did not finish within {timeout:g} s") from exc


def first_error(log: str) -> str:
    """The first '!' line of a TeX log (with the line number that follows, when there is one)."""
    lines = log.splitlines()
    for index, line in enumerate(lines):
        if line.startswith("!"):
            where = next((l for l in lines[index + 1:index + 8] if l.startswith("l.")), "")
            return f"{line} {where.split(' ', 1)[0]}".strip()
    return "no '!' line in the log"


def compile_pdf(tex: str, timeout: float = TIMEOUT_S, keep_log: Path | None = None, engine: str = "pdflatex") -> Compiled:
    """Compile standalone TeX in a temporary directory; return the PDF bytes and the log."""
    program = tool(engine)
    with tempfile.TemporaryDirectory(prefix="dtgen-tex-") as tmp:
        cwd = Path(tmp)
        (cwd / "figure.tex").write_text(tex, encoding="utf-8")
        argv = [program, "-no-shell-escape", "-interaction=nonstopmode", "-halt-on-error", "figure.tex"]
        proc = _run(argv, cwd, timeout, engine)
        log_path = cwd / "figure.log"
        log = log_path.read_text(encoding="latin-1") if log_path.exists() else proc.stdout.decode("latin-1")
        out = cwd / ("figure.pdf" if engine == "pdflatex" else "figure.dvi")
        if proc.returncode != 0 or not out.exists():
            where = ""
            if keep_log is not None:
                keep_log.write_text(log, encoding="latin-1")
                where = f" (log: {keep_log})"
            hint = ""
            if "CJKutf8.sty' not found" in log or "gbsn" in first_error(log):
                hint = "; Chinese/Japanese labels need: sudo apt-get install latex-cjk-chinese fonts-arphic-uming"
            raise CompileError(f"{engine} failed: {first_error(log)}{where}{hint}")
        if keep_log is not None:
            keep_log.write_text(log, encoding="latin-1")
        missing = missing_glyphs(log)
        if missing:
            raise CompileError(f"{engine} failed: {missing}")
        return Compiled(out.read_bytes(), log)


# pdflatex only warns when a font lacks a glyph and prints nothing in its place.
_MISSING = re.compile(r"^Missing character: There is no (.) in font ([A-Za-z0-9-]+?)!$", re.MULTILINE)
_CJK_FONT = re.compile(r"^[a-z]{4}u([0-9a-f]{2})$")  # Arphic CJKutf8 fonts: one per 256-code-point plane


def missing_glyphs(log: str) -> str:
    """'' when every character printed, else a message naming the first character a font lacks."""
    match = _MISSING.search(log)
    if not match:
        return ""
    char, font = match.groups()
    plane = _CJK_FONT.match(font)
    if plane:
        code = int(plane.group(1), 16) * 256 + ord(char)
        return (f"the installed CJK fonts (Arphic, Debian latex-cjk-chinese) have no glyph for {chr(code)!r} "
                f"(U+{code:04X}); use a simplified Chinese form or Latin-1 text")
    return f"font {font} has no glyph for {char!r}"


_CACHE: "OrderedDict[str, Compiled | CompileError]" = OrderedDict()
_CACHE_LOCK = threading.Lock()
CACHE_SIZE = 16


def compile_cached(tex: str) -> Compiled:
    """compile_pdf(tex), memoised by the TeX text (success or CompileError, not timeouts), so the
    contract's checks of one figure (figure-compiles, no-overlaps) share a single pdflatex run."""
    key = hashlib.sha256(tex.encode("utf-8")).hexdigest()
    with _CACHE_LOCK:
        hit = _CACHE.get(key)
        if hit is not None:
            _CACHE.move_to_end(key)
    if hit is None:
        try:
            hit = compile_pdf(tex)
        except CompileTimeout:  # not the TeX's fault: try again next time
            raise
        except CompileError as exc:
            hit = exc
        with _CACHE_LOCK:
            _CACHE[key] = hit
            while len(_CACHE) > CACHE_SIZE:
                _CACHE.popitem(last=False)
    if isinstance(hit, CompileError):
        raise CompileError(str(hit))
    return hit


def pdf_to_png(pdf: bytes, dpi: int = 300, timeout: float = TIMEOUT_S) -> bytes:
    program = tool("pdftoppm")
    with tempfile.TemporaryDirectory(prefix="dtgen-png-") as tmp:
        cwd = Path(tmp)
        (cwd / "figure.pdf").write_bytes(pdf)
        proc = _run([program, "-png", "-r", str(dpi), "-singlefile", "figure.pdf", "figure"], cwd, timeout, "pdftoppm")
        if proc.returncode != 0:
            raise CompileError(f"pdftoppm failed: {proc.stderr.decode(errors='replace').strip()}")
        return (cwd / "figure.png").read_bytes()


def tex_to_svg(tex: str, timeout: float = TIMEOUT_S) -> bytes:
    """SVG through latex -> DVI -> dvisvgm (fonts as paths), or pdftocairo when dvisvgm is missing."""
    if shutil.which("dvisvgm") is None:
        return pdf_to_svg(compile_pdf(tex, timeout).pdf, timeout)
    program = tool("dvisvgm")
    with tempfile.TemporaryDirectory(prefix="dtgen-svg-") as tmp:
        cwd = Path(tmp)
        dvi = compile_pdf(tex, timeout, engine="latex").pdf
        (cwd / "figure.dvi").write_bytes(dvi)
        proc = _run([program, "--no-fonts", "--bbox=min", "--optimize", "-o", "figure.svg", "figure.dvi"], cwd, timeout, "dvisvgm")
        if proc.returncode != 0 or not (cwd / "figure.svg").exists():
            raise CompileError(f"dvisvgm failed: {proc.stderr.decode(errors='replace').strip()[:300]}")
        return (cwd / "figure.svg").read_bytes()


def pdf_to_svg(pdf: bytes, timeout: float = TIMEOUT_S) -> bytes:
    program = tool("pdftocairo")
    with tempfile.TemporaryDirectory(prefix="dtgen-svg-") as tmp:
        cwd = Path(tmp)
        (cwd / "figure.pdf").write_bytes(pdf)
        proc = _run([program, "-svg", "figure.pdf", "figure.svg"], cwd, timeout, "pdftocairo")
        if proc.returncode != 0:
            raise CompileError(f"pdftocairo failed: {proc.stderr.decode(errors='replace').strip()}")
        return (cwd / "figure.svg").read_bytes()


def pdf_text(pdf: bytes, timeout: float = TIMEOUT_S) -> str:
    """The text of a PDF (pdftotext), to check labels print literally."""
    program = tool("pdftotext")
    with tempfile.TemporaryDirectory(prefix="dtgen-txt-") as tmp:
        cwd = Path(tmp)
        (cwd / "figure.pdf").write_bytes(pdf)
        proc = _run([program, "-layout", "figure.pdf", "figure.txt"], cwd, timeout, "pdftotext")
        if proc.returncode != 0:
            raise CompileError(f"pdftotext failed: {proc.stderr.decode(errors='replace').strip()}")
        return (cwd / "figure.txt").read_text(encoding="utf-8", errors="replace")


def pdf_page_size(pdf: bytes, timeout: float = TIMEOUT_S) -> tuple[float, float]:
    """Width and height of the first page in TeX points (pdfinfo reports PostScript points)."""
    program = tool("pdfinfo")
    with tempfile.TemporaryDirectory(prefix="dtgen-info-") as tmp:
        cwd = Path(tmp)
        (cwd / "figure.pdf").write_bytes(pdf)
        proc = _run([program, "figure.pdf"], cwd, timeout, "pdfinfo")
        match = re.search(r"^Page size:\s+([\d.]+) x ([\d.]+) pts", proc.stdout.decode(errors="replace"), re.MULTILINE)
        if proc.returncode != 0 or not match:
            raise CompileError(f"pdfinfo failed: {proc.stderr.decode(errors='replace').strip()}")
        return float(match.group(1)) * 72.27 / 72, float(match.group(2)) * 72.27 / 72


_WORD = re.compile(r'<word xMin="([\d.]+)" yMin="([\d.]+)" xMax="([\d.]+)" yMax="([\d.]+)">([^<]*)</word>')
# pdftotext's word box is the font's ascent + descent: 0.885 of the font size for Latin Modern (measured).
WORD_BOX_PER_PT = 0.885


def pdf_words(pdf: bytes, timeout: float = TIMEOUT_S) -> list[tuple[str, float]]:
    """Every word of a PDF with its font size at final size (pt), from pdftotext's word boxes.
    Sloped text (a label along a steep link) comes one glyph a word, in a box the font size
    high along one side and the glyph's width along the other, whichever way it is turned
    (measured): a one-glyph word counts by its longer side."""
    program = tool("pdftotext")
    with tempfile.TemporaryDirectory(prefix="dtgen-txt-") as tmp:
        cwd = Path(tmp)
        (cwd / "figure.pdf").write_bytes(pdf)
        proc = _run([program, "-bbox", "figure.pdf", "figure.html"], cwd, timeout, "pdftotext")
        if proc.returncode != 0:
            raise CompileError(f"pdftotext failed: {proc.stderr.decode(errors='replace').strip()}")
        html = (cwd / "figure.html").read_text(encoding="utf-8", errors="replace")
    words = []
    for m in _WORD.finditer(html):
        word, (x0, y0, x1, y1) = m.group(5), (float(m.group(i)) for i in range(1, 5))
        box = max(y1 - y0, x1 - x0) if len(word) == 1 else y1 - y0
        words.append((word, box * 72.27 / 72 / WORD_BOX_PER_PT))
    return words
