"""opentikz_dt.workload: what the spec's model is (tensors, sizes, FLOPs), without torch.

The runner-side test (tests/test_runner_workloads.py) checks these names and shapes
against the modules torch builds; here the arithmetic and the spec rules."""

import pytest

from opentikz_dt.errors import SpecError
from opentikz_dt.shards import shard_assignment
from opentikz_dt.spec import spec_from_data
from opentikz_dt.workload import describe_model, stage_bounds, workload_of


def _spec(model, strategy="single", dataset=None, **extra):
    data = {"strategy": {"kind": strategy}, "training": {"model": model, "dataset": dataset or {}}}
    for key, value in extra.items():
        data.setdefault(key, {}).update(value)
    return spec_from_data(data)


def test_mlp_matches_the_layer_widths():
    wl = workload_of(_spec({"layers": [4, 8, 3]}))
    assert wl.param_tensors == ["layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias"]
    assert wl.params == 4 * 8 + 8 + 8 * 3 + 3
    assert wl.grad_bytes == 4 * wl.params
    assert wl.flops_per_sample == 2 * wl.params  # one multiply-add per weight, bias as one more
    assert wl.tensors[0] == ("layers.0.weight", (8, 4))  # torch's Linear stores (out, in)
    assert _spec({"layers": [4, 8, 3]}).training.param_tensors == wl.param_tensors


def test_transformer_parameters_by_hand():
    # d=16, T=8, V=64, 2 blocks: embedding 64*16 + 8*16; per block 12 d^2 + 13 d (two
    # LayerNorms 4d, qkv 3d^2+3d, proj d^2+d, fc 4d^2+4d, fc2 4d^2+d); final norm 2d;
    # the output layer reuses the token embedding (tied): no parameters of its own.
    wl = workload_of(_spec({"kind": "transformer", "layers": 2, "d_model": 16, "heads": 2, "seq_len": 8,
                            "vocab": 64}))
    assert wl.params == 64 * 16 + 8 * 16 + 2 * (12 * 256 + 13 * 16) + 2 * 16 == 7744
    assert wl.param_tensors[:2] == ["tok.weight", "pos.weight"]
    assert wl.param_tensors[-2:] == ["norm.weight", "norm.bias"]
    assert len(wl.blocks) == 2 and wl.block_word == "block"
    # FLOPs: the attention term (4 T^2 d per block) is there, the output projection (2 T d V) too.
    block = 2 * 8 * 12 * 256 + 4 * 8 * 8 * 16
    assert wl.flops_per_sample == 8 * 16 + 2 * block + 2 * 8 * 16 * 64


def test_pipeline_stages_split_blocks_and_carry_prologue_and_epilogue():
    wl = workload_of(_spec({"kind": "transformer", "layers": 5}))
    parts = wl.stage_units(3)
    assert [[u.name for u in p] for p in parts] == [
        ["embedding", "block 1", "block 2"], ["block 3", "block 4"], ["block 5", "head"]]
    costs = wl.stage_costs(3)
    assert sum(costs) == pytest.approx(wl.flops_per_sample)
    assert costs[2] == pytest.approx(costs[1] / 2 + 2 * 32 * 64 * 256)  # one block plus the head's d x vocab output
    assert wl.stage_blocks(3) == [(1, 2), (3, 4), (5, 5)]
    # the last stage keeps a copy of the tied embedding for the output layer
    assert sum(wl.stage_params(3)) == wl.params + wl.tensor_sizes()["tok.weight"]
    assert wl.boundary_values(3) == [32 * 64, 32 * 64]
    assert stage_bounds(5, 3) == [0, 2, 4, 5]


def test_cnn_blocks_and_flops_scale_with_image_area():
    small = workload_of(_spec({"kind": "cnn", "image_size": 8}))
    large = workload_of(_spec({"kind": "cnn", "image_size": 16}))
    assert small.params == large.params == (16 * 3 * 9 + 16) + 2 * 2 * (16 * 16 * 9 + 16) + (10 * 16 + 10)
    assert large.flops_per_sample == pytest.approx(4 * small.flops_per_sample, rel=0.01)
    assert [u.name for u in small.units] == ["stem", "block 1", "block 2", "head"]


