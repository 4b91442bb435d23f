"""Rules for `training.model` and `training.dataset` that depend on their kinds.

Two passes: `check_sections` runs on the raw YAML before the Spec is built (which keys
the chosen kinds take, and the type of `layers`, which differs per kind: the Spec could
not be built otherwise); `check_workload` runs on the built Spec (sizes that must fit
each other, datasets that must fit the model). A key that does not apply to the chosen
kind is an error, never silently ignored: `d_model` on an mlp would otherwise train a
different experiment than the one written. Must not import torch.
"""

from __future__ import annotations

from pathlib import Path

from .strategies import strategy
from .workload import MODEL_KEYS, workload_of

MODEL = ("training", "model")
DATASET = ("training", "dataset")
DATASET_KEYS = {
    "synthetic": {"kind", "samples", "seed", "shape", "classes"},
    "file": {"kind", "path", "seed"},
    "text": {"kind", "path", "seed"},
    "python": {"kind", "entry", "args", "seed"},
}


def _section(data, *path) -> dict:
    for key in path:
        data = data.get(key) if isinstance(data, dict) else None
    return data if isinstance(data, dict) else {}


def _a(kind: str) -> str:
    return f"an {kind}" if kind == "mlp" else f"a {kind}"


def check_sections(located) -> list:
    """Issues in the raw training.model / training.dataset mappings (run with the schema
    check, so they must not assume schema-valid data)."""
    model = _section(located.data, *MODEL)
    dataset = _section(located.data, *DATASET)
    found = [located.issue(path, message, prefer_value=prefer)
             for path, message, prefer in (*_model_section(model), *_dataset_section(dataset))]
    return found


def _model_section(model: dict):
    kind = model.get("kind", "mlp")
    if kind not in MODEL_KEYS:  # the schema reports it
        return
    for key in model:
        if key not in MODEL_KEYS[kind]:
            users = ", ".join(k for k, keys in MODEL_KEYS.items() if key in keys)
            if not users:  # a key no kind takes: the schema reports it, with a suggestion
                continue
            yield MODEL + (key,), f"'{key}' applies to model kind {users}, not {kind}", False
    layers = model.get("layers")
    if kind == "mlp" and isinstance(layers, int) and not isinstance(layers, bool):
        yield MODEL + ("layers",), f"an mlp takes a list of layer widths (input first, classes last), got {layers}", True
    if kind in ("transformer", "cnn") and isinstance(layers, list):
        yield MODEL + ("layers",), f"a {kind} takes its number of blocks (an integer), not a list", True
    if kind == "python" and "entry" not in model:
        yield MODEL, "model kind python needs entry: 'module:factory' (a function returning an nn.Module)", False


def _dataset_section(dataset: dict):
    kind = dataset.get("kind", "synthetic")
    if kind not in DATASET_KEYS:
        return
    for key in dataset:
        if key not in DATASET_KEYS[kind]:
            users = ", ".join(k for k, keys in DATASET_KEYS.items() if key in keys)
            if not users:  # a key no kind takes: the schema reports it, with a suggestion
                continue
            yield DATASET + (key,), f"'{key}' applies to dataset kind {users}, not {kind}", False
    if kind in ("file", "text") and "path" not in dataset:
        what = "a .npz or .pt with tensors x and y" if kind == "file" else "a UTF-8 text file"
        yield DATASET, f"a {kind} dataset needs 'path' ({what})", False
    if kind == "python" and "entry" not in dataset:
        yield DATASET, "dataset kind python needs entry: 'module:fn' (a function returning a torch Dataset)", False


def check_workload(spec):
    """(path, message) for model/dataset combinations that cannot train."""
    m, d = spec.training.model, spec.training.dataset
    kind, data_kind = m["kind"], d["kind"]
    if kind == "transformer" and m["d_model"] % m["heads"]:
        yield MODEL + ("heads",), f"d_model {m['d_model']} does not split into {m['heads']} heads"
    if data_kind == "text":
        if kind != "transformer":
            yield DATASET + ("kind",), f"a text dataset gives byte tokens for the transformer, not {_a(kind)}"
        elif kind == "transformer" and m["vocab"] < 256:
            yield MODEL + ("vocab",), f"text is read as byte tokens (0-255): vocab must be at least 256, got {m['vocab']}"
    if data_kind == "synthetic":
        yield from _synthetic_rule(spec, kind, d)
    if data_kind == "file" and "path" in d and Path(d["path"]).suffix not in (".npz", ".pt"):
        yield DATASET + ("path",), f"a file dataset is a .npz or .pt file, got '{d['path']}'"
    if data_kind in ("file", "text") and "path" in d and spec.located and spec.located.file != "<spec>":
        target = Path(spec.located.file).parent / d["path"]
        if not target.is_file():
            yield DATASET + ("path",), f"no such file: {target}"


def _synthetic_rule(spec, kind: str, d: dict):
    python = kind == "python"
    if python and ("shape" not in d or "classes" not in d):
        yield DATASET, ("synthetic data for a python model needs shape (one input sample, e.g. [16]) and classes;"
                        " or use a file or python dataset")
    if not python:
        for key in ("shape", "classes"):
            if key in d:
                yield DATASET + (key,), f"'{key}' is for python models; synthetic data for {_a(kind)} follows the model"
    data_parallel = spec.topology.workers.count if strategy(spec.strategy.kind).data_parallel else 1
    if d["samples"] < spec.training.batch_size * data_parallel:
        yield DATASET + ("samples",), (f"{d['samples']} samples are fewer than one global batch "
                                       f"({spec.training.batch_size} x {data_parallel})")
    held = (spec.data.get("training", {}).get("eval") or {}).get("samples", 0)
    if held and d["samples"] >= spec.training.batch_size * data_parallel:
        left = d["samples"] - held
        if left < spec.training.batch_size * data_parallel:
            yield ("training", "eval", "samples"), (
                f"holding out {held} of the {d['samples']} samples leaves {max(left, 0)}, fewer than one global "
                f"batch ({spec.training.batch_size} x {data_parallel})")


def block_count(spec) -> tuple[int, str] | None:
    """(blocks a pipeline can split, what one is called); None for a python model."""
    workload = workload_of(spec)
    if workload is None:
        return None
    return len(workload.blocks), workload.block_word
