"""examples/hf-gpt2: a Hugging Face GPT-2 built from a config, trained as a python model
with no wrapper (token ids in, a ModelOutput out) by every data-parallel strategy.

Needs the optional `hf` extra (transformers); skipped cleanly without it. CI does not
install it (each rank would import transformers, about 4.5 s more per process on 2
cores): tests/test_python_tokens.py covers the same mechanics with a plain torch model.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest
import yaml

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from opentikz_dt.runner.launch import launch_run  # noqa: E402

pytestmark = [pytest.mark.dist, pytest.mark.slow]

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "hf-gpt2"
BATCH, STEPS = 8, 3
STRATEGIES = {  # every data-parallel strategy, with two workers
    "allreduce-native": ({"kind": "allreduce", "algorithm": "native"}, {}),
    "allreduce-ring": ({"kind": "allreduce", "algorithm": "ring"}, {}),
    "allreduce-tree": ({"kind": "allreduce", "algorithm": "tree"}, {}),
    "ps-sync": ({"kind": "parameter-server", "sync": "sync"}, {"servers": {"count": 1}}),
    "ps-async": ({"kind": "parameter-server", "sync": "async"}, {"servers": {"count": 1}}),
    "central-storage": ({"kind": "central-storage"}, {}),
    "gossip": ({"kind": "gossip", "peers": 1}, {}),
}
SYNCHRONOUS = {"allreduce-native", "allreduce-ring", "allreduce-tree", "ps-sync", "central-storage"}


def _run(root: Path, name: str, strategy: dict, topology: dict, batch: int):
    """The example's spec with this strategy, a few steps, beside a copy of its model.py."""
    folder = root / name
    folder.mkdir(parents=True)
    shutil.copy(EXAMPLE / "model.py", folder / "model.py")
    data = yaml.safe_load((EXAMPLE / "spec.yaml").read_text(encoding="utf-8"))
    data["name"] = f"hf-{name}"
    data["strategy"] = strategy
    data["topology"] = {"workers": {"count": 2}, **topology}
    data["training"].update(batch_size=batch, steps=STEPS)
    data["runtime"] = {"backend": "gloo", "device": "cpu", "timeout_s": 30}
    spec = folder / "spec.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return launch_run(spec, out=folder / "run", progress=False, echo=lambda line: None)


def _example_model():
    """The example's model, built by its own factory with the spec's arguments."""
    loader = importlib.util.spec_from_file_location("hf_gpt2_model", EXAMPLE / "model.py")
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)
    args = yaml.safe_load((EXAMPLE / "spec.yaml").read_text(encoding="utf-8"))["training"]["model"]["args"]
    return module.build(**args)


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    """`single` on the global batch of a two-worker run."""
    return _run(tmp_path_factory.mktemp("hf"), "single", {"kind": "single"}, {"workers": {"count": 1}}, 2 * BATCH)


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_hf_gpt2_trains_with_every_data_parallel_strategy(tmp_path, single, name):
    strategy, topology = STRATEGIES[name]
    run = _run(tmp_path, name, strategy, topology, BATCH)
    assert run.run["status"] == "ok" and run.metrics["steps_done"] == STEPS
    losses = [v for v in run.metrics["loss"] if v is not None]
    assert losses and all(0 < v < 10 for v in losses)  # cross-entropy over 256 tokens starts near 5.5
    got = torch.load(run.run_dir / "model.pt")
    assert "transformer.wte.weight" in got  # the Hugging Face model's own parameter names
    # model.pt loads into the model as it is, whatever the strategy saved (tied weights included)
    _example_model().load_state_dict(got)
    if name in SYNCHRONOUS:  # the same parameters as one step of `single` on the global batch
        want = torch.load(single.run_dir / "model.pt")
        assert list(got) == list(want)  # a tied weight's second name too (lm_head.weight)
        for key in want:
            assert torch.allclose(got[key], want[key], atol=1e-5, rtol=1e-4), (
                f"{key}: max diff {(got[key] - want[key]).abs().max().item():.3g}")
        assert run.metrics["loss"] == pytest.approx(single.metrics["loss"], rel=1e-4)
