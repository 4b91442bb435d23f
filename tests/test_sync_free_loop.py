"""No per-step host synchronisation in the training loops (runner/step_losses.py,
runner/device_spans.py): a real run of every strategy on the shared step, with each
rank counting its `.item()`, `.cpu()`, `.tolist()` and synchronize calls
(DTGEN_SYNC_AUDIT, runner/sync_audit.py): none between the end of its first step and
the end of its last (a loop reading one value per step counts STEPS - 1 there), and a
bounded number in the whole of training (setup, the final gather), the same for 3 and
9 steps."""

import json

import pytest

torch = pytest.importorskip("torch")

from opentikz_dt.runner.testing import SYNC_CASES, GOSSIP_CASE, run_small, small_spec_data  # noqa: E402

STEPS = 8
# Every case on the shared step (ctx.forward_backward / ctx.step_done) but the
# parameter server and central storage, whose weight messages carry a header (version,
# send time) read on the host every step (runner/ps_wire.py).
CASES = {name: SYNC_CASES[name] for name in ("allreduce-native", "allreduce-ring", "allreduce-hierarchical", "fsdp",
                                              "tensor-mlp", "mesh-fsdp-tensor", "mesh-data-pipeline",
                                              "pipeline-1f1b")}
CASES["gossip"] = GOSSIP_CASE


def _audited_run(tmp_path, monkeypatch, kind, overrides, training):
    audit = tmp_path / "audit"
    monkeypatch.setenv("DTGEN_SYNC_AUDIT", str(audit))
    data = small_spec_data(kind, **overrides)
    data["training"].update(training)
    result = run_small(data, tmp_path, cache=False)
    counts = {p.stem: json.loads(p.read_text()) for p in sorted(audit.glob("rank*.json"))}
    assert len(counts) == result.run["world_size"], counts
    return result, counts


@pytest.mark.dist
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_strategys_loop_reads_nothing_back_per_step(name, tmp_path, monkeypatch):
    kind, overrides, _ = CASES[name]
    # grad_clip: the clip factor is applied on the device, without a host read (runner/optim.py)
    result, counts = _audited_run(tmp_path, monkeypatch, kind, overrides, {"steps": STEPS, "grad_clip": 0.5})
    for rank, calls in counts.items():
        assert calls["steps"] == STEPS and not any(calls["loop"].values()), f"{name} {rank}: {calls}"
    # every step's loss still reached metrics, read a step later
    losses = result.metrics["loss"]  # one per step, averaged over the ranks that had one
    assert len(losses) == STEPS and all(0 < v < 100 for v in losses), losses


@pytest.mark.dist
def test_the_reads_do_not_grow_with_the_steps_and_a_read_per_step_is_seen(tmp_path, monkeypatch):
    _, short = _audited_run(tmp_path / "a", monkeypatch, "single", {}, {"steps": 3})
    _, long = _audited_run(tmp_path / "b", monkeypatch, "single", {}, {"steps": 9})
    assert short["rank0"]["total"] == long["rank0"]["total"]
    assert short["rank0"]["steps"] == 3 and long["rank0"]["steps"] == 9


def test_the_audit_counts_each_read_and_puts_torch_back(tmp_path, monkeypatch):
    """What the runs above rely on: a read is counted (a loop calling loss.item() each step
    would count STEPS), and the wrappers are gone afterwards."""
    from opentikz_dt.runner.sync_audit import audited

    item = torch.Tensor.item
    monkeypatch.setenv("DTGEN_SYNC_AUDIT", str(tmp_path))
    with audited(3):
        t = torch.ones(2)
        for _ in range(5):
            t.sum().item()
        t.tolist()
        t.cpu()
        from opentikz_dt.runner.metrics import Metrics

        (tmp_path / "progress").mkdir()
        metrics = Metrics(tmp_path, 3, "w1", "worker", clock=lambda: 0.0)
        for step in range(3):  # a loop reading its loss each step: counted between the step ends
            metrics.step_done(step, torch.tensor(1.0).item(), 1, 0.1)
    got = json.loads((tmp_path / "rank3.json").read_text())
    assert got["total"] == {"Tensor.item": 8, "Tensor.cpu": 1, "Tensor.tolist": 1, "cuda.synchronize": 0,
                            "Event.synchronize": 0}
    assert got["loop"]["Tensor.item"] == 2 and got["steps"] == 3
    assert torch.Tensor.item is item
    monkeypatch.delenv("DTGEN_SYNC_AUDIT")
    with audited(4):
        assert torch.Tensor.item is item  # off: nothing installed
    assert not (tmp_path / "rank4.json").exists()


def test_the_audit_leaves_out_reads_that_wait_for_no_device(tmp_path, monkeypatch):
    """Adam and AdamW read their step counter, which torch keeps on the host, once a
    parameter a step (single-tensor and foreach alike): not a device read, so not counted
    on a CPU rank either. On a GPU rank a read of a CPU tensor is not counted."""
    from opentikz_dt.runner.sync_audit import audited

    monkeypatch.setenv("DTGEN_SYNC_AUDIT", str(tmp_path))
    params = [torch.nn.Parameter(torch.ones(3)) for _ in range(4)]
    optimizers = [torch.optim.AdamW(params, foreach=False), torch.optim.Adam(params, foreach=True)]
    with audited(0):
        for opt in optimizers:
            for _ in range(3):
                for p in params:
                    p.grad = torch.ones(3)
                opt.step()
        torch.ones(2).sum().item()  # the loss read back: counted
    assert all(opt.state[params[0]]["step"].device.type == "cpu" for opt in optimizers)
    got = json.loads((tmp_path / "rank0.json").read_text())
    assert got["total"]["Tensor.item"] == 1, got
    with audited(1, "cuda:0"):
        t = torch.ones(2)
        t.sum().item(), t.tolist(), t.cpu()
    got = json.loads((tmp_path / "rank1.json").read_text())
    assert not any(got["total"].values()), got
