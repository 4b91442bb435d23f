"""The contention layer (predict/contention.py): waits for a core apply where a calibration's
processes outnumber its cores, and the cost model (predict/costs.py) knows nothing of them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from opentikz_dt.predict.calibration import Calibration, illustrative_calibration
from opentikz_dt.predict.contention import Contention, contention_for
from opentikz_dt.predict.predict import costs_for
from opentikz_dt.predict.synthetic import spec_data
from opentikz_dt.spec import spec_from_data

ROOT = Path(__file__).resolve().parents[1]


def ring(workers: int):
    return spec_from_data(spec_data("allreduce-ring", workers=workers, steps=6))


def calibration(cores: float, ranks: int = 4, split: bool = True, device: str = "cpu") -> Calibration:
    """A ring calibration made with `ranks` processes on `cores` cores; `split`: its fitted
    message latency (1 ms) holds 900 us of waiting for a core (fit.message_split)."""
    spec = ring(ranks)
    data = json.loads(json.dumps(illustrative_calibration(spec).data))
    data.update(source="run", cores_effective=cores, device={"kind": device, "name": "a device", "count": 1},
                made_for={"strategy": dict(spec.data["strategy"]), "workers": ranks, "ranks": ranks, "hosts": 1})
    data["comm"]["p2p"]["alpha_s"] = 1e-3
    if split:
        data["comm"]["p2p"].update(alpha_floor_s=1e-4, core_wait_s=9e-4)
    return Calibration(data, "cal.json")


def assert_no_contention(layer: Contention) -> None:
    assert not layer.shared and not layer.settles
    assert layer.share(8) == 1.0 and layer.p2p_wait == 0.0
    assert layer.step_wait("allreduce", None) == 0.0 and layer.wait_off(0.25) == 0.0
    assert layer.on_wire(5.0, 3.0) == 5.0 and layer.untraced(7.0, [1.0]) == (7.0, [1.0])


@pytest.mark.parametrize("cal, workers, dedicated, alpha_s", [
    (calibration(2.0), 8, True, 1e-4),                                  # a core per rank: a message alone
    (calibration(16.0, split=False, device="cuda"), 4, False, 1e-3),   # a GPU box's 16 cores for 4 ranks
    (calibration(8.0, split=False), 4, False, 1e-3),                   # CPU ranks within the cores
])
def test_no_contention_where_ranks_have_their_cores(cal, workers, dedicated, alpha_s):
    spec = ring(workers)
    layer = contention_for(cal, spec, dedicated=dedicated)
    assert_no_contention(layer)
    assert layer.latency("p2p", cal.comm("p2p")[0]) == pytest.approx(alpha_s)
    assert layer.core_per_rank == dedicated  # a sync server's sends are carried but with a core per rank


def test_a_dedicated_prediction_gets_the_layer_without_contention(tmp_path):
    path = tmp_path / "cal.json"
    calibration(2.0).save(path)
    costs, assumed, _ = costs_for(ring(8), path, dedicated=True)
    assert_no_contention(costs.contention)
    assert costs.comm["p2p"][0] == pytest.approx(100.0) and assumed["cores_effective"] is None


def test_ranks_beyond_a_cpu_calibrations_cores_wait_for_them():
    cal, spec = calibration(2.0), ring(8)  # measured with 4 processes on 2 cores, predicted with 8
    layer = contention_for(cal, spec)
    carried = (1 - 2 / 8) / (1 - 2 / 4)  # the chance of finding the receiver off a core, 8 against 4
    assert layer.shared and layer.settles and layer.share(8) == 4.0  # every rank computing at once
    assert layer.p2p_wait == pytest.approx(900.0 * carried)
    assert layer.latency("p2p", 1e-3) == pytest.approx(1e-4 + 9e-4 * carried)
    assert layer.wait_off(0.5) == pytest.approx(900.0 * carried * (1 - (1 - 2 / 4) / (1 - 2 / 8)))


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_a_measured_wait_is_carried_at_or_below_the_cores_too(device):
    """The calibration run's own wait per message, where it had a core per process, is carried
    as measured to any process count (contention_for's exception): within the cores nothing
    shares a core, but a message still holds its run's wait."""
    layer = contention_for(calibration(16.0, ranks=4, device=device), ring(8))
    assert layer.shared and layer.share(8) == 1.0
    assert layer.p2p_wait == pytest.approx(900.0) and layer.latency("p2p", 1e-3) == pytest.approx(1e-3)


def test_the_cost_model_knows_nothing_of_processes_sharing_cores():
    text = (ROOT / "opentikz_dt" / "predict" / "costs.py").read_text(encoding="utf-8")
    said = sorted({m.group(0) for m in re.finditer(r"core_wait|crowd|cores", text)})
    assert said == [], f"costs.py mentions {said}: waits for a core belong in contention.py"