def test_python_model_is_known_only_at_run_time():
    spec = _spec({"kind": "python", "entry": "model:build"}, dataset={"shape": [16], "classes": 4})
    assert workload_of(spec) is None
    assert spec.training.param_tensors == []
    assert describe_model(spec) == "python model model:build (size known at run time)"


def test_describe_model_states_kind_size_and_gradient_bytes():
    spec = _spec({"kind": "transformer", "layers": 2, "d_model": 16, "heads": 2, "seq_len": 8, "vocab": 64})
    assert describe_model(spec) == "transformer (2 blocks, d_model 16, seq 8): 7.7 k parameters, 31 kB per gradient"
    assert describe_model(_spec({"layers": [4, 8, 3]})) == "mlp (widths 4-8-3): 67 parameters, 268 B per gradient"


def test_shards_own_the_transformers_tensors():
    spec = _spec({"kind": "transformer", "layers": 2}, strategy="parameter-server",
                 topology={"servers": {"count": 3}})
    owned = shard_assignment(spec)
    names = [n for part in owned.values() for n in part]
    assert sorted(names) == sorted(workload_of(spec).param_tensors)
    assert "tok.weight" in owned["ps1"]  # the largest tensor goes to the first shard


@pytest.mark.parametrize("model, dataset, message", [
    ({"kind": "transformer", "d_model": 30, "heads": 4}, {}, "training.model.heads: d_model 30 does not split into 4 heads"),
    ({"kind": "transformer", "layers": [1, 2]}, {}, "training.model.layers: a transformer takes its number of blocks"),
    ({"kind": "cnn", "vocab": 10}, {}, "training.model.vocab: 'vocab' applies to model kind transformer, python (with input: tokens), not cnn"),
    ({"kind": "mlp"}, {"kind": "text", "path": "x.txt"}, "training.dataset.kind: a text dataset gives byte tokens"),
    ({"kind": "mlp"}, {"shape": [3]}, "training.dataset.shape: 'shape' is for python models"),
    ({"kind": "python", "entry": "m:f"}, {}, "training.dataset: synthetic data for a python model needs shape"),
    ({"kind": "mlp"}, {"kind": "file", "path": "x.csv"}, "training.dataset.path: a file dataset is a .npz or .pt"),
    ({"kind": "mlp"}, {"kind": "python"}, "training.dataset: dataset kind python needs entry"),
])
def test_model_and_dataset_rules(model, dataset, message):
    with pytest.raises(SpecError) as caught:
        spec_from_data({"strategy": {"kind": "single"}, "training": {"model": model, "dataset": dataset}})
    assert any(message in str(issue) for issue in caught.value.issues), caught.value


def test_resolved_data_revalidates():
    # The runner re-loads the resolved spec (spec.yaml in the run directory): kind
    # defaults must not trip the "key of another kind" rule.
    for model, dataset in (({"kind": "transformer"}, {"kind": "synthetic"}),
                           ({"kind": "python", "entry": "m:f"}, {"kind": "python", "entry": "d:f"}),
                           ({"kind": "cnn"}, {"kind": "file", "path": "x.npz"})):
        spec = spec_from_data({"strategy": {"kind": "single"}, "training": {"model": model, "dataset": dataset}})
        assert spec_from_data(spec.data).data == spec.data


def test_pipeline_rule_counts_blocks():
    with pytest.raises(SpecError, match="3 pipeline stages need at least 3 blocks; the model has 2"):
        _spec({"kind": "cnn"}, strategy="pipeline", topology={"workers": {"count": 3}})


@pytest.mark.parametrize("section", ["model", "dataset"])
def test_a_typo_is_reported_once_with_a_suggestion(section):
    # A key no kind takes is a typo: one line from the schema ("did you mean"), not a
    # second one claiming it "applies to model kind <nothing>".
    training = {"model": {"kind": "transformer", "d_modle": 64}} if section == "model" \
        else {"dataset": {"kind": "synthetic", "sampels": 64}}
    with pytest.raises(SpecError) as caught:
        spec_from_data({"strategy": {"kind": "single"}, "training": training})
    lines = [str(issue) for issue in caught.value.issues]
    assert len(lines) == 1 and "did you mean" in lines[0], lines
