"""schemas/meta.json is readable by OpenTikZ's own tooling: it validates against
OpenTikZ's meta.schema.json (tests/data/opentikz-meta.schema.json, a verbatim copy), and
the executable half (contract.exec.json) is keyed by exactly its ids."""

from __future__ import annotations

import json
from pathlib import Path

from jsonschema import Draft202012Validator

from opentikz_dt.contract import merge_contract
from opentikz_dt.resources import contract_exec, contract_meta

OPENTIKZ_SCHEMA = json.loads((Path(__file__).parent / "data" / "opentikz-meta.schema.json").read_text())


def opentikz_errors(meta: dict) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
            for e in Draft202012Validator(OPENTIKZ_SCHEMA).iter_errors(meta)]


def test_meta_json_validates_against_opentikz_schema():
    assert opentikz_errors(contract_meta()) == []


def test_the_schema_copy_still_catches_the_old_format():
    # The dtgen-only shape meta.json had before (operations as a mapping, extra keys)
    # must fail, or the test above proves nothing.
    meta = json.loads(json.dumps(contract_meta()))
    meta["edit_contract"]["operations"] = {"add-worker": {"description": "x"}}
    meta["edit_contract"]["parameters"][0]["path"] = "figure.colsep"
    del meta["preview"]
    errors = opentikz_errors(meta)
    assert len(errors) >= 3, errors


def test_exec_file_has_exactly_the_ids_of_meta_json():
    merged, problems = merge_contract(contract_meta(), contract_exec())
    assert problems == []
    meta = json.loads(json.dumps(contract_meta()))
    meta["edit_contract"]["invariants"].append("ghost-invariant: nothing checks this")
    assert merge_contract(meta, contract_exec())[1] == [
        "invariant ghost-invariant: in meta.json but not in contract.exec.json"]
