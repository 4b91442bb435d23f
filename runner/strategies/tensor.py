"""`tensor`: tensor parallelism (the horizontal model split): every worker holds a slice
of every split layer, all workers see the same batch, and the workers sum their partial
results inside each layer pair (Megatron-LM's column- then row-parallel Linear layers).

The split is torch's own: a 1-D DeviceMesh over the workers and `parallelize_module` with
ColwiseParallel / RowwiseParallel (torch.distributed.tensor.parallel). A column-parallel
layer takes the whole (replicated) input and gives each worker its slice of the output
features; the row-parallel layer after it takes that slice and gives each worker a
partial sum of the whole output, which one all-reduce completes (forward). In backward
the column-parallel layer's input gradient is a partial sum too: one all-reduce. So per
pair: one all-reduce forward, one backward (the built-in transformer: attention and MLP,
4 per block and step).

Which layers are split (the plan):
- built-in transformer: attention by heads (the fused q/k/v Linear column-parallel, its
  rows regrouped so each worker's slice holds whole heads; the output projection
  row-parallel), the MLP by hidden units (fc column-, proj row-parallel). The token and
  position embeddings, the tied output head and the layer norms stay replicated: every
  worker computes them whole on the same batch, so their gradients are the same on every
  worker without any communication, and the numerics stay `single`'s. Splitting the vocab
  would save memory but needs the tied weight split the same way in its two uses and a
  vocab-parallel loss; at dtgen's sizes replication is the cheaper and clearer choice.
- built-in mlp: Linear layers in pairs, colwise then rowwise; an odd last layer (the
  classifier) stays whole.
- built-in cnn: refused by the spec rules (opentikz_dt/strategies/tensor/strategy.py).
- python model: `strategy.plan` (module-name patterns -> colwise | rowwise | replicate,
  '*' matching one name part, as parallelize_module reads them), else the model's own
  `tp_plan` / `_tp_plan` (Hugging Face) in the same words.

Tracing every collective: DTensor issues its collectives as torch's functional
collectives (torch.ops._c10d_functional.*) from Python, in forward and in backward, and
waits on them lazily. `_CollectiveTrace` is a TorchDispatchMode (the mechanism torch's
own CommDebugMode uses to count them) that sees each one, runs it, waits for it at once
and records one `allreduce` span (comm thread) with its `phase` (the collective:
all-reduce), `layer`, `pass` (forward or backward) and `bytes`. Waiting at
once is what makes the span's length the collective's real time; the all-reduces of a
tensor-parallel layer are on its critical path anyway (the next op needs the sum), so
little overlap is lost. Module hooks on the planned layers name the layer:
a forward pre-hook before its forward, a backward pre-hook before its backward (a
column-parallel layer's input all-reduce runs right after its own backward, under its
name). The mode only wraps forward and backward; the optimizer step has no collective
(each worker updates its own slices) except the gradient-norm sum when clipping.

Parameters are DTensors where split (each rank holds its slice; a row-parallel layer's
bias is a replicated DTensor) and plain tensors where not; the optimizer keeps the two in
separate parameter groups (a foreach update cannot mix them), and the gradient norm counts
each slice once and each replicated parameter once. Checkpoints are per rank (its slices
and their optimizer state). The model saved at the end is the whole one, under `single`'s
names and row order. A python model's plan is the user's: each rank checks it on the
first batch against the unsplit model before training (`_check_consistent`).
"""

from __future__ import annotations

import copy
import difflib
from fnmatch import fnmatch
from time import perf_counter_ns

import torch

from ...errors import InputError
from ..host_gather import full_tensors
from ..loop import StepHooks, train_steps

KIND = "tensor"  # the strategy.kind this module runs (opentikz_dt/plugins.py)

STYLE_WORDS = ("colwise", "rowwise", "replicate")  # the plan's values (schema: strategy.plan)
# How far (relative to its largest value) a split python model's output on the first batch
# may be from the unsplit model's: float rounding of the sums in another order (fp32: 9.9e-8 on
# examples/custom-model/tensor.yaml); a Softmax between a colwise and a rowwise layer: 0.4.
CONSISTENT = 1e-4


