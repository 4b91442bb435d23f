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

from .strategies import plugin
from .workload import MODEL_KEYS, takes_tokens, workload_of

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
    from .training_rules import optimizer_section

    found = [located.issue(path, message, prefer_value=prefer)
             for path, message, prefer in (*_model_section(model), *_dataset_section(dataset),
                                           *optimizer_section(located.data))]
    return found


def _model_section(model: dict):
    kind = model.get("kind", "mlp")
    if not isinstance(kind, str) or kind not in MODEL_KEYS:  # the schema reports it (a list or map too)
        return
    for key in model:
        if key not in MODEL_KEYS[kind]:
            users = ", ".join(k + (" (with input: tokens)" if k == "python" and key in ("vocab", "seq_len") else "")
                              for k, keys in MODEL_KEYS.items() if key in keys)
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
    if kind == "python":
        yield from _python_input(model)


def _python_input(model: dict):
    """vocab and seq_len describe the token ids a python model takes: only with input: tokens."""
    if model.get("input") == "tokens":
        missing = [key for key in ("vocab", "seq_len") if key not in model]
        if missing:
            yield (MODEL + ("input",), f"a python model with input: tokens needs {' and '.join(missing)} "
                   "(it takes token ids [batch, seq_len], each below vocab)", False)
        return
    for key in ("vocab", "seq_len"):
        if key in model:
            yield (MODEL + (key,), f"'{key}' describes the token ids a python model takes: "
                   "add input: tokens, or remove it", False)


def _dataset_section(dataset: dict):
    kind = dataset.get("kind", "synthetic")
    if not isinstance(kind, str) or kind not in DATASET_KEYS:  # the schema reports it
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


def check_workload(spec, data_files: bool = True):
    """(path, message) for model/dataset combinations that cannot train; with `data_files`,
    also a file or text dataset that is not there (a run directory's spec is loaded without:
    its figures need no data, and the run may have moved to a machine without it)."""
    m, d = spec.training.model, spec.training.dataset
    kind, data_kind = m["kind"], d["kind"]
    if kind == "transformer" and m["d_model"] % m["heads"]:
        yield MODEL + ("heads",), f"d_model {m['d_model']} does not split into {m['heads']} heads"
    tokens = takes_tokens(m) and "vocab" in m and "seq_len" in m  # a python model missing them is reported above
    if data_kind == "text":
        if not takes_tokens(m):
            what = "a python model that takes rows" if kind == "python" else _a(kind)
            yield DATASET + ("kind",), ("a text dataset gives byte tokens for a model that takes tokens "
                                        f"(the transformer, or a python model with input: tokens), not {what}")
        elif tokens and m["vocab"] < 256:
            yield MODEL + ("vocab",), f"text is read as byte tokens (0-255): vocab must be at least 256, got {m['vocab']}"
    if data_kind == "synthetic":
        yield from _synthetic_rule(spec, kind, d)
    if data_kind == "file" and "path" in d and Path(d["path"]).suffix not in (".npz", ".pt"):
        yield DATASET + ("path",), f"a file dataset is a .npz or .pt file, got '{d['path']}'"
    if data_files and data_kind in ("file", "text") and "path" in d and spec.located and spec.located.file != "<spec>":
        target = Path(spec.located.file).parent / d["path"]
        if not target.is_file():
            yield DATASET + ("path",), f"no such file: {target}"
        elif data_kind == "text" and tokens:
            yield from _text_size_rule(spec, target, m["seq_len"])


def _data_parallel_width(spec) -> int:
    return plugin(spec.strategy.kind).data_parallel_width(spec)


def _text_size_rule(spec, target: Path, seq_len: int):
    """The runner's text samples, counted from the file's size (one byte, one token):
    sample i is bytes [i*T, i*T+T], so a file of n bytes holds (n-1) // T of them."""
    size = target.stat().st_size
    samples = max(0, size - 1) // seq_len
    dp = _data_parallel_width(spec)
    need = spec.training.batch_size * dp
    if samples < need:
        yield DATASET + ("path",), (f"{target} holds {samples} sample(s) of seq_len {seq_len} ({size:,} bytes), "
                                    f"fewer than one global batch ({spec.training.batch_size} x {dp} = {need})")


def _synthetic_rule(spec, kind: str, d: dict):
    python = kind == "python" and not takes_tokens(spec.training.model)
    if python and ("shape" not in d or "classes" not in d):
        yield DATASET, ("synthetic data for a python model needs shape (one input sample, e.g. [16]) and classes;"
                        " or use a file or python dataset")
    if not python:
        follows = "python model with input: tokens" if kind == "python" else kind
        for key in ("shape", "classes"):
            if key in d:
                yield DATASET + (key,), (f"'{key}' is for python models that take rows; synthetic data for "
                                         f"{_a(follows)} follows the model")
    data_parallel = _data_parallel_width(spec)
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
