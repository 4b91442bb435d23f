"""Property: any sequence of contract operations, with arguments drawn from their schemas,
leaves a spec that loads, renders and compiles. A refused step must leave the file
byte-identical; an applied one must leave a valid spec.

For speed the steps run without the compile-based invariants (as `--no-compile`) and only
the final spec is compiled. So the final check is "compiles", not "no overlaps": the figures
widen a too-tight colsep / rowsep (test_figures_latex.py checks every example at the
tightest allowed spacing), and test_edit.py::test_an_overlap_is_refused_by_no_overlaps
covers the refusal."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from opentikz_dt.contract import load_contract, resolve_check
from opentikz_dt.edit import EditRefusal, edit_file
from opentikz_dt.edit.texcheck import render_for_checks
from opentikz_dt.spec import load_spec

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.yaml"))
CONTRACT = load_contract()["edit_contract"]
OPERATIONS = CONTRACT["operations"]
FIGURE_COMPILES = resolve_check(next(i["check"] for i in CONTRACT["invariants"] if i["id"] == "figure-compiles"))
# Labels a user or an agent might type: TeX specials, allowed math, Latin-1.
LABELS = ["GPU 0", "worker_1 & 50%", r"$\nabla_\theta L$", r"$\mathbf{w}^{(t)}$", "Café #2", "{x}", "~a^b",
          "a\\b", r"\$5", "$x_i$ and $y_i$"]


# Likely values of the options whose schema is a pattern or a union of types.
BY_NAME = {"worker": ["w1", "w2", "w3", "w9"], "fit": ["column", "page", "natural", "12cm"],
           "name": ["fig-a", "exp2"], "value": ["2", "0.05", "true", "[4, 8, 2]", "gloo", "x"]}


def _value(prop: dict, name: str = ""):
    if name in BY_NAME:
        return st.sampled_from(BY_NAME[name])
    if "enum" in prop:
        return st.sampled_from(prop["enum"])
    if prop.get("type") == "integer":
        return st.integers(prop["minimum"], prop["minimum"] + 3)
    if prop.get("type") == "number" and "exclusiveMinimum" in prop:
        return st.sampled_from([0.5, 1, 2.5])
    if prop.get("type") == "number":
        return st.floats(prop["minimum"], prop["maximum"]).map(lambda x: round(x, 1)).filter(
            lambda x: prop["minimum"] <= x <= prop["maximum"])
    if prop.get("type") == "string" and "pattern" in prop:  # node ids: the likely ones
        return st.sampled_from(["data", "title", "w1", "w2", "w3", "w4", "w9", "ps", "ps2"])
    return st.sampled_from(LABELS)


@st.composite
def operation_calls(draw):
    name = draw(st.sampled_from(sorted(OPERATIONS)))
    schema = OPERATIONS[name]["args"]
    args = {}
    for key, prop in schema.get("properties", {}).items():
        if key in schema.get("required", []) or draw(st.booleans()):
            args[key] = draw(_value(prop, key))
    if not args and schema.get("minProperties"):
        key = sorted(schema["properties"])[0]
        args[key] = draw(_value(schema["properties"][key], key))
    return name, args


@pytest.mark.latex
@pytest.mark.slow
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(start=st.sampled_from(EXAMPLES), calls=st.lists(operation_calls(), min_size=1, max_size=6))
def test_random_operation_sequences_keep_the_spec_valid_and_compiling(start, calls):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / start.name
        shutil.copyfile(start, path)
        applied = 0
        for name, args in calls:
            before = path.read_bytes()
            try:
                edit_file(path, name, args, compile=False)
                applied += 1
            except EditRefusal as exc:
                assert path.read_bytes() == before, (name, args, exc)
            load_spec(path)  # valid after every step, applied or refused
        event(f"{applied} of {len(calls)} operations applied")
        # Every step already ran the TeX invariants that need no compile; now compile.
        for figure_name, tex in render_for_checks(load_spec(path)):
            assert FIGURE_COMPILES(tex) == [], (figure_name, path.read_text())
