"""The edit contract's invariants, as code.

Which invariants exist is the contract's business: each is one "id: description" line
in schemas/meta.json plus one entry in schemas/contract.exec.json naming its check
("module:function") and what it applies to. Spec invariants (applies_to "spec") run
on every load and every edit: the check gets the Spec and yields (path, message).
TeX invariants run on generated figures (edit/texcheck.py). Adding an invariant needs
no registry here. Must not import torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from .errors import DtgenError, Issue
from .palette import PALETTE_NAMES
from .texsafe import LabelError, check_typed_label, render_label

FLOWS = ("data", "grad", "weight")


@dataclass(frozen=True)
class Invariant:
    id: str
    applies_to: str  # "spec" or "tex"
    description: str
    check: Callable


def _distinct_flow_colors(spec):
    colors = spec.figure.colors
    seen: dict[str, str] = {}
    for flow in FLOWS:
        if colors[flow] in seen:
            yield (("figure", "colors", flow),
                   f"flows must keep distinct colours: '{flow}' and '{seen[colors[flow]]}' are both {colors[flow]}")
        seen.setdefault(colors[flow], flow)


def _palette_names_only(spec):
    for key, value in spec.figure.colors.items():
        if value not in PALETTE_NAMES:
            yield ("figure", "colors", key), f"{value!r} is not a palette name ({', '.join(PALETTE_NAMES)})"


def _all_workers_synchronise(spec):
    # Every worker drawn must take part in synchronisation: ids are dense (w1..wN) and
    # nothing refers to a worker outside the group.
    ids = set(spec.topology.workers.ids)
    for table in ("slowdown", "labels"):
        for worker_id in getattr(spec.topology.workers, table):
            if worker_id not in ids:
                yield ("topology", "workers", table, worker_id), f"no worker '{worker_id}': the synchronising workers are w1..w{len(ids)}"


def labelled_fields(spec):
    """Every user label with its spec path (what the templates will print)."""
    t, f = spec.topology, spec.figure
    yield ("title",), spec.title
    yield ("topology", "data", "label"), t.data_label
    yield ("topology", "workers", "label"), t.workers.label
    for worker_id, text in t.workers.labels.items():
        yield ("topology", "workers", "labels", worker_id), text
    yield ("topology", "servers", "label"), t.servers.label
    for key, text in f.labels.items():
        if isinstance(text, dict):  # the legend: one name per box kind
            for kind, name in text.items():
                yield ("figure", "labels", key, kind), name
        else:
            yield ("figure", "labels", key), text


# The notes whose line breaks start new lines (figures/texts.label_lines_tex draws them line
# by line); in every other label a newline is refused, as any control character is.
LINE_BREAK_LABELS = frozenset({"sync_note", "async_note", "central_storage_note"})


def _labels_safe(spec):
    for path, text in labelled_fields(spec):
        line_breaks = path[:2] == ("figure", "labels") and len(path) == 3 and path[2] in LINE_BREAK_LABELS
        try:
            check_typed_label(text, line_breaks)
            for line in text.split("\n") if line_breaks else [text]:
                render_label(line)  # as drawn: line by line
        except LabelError as exc:
            yield path, str(exc)


_HEX = re.compile(r"\{HTML\}|#[0-9A-Fa-f]{6}\b|\\definecolor\{(?!ot)")
_STOCK = re.compile(r"(?<![A-Za-z])(red|green|blue|cyan|magenta|yellow|black|white|gray|orange|purple|teal|brown|lime|olive|pink|violet|darkgray|lightgray)(?=[!,\]} ]|$)")


def tex_palette_only(tex: str) -> list[str]:
    """TeX invariant: colours only through palette names (no hex outside the palette block, no stock names)."""
    problems = []
    body = tex.split("%% end palette", 1)[-1]
    if _HEX.search(body):
        problems.append("hex colour outside the palette block")
    for line_no, line in enumerate(body.splitlines(), 1):
        code = line.split("%", 1)[0]
        for match in _STOCK.finditer(code):
            problems.append(f"stock colour name '{match.group(1)}' in generated TeX line {line_no}")
    return problems


def spec_invariants() -> list[Invariant]:
    """The contract's spec invariants with their checks resolved."""
    from .contract import load_contract, resolve_check

    found = []
    for entry in load_contract()["edit_contract"]["invariants"]:
        if entry.get("applies_to") != "spec":
            continue
        try:
            check = resolve_check(entry["check"])
        except (ImportError, AttributeError):
            raise DtgenError(f"invariant {entry['id']} cannot be checked: {entry['check']} is missing "
                             "(incomplete installation?)") from None
        found.append(Invariant(entry["id"], "spec", entry["description"], check))
    return found


def _distinguishable_colors(spec):
    # Imported here: the figures package imports this module for the TeX checks.
    from .figures.timeline_styles import check_distinguishable

    yield from check_distinguishable(spec)


def check_spec_invariants(spec) -> list[Issue]:
    issues = []
    for invariant in spec_invariants():
        for path, message in invariant.check(spec):
            issues.append(spec.located.issue(path, f"{message} [invariant {invariant.id}]"))
    return issues


def pdf_page_size_cm(pdf: bytes) -> tuple[float, float]:
    """(width, height) of a PDF's first page in cm (pdfinfo reads compressed object streams too)."""
    import subprocess
    import tempfile
    from pathlib import Path

    from .figures.compile import tool

    with tempfile.TemporaryDirectory(prefix="dtgen-pdfinfo-") as folder:
        path = Path(folder) / "figure.pdf"
        path.write_bytes(pdf)
        out = subprocess.run([tool("pdfinfo"), str(path)], capture_output=True, text=True, timeout=60).stdout
    match = re.search(r"^Page size:\s+([0-9.]+) x ([0-9.]+) pts", out, re.MULTILINE)
    if not match:
        raise DtgenError("pdfinfo did not report the page size of the compiled figure")
    return float(match.group(1)) * 2.54 / 72, float(match.group(2)) * 2.54 / 72


def figure_fits_width(pdf: bytes, spec) -> list[str]:
    """TeX invariant: with figure.width set (set-size), the compiled figure is at most that wide."""
    from .figures.fit import target_width_cm

    target = target_width_cm(spec)
    if target is None:
        return []
    width, _ = pdf_page_size_cm(pdf)
    if width > target + 0.005:  # half a tenth of a millimetre: pdfinfo rounds the page size
        return [f"the compiled figure is {width:.2f} cm wide but figure.width {spec.figure.width!r} allows "
                f"{target:.2f} cm (reduce figure.colsep / rowsep, shorten labels, or choose a wider fit)"]
    return []