def roles(spec):
    return [("worker", w) for w in spec.topology.workers.ids]


# --- the plan ------------------------------------------------------------------------------

def builtin_plan(model) -> dict[str, str]:
    """{module name: colwise | rowwise} of a built-in model (runner/model.py's names)."""
    from ..model import MLP, Transformer

    if isinstance(model, Transformer):
        plan = {}
        for i in range(len(model.blocks)):
            plan.update({f"blocks.{i}.attn.qkv": "colwise", f"blocks.{i}.attn.proj": "rowwise",
                         f"blocks.{i}.mlp.fc": "colwise", f"blocks.{i}.mlp.proj": "rowwise"})
        return plan
    if isinstance(model, MLP):
        pairs = len(model.layers) // 2  # an odd last layer stays whole
        return {f"layers.{2 * i + j}": ("colwise", "rowwise")[j] for i in range(pairs) for j in (0, 1)}
    return {}


def plan_of(spec, model) -> tuple[dict[str, str], str]:
    """The plan for `model` resolved to its module names ({name: style}), and where it
    comes from (for messages); InputError when a python model has none, names modules it
    lacks, or uses a style dtgen does not run."""
    from ..entry import spec_location

    if spec.training.model_kind != "python":
        return builtin_plan(model), spec_location(spec, ("training", "model"))
    given = spec.strategy.options.get("plan")
    source = spec_location(spec, ("strategy", "plan"))
    if given is None:
        source = spec_location(spec, ("training", "model", "entry"))
        for attribute in ("tp_plan", "_tp_plan"):
            found = getattr(model, attribute, None)
            if isinstance(found, dict) and found:
                given, source = dict(found), f"{source}: the model's {attribute}"
                break
    if not given:
        raise InputError(f"{spec_location(spec, ('strategy', 'kind'))}: tensor parallelism needs a plan for this "
                         "python model: add strategy.plan, e.g. {fc1: colwise, fc2: rowwise} (module names from "
                         "model.named_modules()), or give the model a tp_plan attribute")
    names = [name for name, _ in model.named_modules() if name]
    resolved: dict[str, str] = {}
    for pattern, style in given.items():
        if style not in STYLE_WORDS:
            raise InputError(f"{source}: {pattern}: style {style!r} is not one dtgen runs; use "
                             + " | ".join(STYLE_WORDS))
        matched = [n for n in names if _matches(n, pattern)]
        if not matched:
            close = difflib.get_close_matches(pattern, names, n=3, cutoff=0.5) or names[:3]
            raise InputError(f"{source}: the model has no module {pattern!r}; closest: {', '.join(close)}")
        for name in matched:
            if style != "replicate":
                resolved[name] = style
            else:
                resolved.pop(name, None)
    return resolved, source


def _matches(name: str, pattern: str) -> bool:
    """parallelize_module's matching: part by part, each an fnmatch pattern."""
    parts, wanted = name.split("."), pattern.split(".")
    return len(parts) == len(wanted) and all(fnmatch(p, w) for p, w in zip(parts, wanted))


def check_plan(plan: dict[str, str], model, workers: int, source: str) -> None:
    """Every planned module is a Linear or Embedding whose split dimension divides by the
    workers (the built-in models' sizes are checked by the spec rules before spawning)."""
    from torch import nn

    modules = dict(model.named_modules())
    for name, style in plan.items():
        module = modules[name]
        if isinstance(module, nn.Linear):
            size, what = (module.out_features, "output features") if style == "colwise" else \
                (module.in_features, "input features")
        elif isinstance(module, nn.Embedding):
            size, what = (module.embedding_dim, "embedding dim") if style == "colwise" else \
                (module.num_embeddings, "vocabulary rows")
        else:
            raise InputError(f"{source}: {name} is a {type(module).__name__}; {style} splits Linear and "
                             "Embedding modules only")
        if size % workers:
            fits = [n for n in range(2, size + 1) if size % n == 0]
            fits = sorted(sorted(fits, key=lambda n: (abs(n - workers), n))[:3])
            raise InputError(f"{source}: {name} ({style}) has {size} {what}, which do not split over {workers} "
                             f"workers (counts that work: {', '.join(map(str, fits)) or 'none'})")


