"""Your own language model as a `python` model, with no wrapper: `input: tokens` (with
vocab and seq_len) makes the text and synthetic token datasets feed it token ids, and a
forward that returns an object or mapping with `.logits` (a Hugging Face ModelOutput)
trains with the default loss. A plain torch model stands in for transformers here
(tests/test_hf_example.py runs the real one where it is installed)."""

from __future__ import annotations

import textwrap

import pytest
import yaml

torch = pytest.importorskip("torch")

from opentikz_dt.errors import RunError  # noqa: E402
from opentikz_dt.runner.data import Data  # noqa: E402
from opentikz_dt.runner.model import build_model, logits_of, make_loss  # noqa: E402
from opentikz_dt.runner.preflight import preflight  # noqa: E402
from opentikz_dt.spec import load_spec  # noqa: E402

VOCAB, SEQ = 256, 8

TINY_LM = textwrap.dedent('''
    from dataclasses import dataclass

    import torch
    from torch import nn


    @dataclass
    class Output:  # what a Hugging Face causal LM returns: an object with .logits
        logits: torch.Tensor
        loss: object = None


    class TinyLM(nn.Module):
        def __init__(self, vocab, seq_len, width, as_dict):
            super().__init__()
            self.tok = nn.Embedding(vocab, width)
            self.pos = nn.Embedding(seq_len, width)
            self.head = nn.Linear(width, vocab)
            self.as_dict = as_dict

        def forward(self, input_ids):
            h = self.tok(input_ids) + self.pos(torch.arange(input_ids.shape[1]))
            logits = self.head(torch.tanh(h))
            return {"logits": logits} if self.as_dict else Output(logits)


    def build(vocab=256, seq_len=8, width=16, as_dict=False):
        return TinyLM(vocab, seq_len, width, as_dict)
''')


def _spec(tmp_path, strategy=None, dataset=None, batch=4, workers=1, as_dict=False, name="lm"):
    (tmp_path / "tinylm.py").write_text(TINY_LM, encoding="utf-8")
    (tmp_path / "corpus.txt").write_text("the quick brown fox jumps over the lazy dog. " * 40, encoding="utf-8")
    data = {"name": name, "strategy": strategy or {"kind": "single"}, "topology": {"workers": {"count": workers}},
            "training": {"model": {"kind": "python", "entry": "tinylm:build", "input": "tokens", "vocab": VOCAB,
                                   "seq_len": SEQ, "args": {"vocab": VOCAB, "seq_len": SEQ, "as_dict": as_dict}},
                         "dataset": dataset or {"kind": "text", "path": "corpus.txt"},
                         "batch_size": batch, "steps": 4, "optimizer": {"lr": 0.5}},
            "runtime": {"backend": "gloo", "device": "cpu", "timeout_s": 20}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def test_logits_of_takes_tensors_objects_mappings_and_tuples():
    t = torch.zeros(2, 3)

    class WithLogits:
        logits = t

    assert logits_of(t) is t and logits_of(WithLogits()) is t
    assert logits_of({"logits": t}) is t and logits_of((t, "cache")) is t
    with pytest.raises(RunError, match="the model returned str, with no logits tensor"):
        logits_of("nope")


@pytest.mark.parametrize("dataset", [{"kind": "text", "path": "corpus.txt"}, {"kind": "synthetic", "samples": 64}],
                         ids=["text", "synthetic"])
def test_token_datasets_feed_a_python_model_that_takes_tokens(tmp_path, dataset):
    path = _spec(tmp_path, dataset=dataset)
    spec = load_spec(path)
    data = Data(spec, "cpu", spec_dir=tmp_path)
    x, y = data.batch(0, 0, 1)
    assert x.dtype == torch.int64 and tuple(x.shape) == (4, SEQ) and int(x.max()) < VOCAB
    assert torch.equal(x[:, 1:], y[:, :-1])  # targets are the next tokens
    if dataset["kind"] == "text":  # byte tokens of the file, in order within a sample
        text = (tmp_path / "corpus.txt").read_bytes()
        assert bytes(x[0].tolist()) in text
    model = build_model(spec, spec_dir=tmp_path)
    loss = make_loss(spec, tmp_path)(model(x), y)  # a ModelOutput-like object, no wrapper
    assert loss.dim() == 0 and 4.0 < loss.item() < 7.0  # about log(256) untrained
    facts = preflight(spec, tmp_path, None, [("worker", "w1")])
    assert facts["param_tensors"] == ["tok.weight", "pos.weight", "head.weight", "head.bias"]


@pytest.mark.dist
def test_a_model_returning_logits_objects_matches_single_on_the_global_batch(tmp_path):
    """Ring all-reduce over 2 workers of a model returning {"logits": ...}, on a text file,
    reaches `single`'s parameters on the global batch."""
    from opentikz_dt.runner.launch import launch_run

    # An absolute path: the run directory's resolved spec and relative paths are another fix's.
    text = {"kind": "text", "path": str(tmp_path / "corpus.txt")}
    ring = _spec(tmp_path, {"kind": "allreduce", "algorithm": "ring"}, text, batch=4, workers=2, as_dict=True,
                 name="ring")
    single = _spec(tmp_path, dataset=text, batch=8, as_dict=True, name="single")
    runs = [launch_run(p, out=tmp_path / p.stem, progress=False, echo=lambda line: None) for p in (ring, single)]
    got, want = (torch.load(run.run_dir / "model.pt") for run in runs)
    init = build_model(load_spec(single), spec_dir=tmp_path).state_dict()
    assert list(got) == list(want)
    for name in want:
        assert torch.allclose(got[name], want[name], atol=1e-5, rtol=1e-4), name
    assert any((init[n] - want[n]).abs().max().item() > 1e-3 for n in want)  # it trained
    assert runs[0].metrics["loss"] == pytest.approx(runs[1].metrics["loss"], rel=1e-4)


def test_a_tied_weight_keeps_its_second_name_in_model_pt(tmp_path):
    """A parameter-server run saves parameters by name (a tied weight once); model.pt gets
    its second name back, so it loads into the model as single's and allreduce's do."""
    from opentikz_dt.runner.merge import merge_model
    from opentikz_dt.runner.preflight import _tied_aliases

    model = torch.nn.Sequential(torch.nn.Embedding(8, 4), torch.nn.Linear(4, 8, bias=False))
    model[1].weight = model[0].weight  # tied, as a language model's output layer
    aliases = _tied_aliases(model)
    assert aliases == {"1.weight": "0.weight"}
    (tmp_path / "model_parts").mkdir()
    torch.save({name: p.detach() for name, p in model.named_parameters()}, tmp_path / "model_parts" / "rank1.pt")
    assert merge_model(tmp_path, ["0.weight"], aliases) == ["0.weight", "1.weight"]
    model.load_state_dict(torch.load(tmp_path / "model.pt"))  # strict: every key there
