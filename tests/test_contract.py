"""`dtgen contract --check`: the contract agrees with schema, templates and code, and the
check notices when it does not."""

from __future__ import annotations

import copy

import pytest
from click.testing import CliRunner

from opentikz_dt.cli import main
from opentikz_dt.contract import load_contract
from opentikz_dt.contract_check import check_contract


def test_contract_check_passes_on_the_shipped_contract():
    assert check_contract() == []
    result = CliRunner().invoke(main, ["contract", "--check"])
    assert result.exit_code == 0, result.output


def _broken(mutate):
    meta = copy.deepcopy(load_contract())
    mutate(meta["edit_contract"])
    return meta


@pytest.mark.parametrize("mutate, expected", [
    (lambda c: c["parameters"][0].update(path="figure.colsepp"),
     "parameter colsep: spec path figure.colsepp is not in the schema"),
    (lambda c: c["parameters"][0].update(maximum=99),
     "parameter colsep: maximum 99 differs from the schema's 20"),
    (lambda c: c["parameters"][0].update(macro="\\nosuchmacro"),
     "parameter colsep: macro \\nosuchmacro is not defined in templates/"),
    (lambda c: c["styles"].append({"name": "nosuchstyle", "description": "x"}),
     "style nosuchstyle: not defined in templates/"),
    (lambda c: c["operations"].update({"teleport-worker": {"description": "x", "args": {"type": "object"}}}),
     "operation teleport-worker: listed in the contract but not implemented"),
    (lambda c: c["operations"]["recolor"]["args"].update(type="objekt"),
     "operation recolor: invalid argument schema:"),
    (lambda c: c["invariants"].append({"id": "ghost", "applies_to": "spec", "description": "x", "check": "opentikz_dt.invariants:nothing"}),
     "invariant ghost: check opentikz_dt.invariants:nothing does not exist"),
    (lambda c: c["operations"]["set-hosts"]["args"]["properties"]["count"].update(maximum=9999),
     "operation set-hosts: --count maximum 9999 differs from topology.hosts's 1024"),
    (lambda c: c["operations"]["set"]["writes"].pop(),
     "operation set: the keys --key accepts and the keys it 'writes' differ"),
    (lambda c: c["invariants"][0].update(applies_to="pdf"),
     "invariant distinct-flow-colors: applies_to must be 'spec' or 'tex'"),
])
def test_contract_check_finds_drift(mutate, expected):
    problems = check_contract(_broken(mutate))
    assert any(p.startswith(expected) for p in problems), problems
