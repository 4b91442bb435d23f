"""The JSON Schema is a valid Draft 2020-12 schema with a description on every field."""

from __future__ import annotations

import pytest
from jsonschema import Draft202012Validator

from opentikz_dt.resources import spec_schema
from opentikz_dt.spec import spec_from_data


def _fields(node, path=""):
    for key, sub in node.get("properties", {}).items():
        yield f"{path}.{key}".lstrip("."), sub
        yield from _fields(sub, f"{path}.{key}")


def test_schema_is_valid_draft_2020_12():
    schema = spec_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(schema)


def test_every_field_has_a_description():
    missing = [path for path, sub in _fields(spec_schema()) if not sub.get("description")]
    assert missing == []


def test_defaults_make_a_short_spec_complete():
    spec = spec_from_data({"strategy": {"kind": "allreduce"}, "topology": {"workers": {"count": 4}}})
    assert spec.topology.workers.ids == ["w1", "w2", "w3", "w4"]
    assert spec.topology.servers.count == 0
    assert spec.training.layers == (32, 128, 128, 10)
    assert spec.figure.colors == {"data": "otgray", "grad": "otpurple", "weight": "otteal", "worker": "otteal", "server": "otblue"}
    ps = spec_from_data({"strategy": {"kind": "parameter-server"}, "topology": {"servers": {"count": 2}}})
    assert ps.topology.servers.ids == ["ps1", "ps2"]
    assert ps.topology.workers.count == 3
    assert spec_from_data({"strategy": {"kind": "parameter-server"}}).topology.servers.ids == ["ps"]


def test_the_worker_count_default_the_schema_states_is_each_kinds():
    """The spec reference (docs/spec.md, made from this description) said 3 where tensor resolves to 2 workers:
    a kind whose default changes must change the description too."""
    from opentikz_dt.strategies import kinds

    description = spec_schema()["properties"]["topology"]["properties"]["workers"]["properties"]["count"]["description"]
    counts = {kind: spec_from_data({"strategy": {"kind": kind}}).topology.workers.count for kind in kinds()}
    assert counts == {**dict.fromkeys(kinds(), 3), "single": 1, "tensor": 2, "mesh": 4}
    assert description == "Number of workers. Default 3; 1 for strategy single, 2 for tensor, 4 for mesh."


@pytest.mark.parametrize("width, ok", [("3cm", False), ("61cm", False), ("60.5cm", False), ("4cm", True),
                                       ("60cm", True), ("12.5cm", True), ("column", True), ("page", True)])
def test_figure_width_is_refused_by_validate_where_drawing_would_refuse_it(width, ok):
    """validate and the drawing agree on figure.width (figures/fit.width_cm: 4cm to 60cm)."""
    from opentikz_dt.errors import DtgenError, SpecError
    from opentikz_dt.figures.fit import width_cm
    from opentikz_dt.spec import spec_from_data

    data = {"strategy": {"kind": "allreduce"}, "figure": {"width": width}}
    if ok:
        spec_from_data(data)
        width_cm(width)
    else:
        with pytest.raises(SpecError, match="figure.width"):
            spec_from_data(data)
        with pytest.raises(DtgenError):
            width_cm(width)
