"""A run on a busy machine does not lose its ranks' rendezvous port to another process.

torch's elastic launcher can either share its own rendezvous store (a server it has
already bound) with the ranks, or pick a free port and leave rank 0 to bind it after it
has started: seconds later, time enough for another run's sockets to take it. Here the
"free" port is held by this test, so the second way fails for certain."""

from __future__ import annotations

import socket

import pytest

torch = pytest.importorskip("torch")

from torch.distributed.elastic.rendezvous import api as rendezvous_api  # noqa: E402

from opentikz_dt.errors import RunError  # noqa: E402
from opentikz_dt.runner import launch  # noqa: E402
from opentikz_dt.runner.testing import run_small, small_spec_data  # noqa: E402

SPEC = small_spec_data("allreduce", topology={"workers": {"count": 2}}, training={"steps": 2})


@pytest.fixture
def taken_port(monkeypatch):
    """torch's free-port choice made to return, the first time, a port another socket is
    listening on; (that port, the ports it returned)."""
    free = rendezvous_api.get_free_port
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        asked = []

        def taken():
            asked.append(free() if asked else port)
            return asked[-1]

        monkeypatch.setattr(rendezvous_api, "get_free_port", taken)
        yield port, asked


@pytest.mark.dist
def test_a_run_without_restarts_does_not_need_a_free_port_to_stay_free(taken_port, tmp_path):
    result = run_small(SPEC, root=tmp_path, cache=False)
    assert result.run["status"] == "ok"
    assert taken_port[1] == []  # the ranks used the launcher's own store


@pytest.mark.dist
def test_a_rank_that_cannot_listen_on_its_port_is_named_as_the_one_that_failed(taken_port, tmp_path, monkeypatch):
    monkeypatch.setattr(launch, "rendezvous_store_env", lambda restarts, nnodes: {
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"})  # torch's other way, as with restarts
    with pytest.raises(RunError) as failed:
        run_small(SPEC, root=tmp_path, cache=False)
    assert taken_port[1] == [taken_port[0]]
    first = str(failed.value).splitlines()[0]
    assert first.startswith("rank 0 (worker w1) failed before its first step: DistNetworkError: "), first
    assert "address already in use" in first, first


@pytest.mark.dist
def test_with_restarts_left_a_rank_that_lost_its_port_starts_again_on_a_new_one(taken_port, tmp_path):
    spec = small_spec_data("allreduce", topology={"workers": {"count": 2}}, training={"steps": 2},
                           runtime={"restarts": 1})
    result = run_small(spec, root=tmp_path, cache=False)
    assert result.run["status"] == "ok" and result.run["attempts"] == 2
    assert len(taken_port[1]) == 2 and taken_port[1][0] == taken_port[0] != taken_port[1][1]


def test_the_launcher_shares_its_store_unless_restarts_or_hosts_need_the_other_way():
    assert launch.rendezvous_store_env(0, 1) == {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "0"}
    assert launch.rendezvous_store_env(2, 1) == {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    assert launch.rendezvous_store_env(0, 2) == {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
