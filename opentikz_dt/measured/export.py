"""Writing one rendered figure in the requested formats (tex, pdf, png, svg). Side effects: files.

Compiles through opentikz_dt.figures.compile (safe pdflatex settings); the .tex is
always written first so a failed compile leaves something to look at. Must not import torch.
"""

from __future__ import annotations

from pathlib import Path

from ..figures.compile import compile_pdf, pdf_page_size, pdf_to_png, tex_to_svg


def write_outputs(tex: str, out_dir: Path, stem: str, formats: tuple, dpi: int = 300, body: str | None = None,
                  target_cm: float | None = None, notify=None) -> list:
    """Write stem.tex (`body`, the bare picture, when given) and the formats compiled from `tex`.

    With a target width (figure.width / --width), `notify(line)` hears of a compiled page
    wider than asked, so nobody learns it only when the paper's column overflows."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tex_path = out_dir / f"{stem}.tex"
    tex_path.write_text(body if body is not None else tex, encoding="utf-8")
    written = [tex_path]
    if not set(formats) - {"tex"}:
        return written
    log = out_dir / f"{stem}.log"
    compiled = compile_pdf(tex, keep_log=log)  # a failed compile leaves its log here and names it
    log.unlink(missing_ok=True)
    if target_cm is not None and notify is not None:
        drawn_cm = pdf_page_size(compiled.pdf)[0] / 72.27 * 2.54
        if drawn_cm > target_cm + 0.05:
            notify(f"{tex_path}: drawn {drawn_cm:.1f} cm wide, wider than the {target_cm:.1f} cm asked")
    if "pdf" in formats:
        (out_dir / f"{stem}.pdf").write_bytes(compiled.pdf)
        written.append(out_dir / f"{stem}.pdf")
    if "png" in formats:
        (out_dir / f"{stem}.png").write_bytes(pdf_to_png(compiled.pdf, dpi=dpi))
        written.append(out_dir / f"{stem}.png")
    if "svg" in formats:
        (out_dir / f"{stem}.svg").write_bytes(tex_to_svg(tex))
        written.append(out_dir / f"{stem}.svg")
    return written
