"""Where the shipped templates, schemas and starters live, installed or in a checkout."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent


def _folder(name: str) -> Path:
    # In a wheel, templates/ and schemas/ are installed as opentikz_dt/templates etc.
    # In a source checkout they sit beside the package, as the design card lays out.
    for candidate in (_PACKAGE_DIR / name, _PACKAGE_DIR.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"dtgen is incompletely installed: no {name}/ folder")


def templates_dir() -> Path:
    return _folder("templates")


def schemas_dir() -> Path:
    return _folder("schemas")


@lru_cache(maxsize=None)
def load_json_resource(name: str) -> dict:
    return json.loads((schemas_dir() / name).read_text(encoding="utf-8"))


def spec_schema() -> dict:
    return load_json_resource("spec.schema.json")


def contract_meta() -> dict:
    """The edit contract in OpenTikZ's format (prose; validates against its meta.schema.json)."""
    return load_json_resource("meta.json")


def contract_exec() -> dict:
    """The executable half of the contract, keyed by meta.json's ids."""
    return load_json_resource("contract.exec.json")


def skill_text() -> str:
    """The AI-agent skill document shipped with the package."""
    return (_PACKAGE_DIR / "SKILL.md").read_text(encoding="utf-8")
