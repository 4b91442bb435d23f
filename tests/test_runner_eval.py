"""training.eval: a held-out split no training batch of any strategy sees, evaluated on the
final model after the run (loss; perplexity for the transformer); the divergence warning."""

from __future__ import annotations

import math

import pytest

from opentikz_dt.spec import spec_from_data


def _spec(**training):
    from opentikz_dt.runner.testing import small_spec_data

    data = small_spec_data("allreduce", topology={"workers": {"count": 3}})
    data["training"].update(training)
    return spec_from_data(data)


@pytest.mark.parametrize("parts", [1, 3])  # single / pipeline (global batch B) and 3 data-parallel workers
def test_held_out_samples_never_reach_a_training_batch(parts):
    from opentikz_dt.runner.data import Data

    spec = _spec(eval={"samples": 300}, dataset={"samples": 2048})
    data = Data(spec, "cpu")
    held = set(data.held_out.tolist())
    assert len(held) == 300 and data.n == 2048 - 300
    seen = set()
    for step in range(3 * 2048 // (32 * parts)):  # about three epochs of every worker's slices
        for part in range(parts):
            x_idx = data.indices(step, 32 * parts)[part * 32:(part + 1) * 32]
            seen.update(x_idx.tolist())
    assert not seen & held and seen == set(range(2048)) - held  # every other sample is trained on


def test_without_eval_the_batches_are_unchanged():
    from opentikz_dt.runner.data import Data

    a, b = Data(_spec(), "cpu"), Data(_spec(eval={"samples": 1}), "cpu")
    assert a.n == 2048 and len(a.held_out) == 0 and a.indices(5, 96).tolist() != b.indices(5, 96).tolist()


def test_too_many_held_out_samples_is_refused(tmp_path):
    """validate refuses it for synthetic data (tests/cases/bad/eval-holds-out-too-much.yaml);
    a file's length is known only to the runner, which refuses it before any rank starts."""
    import numpy as np

    from opentikz_dt.errors import RunError
    from opentikz_dt.runner.data import Data

    np.savez(tmp_path / "d.npz", x=np.zeros((100, 16), dtype=np.float32), y=np.zeros(100, dtype=np.int64))
    spec = _spec(eval={"samples": 100}, dataset={"kind": "file", "path": str(tmp_path / "d.npz")})
    with pytest.raises(RunError, match=r"training\.eval\.samples: 100 held-out samples leave none of the "
                                       r"dataset's 100 to train on"):
        Data(spec, "cpu")


@pytest.mark.dist
def test_a_transformer_run_reports_eval_loss_and_perplexity(tmp_path):
    from opentikz_dt.runner.testing import run_small, small_spec_data

    data = small_spec_data("single", training={"model": {"kind": "transformer", "layers": 1, "d_model": 16,
                                                         "heads": 2, "seq_len": 8, "vocab": 32},
                                               "dataset": {"samples": 512}, "eval": {"samples": 64}})
    del data["training"]["model"]["layers"]
    data["training"]["model"]["layers"] = 1
    result = run_small(data, tmp_path, cache=False)
    evaluated = result.metrics["eval"]
    assert evaluated["samples"] == 64 and 0 < evaluated["loss"] < 10
    assert evaluated["perplexity"] == pytest.approx(math.exp(evaluated["loss"]), rel=1e-3)


def test_the_summary_warns_when_an_async_loss_blows_up():
    from opentikz_dt.runner.summary import divergence_warning

    spec = spec_from_data({"name": "a", "strategy": {"kind": "parameter-server", "sync": "async"}})
    metrics = {"loss": [4.16, 3.0] + [28.36] * 5, "staleness": [0, 1, 2, 3]}
    [line] = divergence_warning(spec, metrics)
    assert line.startswith("dtgen: warning: the loss diverged: the final loss 28.36 is above 1.5 x")
    assert "staleness mean 1.50, max 3" in line and "--repeat" in line
    assert divergence_warning(spec, {"loss": [4.16, 1.0], "staleness": []}) == []


@pytest.mark.dist
def test_sync_ps_with_a_held_out_split_still_matches_single_and_its_eval(tmp_path):
    """The split is the same on every strategy: sync PS on 2 workers and `single` on the
    global batch train on the same samples (same parameters, atol 1e-5 / rtol 1e-4 as
    test_runner_numerics) and report the same eval loss."""
    import torch

    from opentikz_dt.runner.testing import run_small, small_spec_data

    held = {"eval": {"samples": 500}}
    ps = run_small(small_spec_data("parameter-server", topology={"workers": {"count": 2}, "servers": {"count": 1}},
                                   training=held), tmp_path / "ps", cache=False)
    single = run_small(small_spec_data("single", training={**held, "batch_size": 64}), tmp_path / "single",
                       cache=False)
    got, want = torch.load(ps.run_dir / "model.pt"), torch.load(single.run_dir / "model.pt")
    for name in want:
        assert torch.allclose(got[name], want[name], atol=1e-5, rtol=1e-4), name
    assert ps.metrics["eval"]["loss"] == pytest.approx(single.metrics["eval"]["loss"], rel=1e-4)
    assert ps.metrics["eval"]["samples"] == 500 and "perplexity" not in ps.metrics["eval"]
