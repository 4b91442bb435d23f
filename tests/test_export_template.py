"""`dtgen export-template`: the folder passes the checks of OpenTikZ's tools/validate.py
--strict, reimplemented here from its documentation (tests/data holds its schema):
meta.schema.json, \\documentclass{standalone}, every parameter a \\def, every style a
/.style, every \\usetikzlibrary (and tikz) in requires, and latexmk -pdf compiles it.
And the \\def block really drives the figure."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from jsonschema import Draft202012Validator

from opentikz_dt.cli import main

DATA = Path(__file__).resolve().parent / "data"
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SCHEMA = json.loads((DATA / "opentikz-meta.schema.json").read_text())


def opentikz_validate(folder: Path, strict: bool = True) -> list[str]:
    """What OpenTikZ's tools/validate.py --strict reports for a template folder."""
    meta = json.loads((folder / "template.meta.json").read_text())
    tex = (folder / "template.tex").read_text()
    errors = [f"schema: {e.message}" for e in Draft202012Validator(SCHEMA).iter_errors(meta)]
    if not re.search(r"\\documentclass(\[[^\]]*\])?\{standalone\}", tex):
        errors.append("not \\documentclass{standalone}")
    contract = meta.get("edit_contract", {})
    for param in contract.get("parameters", []):
        if not re.search(r"\\def" + re.escape(param["name"]) + r"(?![A-Za-z])", tex):
            errors.append(f"parameter {param['name']} is not a \\def in template.tex")
    for style in contract.get("styles", []):
        if not re.search(r"(?<![\w-])" + re.escape(style) + r"/\.style", tex):
            errors.append(f"style {style} is not a /.style in template.tex")
    libraries = [lib.strip() for group in re.findall(r"\\usetikzlibrary\{([^}]*)\}", tex) for lib in group.split(",")]
    for needed in ["tikz"] + libraries:
        if needed not in meta.get("requires", []):
            errors.append(f"{needed} is used but not listed in requires")
    if not (folder / meta.get("preview", "preview.svg")).is_file():
        errors.append("preview missing")
    if strict:
        proc = subprocess.run(["latexmk", "-pdf", "-interaction=nonstopmode", "-halt-on-error", "template.tex"],
                              cwd=folder, capture_output=True, text=True, timeout=180)
        if proc.returncode != 0:
            errors.append(f"latexmk failed: {proc.stdout[-400:]}")
    return errors


def test_the_validator_rejects_a_broken_template(tmp_path):
    folder = tmp_path / "t"
    folder.mkdir()
    meta = {"id": "x", "name": "x", "type": "template", "domain": ["ml"], "tags": [], "author": "a", "license": "CC0-1.0",
            "requires": ["tikz"], "preview": "preview.svg",
            "edit_contract": {"parameters": [{"name": "\\gap", "meaning": "m"}], "node_naming": "n", "styles": ["box"],
                              "operations": [{"id": "a", "summary": "s"}], "invariants": ["i"]}}
    (folder / "template.meta.json").write_text(json.dumps(meta))
    (folder / "template.tex").write_text("\\documentclass{article}\\usetikzlibrary{calc}\n")
    assert len(opentikz_validate(folder, strict=False)) == 5


@pytest.mark.latex
def test_exported_template_passes_opentikz_validate_strict(tmp_path):
    spec = tmp_path / "ps-sharded.yaml"
    shutil.copyfile(EXAMPLES / "ps-sharded.yaml", spec)
    folder = tmp_path / "template"
    result = CliRunner().invoke(main, ["export-template", str(spec), str(folder)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in folder.iterdir()) == ["preview.svg", "template.meta.json", "template.tex"]
    assert (folder / "preview.svg").read_text().lstrip().startswith("<?xml")
    meta = json.loads((folder / "template.meta.json").read_text())
    macros = [p["name"] for p in meta["edit_contract"]["parameters"]]
    assert {"\\colsep", "\\rowsep", "\\workeronelabel", "\\pslabel", "\\titlelabel"} <= set(macros)
    assert {"data", "grad", "wts"} <= set(meta["edit_contract"]["styles"])
    assert opentikz_validate(folder) == []
    # The \def block drives the figure: change one parameter, the compiled text follows.
    tex = (folder / "template.tex").read_text()
    (folder / "template.tex").write_text(re.sub(r"\\def\\workeronelabel\{[^}]*\}", r"\\def\\workeronelabel{Edited one}", tex))
    subprocess.run(["latexmk", "-pdf", "-interaction=nonstopmode", "template.tex"], cwd=folder, capture_output=True,
                   check=True, timeout=180)
    text = subprocess.run(["pdftotext", "template.pdf", "-"], cwd=folder, capture_output=True, text=True, check=True).stdout
    assert "Edited one" in text


def test_export_template_of_a_bad_spec_writes_nothing(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("strategy: {kind: teleport}\n")
    result = CliRunner().invoke(main, ["export-template", str(bad), str(tmp_path / "out")])
    assert result.exit_code != 0 and "strategy.kind" in result.output
    assert not (tmp_path / "out").exists()