# --- the split -----------------------------------------------------------------------------

def _qkv_order(d: int, heads: int, workers: int) -> torch.Tensor:
    """Row order of the fused q/k/v weight that gives each worker whole heads: rank-major,
    then q/k/v, then the rank's heads (`single`'s order is q/k/v, then heads)."""
    head = d // heads
    per_rank = heads // workers
    rows = [s * d + h * head + e for r in range(workers) for s in range(3)
            for h in range(r * per_rank, (r + 1) * per_rank) for e in range(head)]
    return torch.tensor(rows)


def _local_heads_forward(attention, workers: int):
    """The built-in Attention's forward on this worker's heads (its q/k/v output is the
    local slice: 3 x heads/workers heads; the row-parallel projection sums the rest)."""
    from torch.nn import functional as F

    local = attention.heads // workers

    def forward(x):
        b, t, d = x.shape
        q, k, v = attention.qkv(x).view(b, t, 3, local, d // attention.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return attention.proj(y.transpose(1, 2).reshape(b, t, -1))

    return forward


def split_model(model, plan: dict[str, str], mesh) -> dict[str, torch.Tensor]:
    """Apply `plan` with parallelize_module; returns {parameter name: row order} for the
    parameters whose rows were regrouped before the split (to restore `single`'s order)."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    from ..model import Attention

    workers = mesh.size()
    reordered = {}
    for name, module in model.named_modules():
        if isinstance(module, Attention) and f"{name}.qkv" in plan:
            order = _qkv_order(module.proj.in_features, module.heads, workers)
            with torch.no_grad():
                for pname in ("weight", "bias"):
                    tensor = getattr(module.qkv, pname)
                    tensor.copy_(tensor[order.to(tensor.device)])
                    reordered[f"{name}.qkv.{pname}"] = order
            module.forward = _local_heads_forward(module, workers)
    styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
    parallelize_module(model, mesh, {name: styles[style]() for name, style in plan.items()})
    return reordered


def full_state_dict(model, reordered: dict, gather) -> dict:
    """The whole model under `single`'s names and row order (every rank must call it:
    each split parameter is gathered); `gather`: runner/host_gather.py's, through host
    memory on GPUs shared over gloo."""
    state = {}
    for name, value in model.state_dict().items():
        value = gather.full(value)
        if name in reordered:
            order = reordered[name].to(value.device)
            restored = torch.empty_like(value)
            restored[order] = value
            value = restored
        state[name] = value.detach()
    return state


# --- tracing ------------------------------------------------------------------------------

# The functional collectives (op name prefix, in torch.ops._c10d_functional) -> the span's
# `phase`. DTensor's redistributions use these; dtgen's plans (colwise/rowwise pairs) issue
# all-reduces only, a python model's own plan may need the others. Every one is an
# `allreduce` span (the timeline's collective box), as fsdp records its all-gathers.
_COLLECTIVES = {"all_reduce": "all-reduce", "all_gather": "all-gather", "reduce_scatter": "reduce-scatter",
                "all_to_all": "all-to-all", "broadcast": "broadcast"}


class _CollectiveTrace:
    """Records every functional collective DTensor issues in this process as a span, and
    counts the bytes it moves (see the module docstring)."""

    def __init__(self, ctx, model, plan: dict[str, str], workers: int | None = None, **span_args):
        """`workers`: the ranks of the tensor group (default all); `span_args`: added to
        every span (a mesh names its dimension: dim=tensor)."""
        from torch.utils._python_dispatch import TorchDispatchMode

        self.ctx, self.workers = ctx, workers or ctx.world_size
        self.span_args = span_args
        self.where = ("", "forward")  # (layer, pass) of the collectives issued now
        self.step = 0
        self.moved = 0  # bytes this rank sent (= received) this step
        trace = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                from torch.distributed.tensor import DTensor

                if any(t is DTensor or issubclass(t, DTensor) for t in types):
                    return NotImplemented  # let DTensor lower it to local ops and collectives
                return trace.dispatch(func, args, kwargs or {})

        self.mode = Mode
        modules = dict(model.named_modules())
        for name in plan:
            modules[name].register_forward_pre_hook(self._at(name, "forward"), prepend=True)
            modules[name].register_full_backward_pre_hook(self._at(name, "backward"), prepend=True)

    def _at(self, name: str, direction: str):
        def hook(*_):
            self.where = (name, direction)
        return hook

    def dispatch(self, func, args, kwargs):
        namespace = getattr(func, "namespace", "")
        op = func._overloadpacket.__name__ if hasattr(func, "_overloadpacket") else ""
        phase = next((name for prefix, name in _COLLECTIVES.items() if op.startswith(prefix)), None)
        if namespace not in ("_c10d_functional", "c10d_functional") or phase is None:
            return func(*args, **kwargs)  # a local op, a wait, or the namespace's autograd wrapping
        tensor = args[0] if torch.is_tensor(args[0]) else args[0][0]
        size = tensor.numel() * tensor.element_size()
        t0 = perf_counter_ns()
        out = func(*args, **kwargs)
        torch.ops._c10d_functional.wait_tensor(out if torch.is_tensor(out) else out[0])
        t1 = perf_counter_ns()
        n = self.workers
        # what one rank sends (and receives) in a ring: 2(n-1)/n of the tensor for an
        # all-reduce, (n-1)/n of the whole for an all-gather or reduce-scatter
        self.moved += size * 2 * (n - 1) // n if op.startswith("all_reduce") else size * (n - 1) // n
        layer, direction = self.where
        self.ctx.tracer.add_span("allreduce", t0, t1, self.step, "comm", algorithm="native", phase=phase,
                                 layer=layer, bytes=size, **{"pass": direction}, **self.span_args)  # a no-op on unsampled steps
        return out

    def __call__(self, step: int):
        self.step, self.moved = step, 0
        return self.mode()


# --- training ------------------------------------------------------------------------------

class _LocalGrad:
    """A parameter as the gradient norm sees it: its local gradient (the rank's slice of a
    split parameter)."""

    def __init__(self, param):
        self.param = param

    @property
    def grad(self):
        grad = self.param.grad
        return grad.to_local() if grad is not None and hasattr(grad, "to_local") else grad


def train(ctx) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor

    import torch.distributed as dist

    model = ctx.build_model()
    plan, source = plan_of(ctx.spec, model)
    # A python model's plan is the user's: keep the unsplit model to check it against
    # (the built-in plans are tested against `single` in tests/test_runner_numerics.py).
    whole_model = copy.deepcopy(model) if ctx.spec.training.model_kind == "python" else None
    mesh = init_device_mesh(ctx.device.type, (ctx.world_size,))
    reordered = split_model(model, plan, mesh)
    if whole_model is not None:
        _check_consistent(ctx, model, whole_model, source)
        del whole_model
    params = list(model.parameters())
    split = [p for p in params if isinstance(p, DTensor)]
    whole = [p for p in params if not isinstance(p, DTensor)]
    opt = ctx.build_optimizer([{"params": group} for group in (split, whole) if group])
    # The global gradient norm (clipping): every rank's slices, plus the replicated
    # parameters counted once (rank 0), summed over the ranks. A row-parallel layer's bias
    # is a DTensor too, but replicated (each rank holds all of it): counted once.
    sliced = [p for p in split if any(placement.is_shard() for placement in p.placements)]
    replicated = [_LocalGrad(p) for p in split if not any(pl.is_shard() for pl in p.placements)] + whole
    counted = [_LocalGrad(p) for p in sliced] + (replicated if ctx.rank == 0 else [])

    def reduce_sq(sq):
        dist.all_reduce(sq, group=ctx.group)
        return sq

    stepper = ctx.stepper(opt, params, norm_params=counted, reduce_sq=reduce_sq)
    _resume(ctx, model, opt)
    trace = _CollectiveTrace(ctx, model, plan)

    def forward_backward(step):
        with trace(step):
            loss, samples = ctx.forward_backward(model, step, 0, 1)
        ctx.metrics.add_bytes(sent=trace.moved, recv=trace.moved)
        return loss, _share(samples, ctx)

    train_steps(ctx, StepHooks(
        forward_backward=forward_backward,
        stepper=stepper,
        memory_params=params, memory_optimizer=opt,  # this rank's slices, the replicated parameters whole
        checkpoint_state=lambda: {"model": _local(model.state_dict()), "opt": _local(opt.state_dict())},
    ))
    state = full_state_dict(model, reordered, full_tensors(ctx))
    if ctx.rank == 0:
        ctx.save_model(state)


def _check_consistent(ctx, split, whole, source: str) -> None:
    """Refuse a plan that changes what the model computes: on the first batch the split
    model's output must equal the unsplit one's. A plan goes wrong silently otherwise: a
    module between a colwise layer and its rowwise partner that needs whole features (a
    LayerNorm, a view by the full width) sees only this worker's slice, and a colwise
    layer with no rowwise layer after it hands the loss a slice. Every rank runs it (the
    split forward's all-reduces need them all) and reaches the same verdict."""
    from ..model import logits_of

    x, _ = ctx.batch(ctx.start_step, 0, 1)
    with torch.no_grad():
        want = logits_of(whole(x))
        try:
            got = logits_of(split(x))
        except RuntimeError as exc:
            first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
            raise InputError(f"{source}: the model cannot run split by this plan: {first}") from None
    _verdict(got, want, source, "on the first batch")


def _verdict(got, want, source: str, where: str) -> None:
    """InputError unless the split model's output `got` is the unsplit one's `want`."""
    if got.shape != want.shape:
        raise InputError(f"{source}: with this plan the model's output is {list(got.shape)}, not {list(want.shape)}: "
                         "a colwise layer's slice reaches the loss (pair it with a rowwise layer after it)")
    off = ((got - want).abs().max() / want.abs().max().clamp_min(1e-12)).item()
    if not off <= CONSISTENT:
        raise InputError(f"{source}: this plan changes what the model computes: {where} its output is "
                         f"{off:.2g} (relative) off the unsplit model's; a module between a colwise layer and its "
                         "rowwise partner needs whole features (e.g. a LayerNorm), or a colwise output is used "
                         "without a rowwise layer after it")


# --- the plan tried before spawning (runner/preflight.py) ------------------------------------

def check_trial(spec, model, x, where: str) -> None:
    """Before any rank is spawned: refuse a python model's plan that changes what the model
    computes, on the preflight's trial samples `x`, in this one process. The split is
    emulated without a process group: each colwise layer's output is cut into the workers'
    slices, stacked along the batch dimension (worker k's slice is the k-th block of rows),
    so the modules after it see each worker's slice as its rank would; a rowwise layer
    takes the k-th block with its k-th column slice of the weight and sums the blocks (the
    all-reduce). A plan that gives a slice to a module needing whole features, or a slice
    to the loss, then shows here as it would on the ranks, a second after `dtgen run`
    instead of after the spawn (the ranks' own check on the first batch, `_check_consistent`,
    stays). One limit: a module that takes the batch size from somewhere other than its
    input would see the stacked slices as a larger batch."""
    if spec.training.model_kind != "python":
        return  # the built-in plans are tested against `single` (tests/test_runner_numerics.py)
    from ..model import logits_of

    plan, source = plan_of(spec, model)
    workers = spec.topology.workers.count
    if not plan or workers < 2:
        return
    emulated = _emulated_split(model, plan, workers).eval()  # no dropout: the two must compute alike
    training = model.training
    model.eval()
    try:
        with torch.no_grad():
            want = logits_of(model(x))
            try:
                got = logits_of(emulated(x))
            except RuntimeError as exc:
                first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
                raise InputError(f"{source}: the model cannot run split by this plan (tried on {x.shape[0]} "
                                 f"trial samples before spawning): {first}") from None
    finally:
        model.train(training)
    _verdict(got, want, source, f"on {x.shape[0]} trial samples (before spawning)")


def _emulated_split(model, plan: dict[str, str], workers: int):
    """A copy of `model` whose planned Linear/Embedding modules compute as split over
    `workers` ranks, the ranks' slices stacked along dimension 0 (check_trial)."""
    from torch import nn
    from torch.nn import functional as F

    copied = copy.deepcopy(model)
    modules = dict(copied.named_modules())
    for name, style in plan.items():
        module = modules[name]
        if style == "colwise" and isinstance(module, nn.Linear):
            module.forward = lambda x, m=module: torch.cat(F.linear(x, m.weight, m.bias).chunk(workers, -1), 0)
        elif style == "colwise" and isinstance(module, nn.Embedding):
            module.forward = lambda ids, m=module: torch.cat(m.__class__.forward(m, ids).chunk(workers, -1), 0)
        elif style == "rowwise" and isinstance(module, nn.Linear):
            module.forward = lambda x, m=module: _rowwise(x, m, workers)
        # a rowwise Embedding (vocabulary rows) sums lookups that hit one slice each: the whole lookup
    return copied


def _rowwise(x, module, workers: int):
    """A row-parallel Linear over ranks stacked along dimension 0: each block times its
    column slice of the weight, the blocks summed (the all-reduce), the bias added once."""
    from torch.nn import functional as F

    if x.shape[0] % workers or x.shape[-1] * workers != module.in_features:
        raise RuntimeError("a rowwise layer's input is not a colwise layer's slice")
    parts = zip(x.chunk(workers, 0), module.weight.chunk(workers, 1))
    out = sum(F.linear(part, weight) for part, weight in parts)
    return out + module.bias if module.bias is not None else out


def _local(state):
    """A state dict with every DTensor as this rank's local slice (each rank checkpoints its
    own: runner/checkpoint.py keeps one file per rank)."""
    from torch.distributed.tensor import DTensor

    if isinstance(state, DTensor):
        return state.to_local().detach().clone()
    if isinstance(state, dict):
        return {k: _local(v) for k, v in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(_local(v) for v in state)
    return state


def _resume(ctx, model, opt) -> None:
    """After a restart, put this rank's checkpointed slices back: the parameters' local
    tensors in place, the optimizer's state as DTensors placed like their parameters.
    Also kind mesh's, whose parameters are DTensors on its tensor and data dimensions."""
    from torch.distributed.tensor import DTensor

    from .fsdp import _as_shard_of

    state = ctx.load_checkpoint()
    if not state:
        return
    with torch.no_grad():
        for name, value in model.state_dict().items():
            (value.to_local() if isinstance(value, DTensor) else value).copy_(state["model"][name])
    params = [p for group in opt.param_groups for p in group["params"]]  # the state dict's numbering
    saved = state["opt"]
    for index, entry in saved["state"].items():
        p = params[int(index)]
        if isinstance(p, DTensor):
            saved["state"][index] = {k: _as_shard_of(v, p) for k, v in entry.items()}
    opt.load_state_dict(saved)


def _share(samples: int, ctx) -> int:
    """This rank's share of the step's samples: the workers train one batch together, and
    the run's throughput is the sum of the workers' samples (runner/merge.py), so each
    counts 1/N of it (rank 0 the remainder), not the whole batch N times."""
    share, left = divmod(samples, ctx.world_size)
    return share + (left if ctx.rank == 0 else 0)


# --- the runner's other questions (runner/strategies/interface.py) ------------------------

def data_parallel_width(spec, roles) -> int:
    return 1  # every worker sees the whole batch


def check_model(spec, model, names: list[str], where: str) -> None:
    plan, source = plan_of(spec, model)
    check_plan(plan, model, spec.topology.workers.count, source)


def sent(spec) -> str:
    # The all-reduced values are activations and activation gradients, in the precision
    # the layers compute in (bf16 under bf16 autocast), not fp32 as the line would say:
    # name them only where they are fp32.
    if spec.training.precision != "fp32":
        return ""
    return "partial sums of layer outputs and input gradients"
