"""Before any rank is spawned: build the model and the data once in the launcher and
push two samples through one trial forward pass and the loss.

A user's model or dataset that cannot work then fails in about a second with one line
naming the spec key (an entry that does not import, a factory that raises or returns
no nn.Module, samples whose shape the model does not take, an empty or too-small
dataset, a text file that is not UTF-8, a .pt that only unpickling would load),
instead of N ranks failing at once with N tracebacks. What it learns about the built
model (parameter names and sizes) goes to run.json and orders model.pt.
"""

from __future__ import annotations

import torch

from ..errors import InputError
from ..workload import human_bytes, human_count
from .data import Data
from .entry import spec_location
from .describe import describe_model
from .model import build_model, make_loss
from .strategies import load_strategy


def _describe(t) -> str:
    return f"{list(t.shape)} {str(t.dtype).replace('torch.', '')}" if torch.is_tensor(t) else type(t).__name__


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300] if text else ''}"


def preflight(spec, spec_dir, dataset_path, roles) -> dict:
    """Check the model and data of `spec` (InputError if they cannot train); return the
    model facts for run.json: kind, params, grad_bytes, param_tensors, description."""
    model_where = spec_location(spec, ("training", "model"))
    data_where = spec_location(spec, ("training", "dataset"))
    with torch.random.fork_rng(devices=[]):
        model = build_model(spec, "cpu", spec_dir)
        loss_fn = make_loss(spec, spec_dir)
        data = Data(spec, "cpu", dataset_path, spec_dir)
        dp = load_strategy(spec.strategy.kind).data_parallel_width(spec, roles)
        need = spec.training.batch_size * dp
        if data.n < need:
            raise InputError(f"{data_where}: the dataset has {data.n} samples, fewer than one global batch "
                           f"({spec.training.batch_size} x {dp} = {need})")
        x, y = data.take(data.indices(0, min(2, data.n)))
        _trial_step(model, loss_fn, x, y, model_where)
        names = [name for name, _ in model.named_parameters()]
        strategy = load_strategy(spec.strategy.kind)
        # what the strategy asks of the model's modules first (its static checks name the
        # key and the numbers), then its split tried on the same samples (a tensor plan's
        # consistency)
        strategy.check_model(spec, model, names, model_where)
        strategy.check_trial(spec, model, x, model_where)
        workload = _prediction_workload(spec, model, x)
    params = sum(p.numel() for p in model.parameters())
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    kind = spec.training.model.get("kind", "mlp")
    label = spec.training.model.get("entry", kind) if kind == "python" else kind
    # A python model's shards are known only once built: run.json keeps them for the figure.
    shards = strategy.figure_shards(spec, {name: p.numel() for name, p in model.named_parameters()})
    facts = {"kind": kind, "params": params, "grad_bytes": grad_bytes, "param_tensors": names, "shards": shards,
             "data_bytes": _data_bytes(data), "aliases": _tied_aliases(model),
             "description": f"{label}: {human_count(params)} parameters, {human_bytes(grad_bytes)} per gradient"}
    if workload is not None:  # what a fit of this run predicts with (opentikz_dt/predict/fit.py)
        facts["workload"] = workload
    return facts


def _tied_aliases(model) -> dict:
    """{second name: first name} of parameters shared under two names (tied weights)."""
    first, aliases = {}, {}
    for name, p in model.named_parameters(remove_duplicate=False):
        canonical = first.setdefault(id(p), name)
        if canonical != name:
            aliases[name] = canonical
    return aliases


def _data_bytes(data) -> int:
    """Bytes of the dataset each rank holds (a python Dataset's are unknown: 0)."""
    if data.dataset is not None:
        return 0
    return data.x.numel() * data.x.element_size() + data.y.numel() * data.y.element_size()


def _prediction_workload(spec, model, x) -> dict | None:
    """A python model's units for predictions (runner/describe.py). Only predictions need it,
    so a model it cannot describe (a forward the FLOP counter rejects) still runs."""
    if spec.training.model.get("kind") != "python":
        return None
    try:
        return describe_model(model, x)
    except Exception:
        return None


def _trial_step(model, loss_fn, x, y, where: str) -> None:
    try:
        out = model(x)
    except Exception as exc:
        raise InputError(f"{where}: the model does not take the dataset's samples (a batch of 2: x {_describe(x)}, "
                       f"y {_describe(y)}): {_first_line(exc)}") from None
    try:
        loss = loss_fn(out, y)
    except Exception as exc:
        raise InputError(f"{where}: the loss does not take the model's output {_describe(out)} with targets "
                       f"{_describe(y)}: {_first_line(exc)}") from None
    if not (torch.is_tensor(loss) and loss.numel() == 1 and loss.requires_grad):
        raise InputError(f"{where}: the loss must be a scalar tensor that depends on the parameters, got "
                       f"{_describe(loss)}")
    loss.backward()

