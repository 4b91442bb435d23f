"""`dtgen export-template SPEC DIR`: the spec's topology figure as an OpenTikZ template folder.

OpenTikZ's library holds static templates: `template.tex` (a standalone figure whose
`\\def` parameter block at the top drives it, as seed 000), `template.meta.json` (its
metadata and edit contract, checked by OpenTikZ's tools/validate.py against the .tex)
and `preview.svg`. dtgen's topology figure already has that shape; the export drops
what only dtgen needs (the "generated, do not edit" header, the geometry probe) and
writes a contract describing this one figure: the macros it really defines, the styles
it really declares and the libraries it really loads. Must not import torch.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from . import __version__
from .contract import load_contract
from .errors import DtgenError
from .resources import contract_meta
from .strategies import strategy

_DEF = re.compile(r"^\\def(\\[A-Za-z]+)\{(.*)\}%\s*(.*)$", re.MULTILINE)
_STYLE = re.compile(r"(?<![\w-])([A-Za-z][\w-]*)/\.style\s*=")
_LIBRARIES = re.compile(r"\\usetikzlibrary\{([^}]*)\}")
_PACKAGES = re.compile(r"\\usepackage(?:\[[^\]]*\])?\{([^}]*)\}")
_PROBE = re.compile(r"\\makeatletter\n% Geometry probe.*?\\makeatother\n", re.DOTALL)
_PROBE_CALL = re.compile(r"^\s*\\dtgenbbox\{[^}]*\}\n", re.MULTILINE)
_PROBE_PATH = re.compile(r"^\s*\\path\[probepath=[^\]]*\][^\n]*;\n", re.MULTILINE)

# How to edit the exported figure by hand, in OpenTikZ's words (seed 000's operations).
TEMPLATE_OPERATIONS = [
    ("rename-node", "edit the matching label macro (\\datalabel, \\worker<n>label, \\pslabel, \\titlelabel)"),
    ("change-spacing", "edit \\colsep (stage gap) or \\rowsep (worker gap); every position is derived from them"),
    ("recolor", "change the palette name in a style (data, grad, wts, ...) or an icon's argument; keep the data, "
                "gradient and weight flows in distinct colours; never inline hex"),
    ("swap-icon", "replace a node's picture macro (\\gpupic, \\serverpic, \\datasetpic, ...) with another icon macro "
                  "of the preamble, keeping its palette-colour argument"),
    ("regenerate", "for structural changes (workers, servers, strategy, size) edit the dtgen spec and export again: "
                   "dtgen edit SPEC OP, then dtgen export-template SPEC DIR"),
]


# What each strategy is called in a template library's tags (an outside plugin's kind is
# its own tag, its hyphens as spaces).
_KIND_TAGS = {
    "single": ["single device"],
    "parameter-server": ["data parallel", "parameter server"],
    "central-storage": ["data parallel", "central storage"],
    "allreduce": ["data parallel", "all-reduce"],
    "gossip": ["data parallel", "gossip", "decentralized"],
    "pipeline": ["pipeline parallel"],
    "fsdp": ["data parallel", "fully sharded data parallel"],
    "tensor": ["tensor parallel"],
    "mesh": ["3d parallelism", "device mesh"],
}
_ALGORITHM_TAGS = {"ring": "ring all-reduce", "tree": "tree all-reduce", "hierarchical": "hierarchical all-reduce"}


def template_tags(spec) -> list[str]:
    """Tags for this figure: what it is (a topology diagram) and the strategy it draws."""
    kind = spec.strategy.kind
    described = strategy(kind)  # what the kind reads, asked of its descriptor (no switch on kinds here)
    tags = ["distributed training", "topology", "system diagram"]
    tags += _KIND_TAGS.get(kind, [kind.replace("-", " ")])
    if spec.strategy.algorithm in _ALGORITHM_TAGS:  # "native" (every other kind's) has no tag
        tags.append(_ALGORITHM_TAGS[spec.strategy.algorithm])
    if "schedule" in described.options and spec.strategy.schedule:
        tags.append(f"{spec.strategy.schedule} schedule")
    if len(described.sync_modes) > 1:  # sync or async: say which
        tags.append(f"{spec.strategy.sync} updates")
    elif spec.topology.servers.count:
        tags.append("synchronization")
    if spec.topology.hosts > 1:
        tags.append("multi-node")
    if spec.runtime.device == "cuda" or spec.runtime.backend == "nccl":
        tags.append("gpu")
    return list(dict.fromkeys(tags))


_STYLE_DEF = re.compile(r"(?<![\w-])([A-Za-z][\w-]*)/\.style\s*=\s*\{")
_OPTIONS = re.compile(r"\[([^\[\]]*)\]")
# How the TeX shows that it uses a TikZ library; a library not listed here is kept.
_LIBRARY_USES = {
    "positioning": r"\b(?:above|below|left|right)(?: (?:left|right))?\s*=[^,\]]*\bof\b",
    "arrows.meta": r"\b(?:Stealth|Latex|Triangle|Kite|Straight Barb|Bar|Circle|Square|Rectangle|Ellipse)\s*\[",
    "calc": r"\$\s*\(|\blet\s*\\p|\\pgfextra",
    "fit": r"\bfit\s*=",
    "backgrounds": r"on background layer|background rectangle|show background|framed\b",
    "decorations.pathreplacing": r"decoration\s*=\s*\{?\s*(?:brace|show path construction|border|waves|expanding waves|ticks)",
    "decorations.markings": r"\bmark\s*=\s*at position|\bmarkings\b",
    "patterns": r"(?<!dash )\bpattern\s*(?:=|color)",
}


def _style_definitions(tex: str) -> list[tuple[str, int, int]]:
    """[(name, start, end)] of every `name/.style={...}` (with its trailing comma and line break)."""
    found = []
    for match in _STYLE_DEF.finditer(tex):
        depth, index = 1, match.end()
        while depth and index < len(tex):
            depth += {"{": 1, "}": -1}.get(tex[index], 0)
            index += 1
        end = re.match(r"\s*,?[ \t]*\n?", tex[index:])
        start = tex.rfind("\n", 0, match.start()) + 1
        if tex[start:match.start()].strip():  # shares its line with something else: cut only the definition
            start = match.start()
        found.append((match.group(1), start, index + end.end()))
    return found


def _option_words(text: str) -> set[str]:
    """Every bare option word (`data` in `\\draw[data, ->]`), at any brace depth of an option list."""
    return {word for group in _OPTIONS.findall(text) for word in _words(group)}


def _words(options: str) -> set[str]:
    return {word.strip() for word in re.split(r"[,{}=\[\]]", options)}


def prune_unused(tex: str) -> str:
    """The template without the styles its drawing never uses and the TikZ libraries it
    never needs, so its contract lists exactly what the file uses."""
    definitions = _style_definitions(tex)
    bodies = {name: tex[start:end] for name, start, end in definitions}
    rest, last = [], 0
    for _, start, end in definitions:
        rest.append(tex[last:start])
        last = end
    rest.append(tex[last:])
    outside = "".join(rest)
    # a style is used by the drawing, or by a used style (`hostbox` inside another one)
    used = {name for name in bodies if name in _option_words(outside)}
    while True:
        more = {name for name in bodies if name not in used
                and any(name in _words(bodies[u].split("=", 1)[1]) for u in used)}
        if not more:
            break
        used |= more
    for name, start, end in reversed(definitions):
        if name not in used:
            tex = tex[:start] + tex[end:]
    return _prune_libraries(tex)


def _prune_libraries(tex: str) -> str:
    body = tex[tex.index("\\begin{document}"):] if "\\begin{document}" in tex else tex
    preamble_macros = tex[:len(tex) - len(body)]
    # a library is needed where the drawing, or a preamble macro (the icons), shows its use
    text = body + "\n" + re.sub(r"\\usetikzlibrary\{[^}]*\}", "", preamble_macros)

    def keep(library: str) -> bool:
        pattern = _LIBRARY_USES.get(library)
        return pattern is None or re.search(pattern, text) is not None

    def loads(match) -> str:
        kept = [lib.strip() for lib in match.group(1).split(",") if lib.strip() and keep(lib.strip())]
        return f"\\usetikzlibrary{{{', '.join(kept)}}}{match.group(2)}" if kept else ""

    return re.sub(r"\\usetikzlibrary\{([^}]*)\}(\n?)", loads, tex)


def template_tex(spec) -> str:
    """The topology figure as a hand-editable template (no dtgen-only header or probe)."""
    from .figures.render import render_topology

    tex = render_topology(spec)
    body = tex[tex.index("\\documentclass"):]
    stripped = _PROBE_PATH.sub("", _PROBE_CALL.sub("", _PROBE.sub("", body)))
    # The probe only measures for dtgen's checks; dropping it is cosmetic, so if the
    # figures' probe has changed shape and something of it is left, keep it whole.
    if not re.search(r"dtgen@|dtgenbbox|probepath", stripped):
        body = stripped
    body = prune_unused(body)
    header = (f"% OpenTikZ template exported by dtgen {__version__} from the spec '{spec.name}'.\n"
              "% Edit the parameters block below; template.meta.json lists what each one controls.\n")
    return header + body


def template_meta(spec, tex: str) -> dict:
    """template.meta.json for `tex`: OpenTikZ's schema, contract restricted to this figure."""
    meta = contract_meta()
    by_macro = {p["macro"]: p for p in load_contract()["edit_contract"]["parameters"]}
    parameters = []
    for macro, value, comment in _DEF.findall(tex):
        entry = {"name": macro, "meaning": (by_macro.get(macro, {}).get("description") or comment or macro)}
        known = by_macro.get(macro)
        if known and known.get("type") == "number":
            entry["type"] = "length-cm"
            entry["invariant"] = f"{known['minimum']} <= value <= {known['maximum']}"
        else:
            entry["type"] = "text"
        if value:
            entry["default"] = value
        parameters.append(entry)
    if not parameters:
        raise DtgenError("the topology figure has no \\def parameter block; cannot export a template")
    styles = list(dict.fromkeys(_STYLE.findall(tex)))
    libraries = [lib.strip() for group in _LIBRARIES.findall(tex) for lib in group.split(",") if lib.strip()]
    packages = [pkg.strip() for group in _PACKAGES.findall(tex) for pkg in group.split(",") if pkg.strip()]
    prose = meta["edit_contract"]
    invariants = [line for line in prose["invariants"]
                  if line.split(":")[0] in ("distinct-flow-colors", "palette-names-only", "figure-compiles", "no-overlaps")]
    slug = re.sub(r"[^a-z0-9]+", "-", spec.name.lower()).strip("-") or "figure"
    return {
        "id": f"dtgen-{slug}",
        "name": spec.title,
        "type": "template",
        "domain": meta["domain"],
        "tags": template_tags(spec),
        "venue": meta.get("venue", []),
        "author": meta["author"],
        "license": meta["license"],
        "requires": list(dict.fromkeys(packages + libraries)),
        "preview": "preview.svg",
        "description": f"{spec.title}: {spec.strategy.kind} with {spec.topology.workers.count} workers, exported by "
                       "dtgen from a spec (regenerate with dtgen export-template for structural changes).",
        "edit_contract": {
            "parameters": parameters,
            "node_naming": prose["node_naming"],
            "styles": styles,
            "operations": [{"id": op, "summary": summary} for op, summary in TEMPLATE_OPERATIONS],
            "invariants": invariants,
        },
    }


def export_template(spec_path, out_dir) -> list[Path]:
    """Write template.tex, template.meta.json and preview.svg into `out_dir`; return their paths."""
    from .figures.compile import compile_cached, pdf_to_svg
    from .spec import load_spec

    spec = load_spec(spec_path)
    tex = template_tex(spec)
    meta = template_meta(spec, tex)
    svg = pdf_to_svg(compile_cached(tex).pdf)  # compile before writing anything: no half folder
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise DtgenError(f"{out}: exists and is not a folder")
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, data in (("template.tex", tex.encode("utf-8")),
                       ("template.meta.json", (json.dumps(meta, indent=2, ensure_ascii=False) + "\n").encode("utf-8")),
                       ("preview.svg", svg)):
        (out / name).write_bytes(data)
        written.append(out / name)
    return written
