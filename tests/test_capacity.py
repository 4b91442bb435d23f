"""Before spawning, `dtgen run` says when the ranks outnumber the cores or may not fit in
memory (runner/capacity.py): 64 workers on 2 cores used to run with no word of either."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from opentikz_dt.runner import capacity  # noqa: E402
from opentikz_dt.runner.preflight import preflight  # noqa: E402
from opentikz_dt.spec import spec_from_data  # noqa: E402


def test_64_ranks_on_2_cores_are_warned_with_their_memory(monkeypatch):
    spec = spec_from_data({"strategy": {"kind": "allreduce"}, "topology": {"workers": {"count": 64}},
                           "training": {"batch_size": 4, "dataset": {"samples": 1024}}})
    roles = [("worker", f"w{i}") for i in range(1, 65)]
    facts = preflight(spec, None, None, roles)
    assert facts["data_bytes"] == 1024 * 32 * 4 + 1024 * 8  # float rows of the default mlp, int64 labels
    monkeypatch.setattr(capacity, "cpu_cores", lambda: 2)
    monkeypatch.setattr(capacity, "available_memory", lambda: 8e9)
    per_rank = capacity.rank_bytes(facts["params"], 4, facts["data_bytes"])
    assert 255e6 < per_rank < 256e6  # the base process dominates a small model
    lines = capacity.check_capacity(64, facts)
    assert lines == [
        "64 ranks on 2 CPU core(s): the ranks take turns on the cores, so step times measure contention more "
        "than the strategy (about 255 MB per rank x 64 = 16.4 GB of 8 GB available); for many workers, "
        "dtgen predict simulates them",
        "the ranks may not fit in memory: about 255 MB per rank x 64 = 16.4 GB of 8 GB available; "
        "use fewer workers or a smaller model or dataset",
    ]


def test_a_run_that_fits_is_not_warned():
    assert capacity.capacity_warnings(2, 300e6, cores=4, available=16e9) == []
    # memory alone: a big model on few ranks
    assert capacity.capacity_warnings(2, 5e9, cores=4, available=8e9) == [
        "the ranks may not fit in memory: about 5 GB per rank x 2 = 10 GB of 8 GB available; "
        "use fewer workers or a smaller model or dataset"]
