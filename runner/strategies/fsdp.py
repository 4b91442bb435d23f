"""`fsdp`: sharded data parallelism with torch's own FSDP2 (`fully_shard`).

Every worker takes its slice of the global batch (as `allreduce`). The model is cut into
units (`unit_names`): each block of the built-in transformer and cnn, each layer of the
mlp, each child of an nn.Sequential or of the model's outermost nn.ModuleLists, or the
spec's `strategy.units`; what is left (embeddings, final norm, head) is the root unit.
`fully_shard` shards every parameter of a unit over the workers (dim 0), so each rank
holds 1/N of the parameters, of the gradients and of the optimizer state. FSDP
all-gathers a unit's parameters before its forward, and before its backward when
`reshard_after_forward` (the default) freed them after the forward; after the unit's
backward it reduce-scatters the gradients, averaged over the workers, so each rank keeps
its shard of the global batch's mean gradient and the optimizer updates that shard.
That is `single`'s update on the global batch (tests/test_runner_numerics.py).

Precision: bf16/fp16 use FSDP's MixedPrecisionPolicy (parameters gathered and the unit
computed in that dtype; gradients reduced and kept in fp32, the sharded parameters and
the optimizer state in fp32), on top of the autocast every strategy's forward runs under.

ZeRO stages (`strategy.shard`, docs/memory.md):

- `parameters` (ZeRO-3, the default): as above.
- `gradients` (ZeRO-2): the same FSDP2 units with reshard_after_forward false for every
  unit. Each unit's parameters are all-gathered once a step, before its forward, and kept
  gathered until its backward has run; its gradients are reduce-scattered then, so each
  rank keeps 1/N of them and of the optimizer state. FSDP2 then frees the gathered
  parameters (it has no way to keep them across the optimizer step: the update is on the
  shards, and the next forward all-gathers the updated shards, which is ZeRO-2's
  all-gather of the updated parameters moved to where they are next needed). So the
  whole model is held from the forward to the backward, as in the paper, but only 1/N of
  it between steps.
- `optimizer` (ZeRO-1): torch's DDP (the gradients all-reduced, every rank holding the
  whole model and gradients) with torch's ZeroRedundancyOptimizer: each rank keeps the
  optimizer state of the parameters assigned to it (whole tensors, greedily by size),
  updates them, and broadcasts them to the other ranks (`_TracedZero`).

Tracing: every all-gather and reduce-scatter FSDP issues is an `allreduce` span on the
comm thread, `phase` all-gather or reduce-scatter, with the unit, the pass (forward or
backward) and the bytes of the collective's buffer (`_TracedCollective`).
"""

from __future__ import annotations

import difflib
from time import perf_counter_ns

import torch
import torch.distributed as dist
from torch import nn

from ...errors import InputError
from ...strategies.fsdp.strategy import option
from ..entry import spec_location
from ..host_gather import full_tensors
from ..loop import StepHooks, train_steps
from ..trace import TIDS

KIND = "fsdp"  # the strategy.kind this module runs (opentikz_dt/plugins.py)
ROOT = "root"  # the unit name of what fully_shard(model) holds itself

# The c10d collectives FSDP2 calls (torch 2.13 renamed them; the old names warn there).
_ALL_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def roles(spec):
    return [("worker", w) for w in spec.topology.workers.ids]


# --- units -------------------------------------------------------------------------------
def default_units(model: nn.Module) -> list[str]:
    """Each child (with parameters) of the model when it is an nn.Sequential, else of its
    outermost nn.ModuleLists and nn.Sequentials: the block stacks of the built-in models
    (layers.i, blocks.i) and of most others (a GPT-2's transformer.h.i)."""
    containers = []
    for name, module in model.named_modules():
        if isinstance(module, (nn.ModuleList, nn.Sequential)) and not any(
                name == outer or name.startswith(f"{outer}.") for outer in containers if outer):
            containers.append(name)
            if name == "":
                break  # the model itself is the stack
    return [f"{name}.{child}" if name else child
            for name in containers for child, sub in model.get_submodule(name).named_children()
            if any(True for _ in sub.parameters())]


def unit_names(spec, model: nn.Module) -> list[str]:
    """The modules to shard one by one: strategy.units, else default_units."""
    asked = option(spec, "units")
    if not asked:
        return default_units(model)
    _check_units(spec, model)
    return list(asked)


def _check_units(spec, model: nn.Module) -> None:
    """InputError for a unit the spec names that is not a module of the model holding
    parameters, naming the closest module names (or the first ones)."""
    modules = [name for name, m in model.named_modules() if name and any(True for _ in m.parameters())]
    known = set(modules)
    for name in option(spec, "units") or ():
        if name not in known:
            close = difflib.get_close_matches(name, modules, n=3, cutoff=0.5)
            hint = f"closest: {', '.join(close)}" if close else f"it has: {', '.join(modules[:8])}" + (
                ", ..." if len(modules) > 8 else "")
            raise InputError(f"{spec_location(spec, ('strategy', 'units'))}: the model has no module {name!r} "
                             f"with parameters ({hint})")


# --- questions the launcher asks before spawning (runner/strategies/interface.py) -------------
def check_model(spec, model, names, where) -> None:
    """The units the spec names are modules of the built model (runner/preflight.py)."""
    _check_units(spec, model)


def sent(spec) -> str:
    # bf16/fp16 gather the parameters in that precision (the run's first line says fp32)
    return "gradients" if spec.training.precision in ("bf16", "fp16") else "parameters and gradients"


# --- tracing -----------------------------------------------------------------------------
class _StepState:
    """The step the train loop is in, and how often each unit was gathered in it: a
    unit's first all-gather of a step is its forward's, a second one its backward's
    (reshard_after_forward freed the parameters in between; a prefetch counts as the
    pass it prefetches for)."""

    def __init__(self, **span_args):
        self.step = 0
        self.gathers: dict[str, int] = {}
        self.span_args = span_args  # added to every span (a mesh names its dimension: dim=data)
        # the pass running now where the caller knows it (a mesh's pipeline stage runs several
        # microbatches' forwards before their backwards); None: count the gathers
        self.current: str | None = None

    def start(self, step: int) -> None:
        self.step = step
        self.gathers.clear()


class _TracedCollective:
    """One unit's all-gather or reduce-scatter (FSDP2's custom-comm protocol, `allocate`
    and `__call__`, set with FSDPModule.set_custom_all_gather / set_custom_reduce_scatter):
    calls the c10d collective FSDP itself calls, counts its bytes and records its span.

    Why here: FSDP2 offers no hook around its collectives, and a profiler trace would
    cost far more; this sees each real collective, for the unit that issued it.
    What is approximate: the span runs from the call to its return, or, for an
    asynchronous call, to its completion callback. On gloo (CPU) the calls block, so
    that is the collective's time. On a GPU (NCCL) a call returns once the collective is
    queued on FSDP's communication stream, so the span is its launch time, not its
    duration (marked `clock: launch`). Bytes: `bytes` is the collective's whole buffer
    (the gathered parameters, or the gradients before the reduce-scatter, in the dtype
    sent); sent and received count a ring's (N-1)/N of it each, as runner/comm.py does."""

    def __init__(self, ctx, unit: str, phase: str, state: _StepState):
        self.ctx, self.unit, self.phase, self.state = ctx, unit, phase, state
        self.launch_only = ctx.device.type == "cuda"

    def allocate(self, size, *, dtype, device):
        return torch.empty(*size, dtype=dtype, device=device)

    def _gathered(self) -> str:
        """The pass of this unit's all-gather (see _StepState)."""
        seen = self.state.gathers[self.unit] = self.state.gathers.get(self.unit, 0) + 1
        return self.state.current or ("forward" if seen == 1 else "backward")

    def _record(self, t0: int, work, nbytes: int, direction: str, n: int) -> None:
        moved = nbytes * (n - 1) // n
        self.ctx.metrics.add_bytes(sent=moved, recv=moved)
        tracer, step = self.ctx.tracer, self.state.step
        if not tracer.enabled_for(step):
            return
        args = {"algorithm": "fsdp", "phase": self.phase, "unit": self.unit, "pass": direction, "bytes": nbytes,
                **self.state.span_args}
        if self.launch_only:
            args["clock"] = "launch"
        record = tracer._record
        if work is None:
            record("allreduce", TIDS["comm"], t0, perf_counter_ns(), step, args)
            return

        def done(fut):
            record("allreduce", TIDS["comm"], t0, perf_counter_ns(), step, args)
            return fut.value()

        work.get_future().then(done)


class _TracedAllGather(_TracedCollective):
    def __call__(self, output_tensor, input_tensor, group, async_op: bool = False):
        t0 = perf_counter_ns()
        work = _ALL_GATHER(output_tensor, input_tensor, group=group, async_op=async_op)
        self._record(t0, work, output_tensor.numel() * output_tensor.element_size(), self._gathered(), group.size())
        return work


class _TracedReduceScatter(_TracedCollective):
    def __call__(self, output_tensor, input_tensor, group, op, async_op: bool = False):
        t0 = perf_counter_ns()
        work = _REDUCE_SCATTER(output_tensor, input_tensor, op=op, group=group, async_op=async_op)
        self._record(t0, work, input_tensor.numel() * input_tensor.element_size(), "backward", group.size())
        return work


# --- sharding ----------------------------------------------------------------------------
def _mixed_precision(precision: str):
    from torch.distributed.fsdp import MixedPrecisionPolicy

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    if dtype is None:
        return MixedPrecisionPolicy()
    return MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)


def shard_model(ctx, model: nn.Module, state: _StepState, mesh=None, units: list[str] | None = None) -> list[str]:
    """fully_shard each unit (innermost first), then the root, over `mesh` (default: all
    ranks; a hybrid mesh passes its data sub-mesh); returns the unit names. `units`:
    default unit_names (a mesh's pipeline stage passes the whole model's units it holds)."""
    from torch.distributed.device_mesh import init_device_mesh

    where = spec_location(ctx.spec, ("strategy",))
    units = unit_names(ctx.spec, model) if units is None else units
    mesh = mesh if mesh is not None else init_device_mesh(ctx.device.type, (ctx.world_size,))
    # ZeRO-2 keeps every unit gathered until its backward (resolve_defaults and the rules
    # make reshard_after_forward false for shard: gradients; said again here for the runner)
    reshard = bool(option(ctx.spec, "reshard_after_forward")) and option(ctx.spec, "shard") != "gradients"
    settings = {"mesh": mesh, "reshard_after_forward": reshard,
                "mp_policy": _mixed_precision(ctx.precision)}
    for name in sorted(units, key=lambda n: -n.count(".")):  # a unit inside another is sharded first
        _shard(ctx, model.get_submodule(name), name, settings, state, where)
    # The root keeps its parameters gathered from forward to backward whatever the spec
    # says: what it holds (embeddings, final norm, head) runs last in the forward and
    # first in the backward, so freeing it would only gather it again at once (FSDP's
    # own choice for the root when reshard_after_forward is left to it).
    _shard(ctx, model, ROOT, {**settings, "reshard_after_forward": False}, state, where)
    return units


def _shard(ctx, module: nn.Module, name: str, settings: dict, state: _StepState, where: str) -> None:
    from torch.distributed.fsdp import fully_shard

    try:
        fully_shard(module, **settings)
    except Exception as exc:  # FSDP's own reason, on one line
        text = str(exc).strip().splitlines()
        raise InputError(f"{where}: FSDP cannot shard {name!r}: {type(exc).__name__}: "
                         f"{text[0][:300] if text else ''}") from None
    if hasattr(module, "set_custom_all_gather"):  # FSDP2's custom collectives (torch 2.9 and later)
        module.set_custom_all_gather(_TracedAllGather(ctx, name, "all-gather", state))
        module.set_custom_reduce_scatter(_TracedReduceScatter(ctx, name, "reduce-scatter", state))


# --- local shards: the norm, checkpoints, the saved model -------------------------------------
class _LocalShard:
    """A sharded parameter as the Stepper's global norm reads it: `.grad` is this rank's
    shard of the gradient (a plain tensor), and `reduce_sq` sums the squares over ranks."""

    __slots__ = ("param",)

    def __init__(self, param):
        self.param = param

    @property
    def grad(self):
        g = self.param.grad
        return None if g is None else g.to_local()


def _local(value):
    """A state (dict, list, tensor) with every DTensor replaced by this rank's shard."""
    from torch.distributed.tensor import DTensor

    if isinstance(value, DTensor):
        return value.to_local().detach().clone()
    if isinstance(value, dict):
        return {k: _local(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_local(v) for v in value)
    return value


def _as_shard_of(value, param):
    """A saved local shard back as a DTensor laid out like `param` (scalars stay)."""
    from torch.distributed.tensor import DTensor

    if torch.is_tensor(value) and value.dim() > 0 and value.shape == param.to_local().shape:
        return DTensor.from_local(value.to(param.device), param.device_mesh, param.placements, run_check=False,
                                  shape=param.shape, stride=param.stride())
    return value


def _resume(ctx, model, opt) -> None:
    """After a restart, this rank's shards of the model and optimizer as it checkpointed them."""
    state = ctx.load_checkpoint()
    if not state:
        return
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(_as_shard_of(state["model"][name], p))
    saved = state["opt"]
    params = [p for group in opt.param_groups for p in group["params"]]
    saved["state"] = {i: {k: _as_shard_of(v, params[int(i)]) for k, v in s.items()}
                      for i, s in saved["state"].items()}
    opt.load_state_dict(saved)


def _full_state_dict(model, gather) -> dict:
    """The whole model's parameters (collective: every rank calls it, in the same order);
    `gather`: runner/host_gather.py's, through host memory on GPUs shared over gloo."""
    return {k: gather.full(v) for k, v in model.state_dict().items()}


# --- ZeRO-1: DDP and torch's ZeroRedundancyOptimizer ------------------------------------------
def _traced_zero(ctx, params, group=None, mixed: bool = False, steps: _StepState | None = None, **span_args):
    """torch's ZeroRedundancyOptimizer over the spec's optimizer, on `group` (default all
    ranks; a mesh passes a data group and span_args dim=data), whose parameter sync (each
    rank broadcasting the parameters it updated) records one `allreduce` span per source
    rank on the comm thread: algorithm zero, phase broadcast, `src` the source's rank in
    the group, `bytes` the size of what it sends. The broadcasts of one source are waited
    for before the next source's start (torch issues them all, then waits), so each span
    is that source's broadcasts; on gloo (CPU) that is their time.

    Each parameter's broadcast is torch's own (`_broadcast_params_from_rank` without
    bucket views: dist.broadcast of param.data, asynchronous), of its local tensor: a
    tensor-parallel slice is a DTensor, which c10d's broadcast does not take (no sharding
    rule), and the data group's ranks hold the same slice. The parameters are one group,
    so the assignment is torch's greedy one over them in model order (strategies/fsdp/
    strategy.py zero_owners); `mixed` (DTensors beside plain tensors) turns foreach off,
    as a foreach update cannot mix them. The spans' step: `steps`'s (a mesh's step state),
    else what the caller sets as `step_index`."""
    from torch.distributed.optim import ZeroRedundancyOptimizer

    from ..optim import optimizer_class

    cls, settings = optimizer_class(ctx.spec)
    group = group if group is not None else dist.group.WORLD

    class TracedZero(ZeroRedundancyOptimizer):
        step_index = 0

        def _sync_params(self):
            for src in range(self.world_size):
                sending = [_local_tensor(p.data) for part in self._partition_parameters()[src] for p in part["params"]]
                sent = sum(t.numel() * t.element_size() for t in sending)
                # the source sends its parameters (once, as a tree's root does), the others receive them
                ctx.metrics.add_bytes(sent=sent if src == self.rank else 0, recv=0 if src == self.rank else sent)
                root = dist.get_global_rank(group, src)
                step = steps.step if steps is not None else self.step_index
                with ctx.tracer.span("allreduce", tid="comm", step=step, algorithm="zero",
                                     phase="broadcast", src=src, bytes=sent, **span_args):
                    for handle in [dist.broadcast(t, src=root, group=group, async_op=True) for t in sending]:
                        handle.wait()

    return TracedZero(list(params), optimizer_class=cls, process_group=group, **settings,
                      **({"foreach": False} if mixed else {}))


def _local_tensor(value):
    return value.to_local() if hasattr(value, "to_local") else value


def _train_zero1(ctx) -> None:
    from torch.nn.parallel import DistributedDataParallel as DDP

    from .allreduce import _traced_allreduce_hook

    model = ctx.build_model()
    ddp = DDP(model, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None)
    opt = _traced_zero(ctx, model.parameters())
    state = ctx.load_checkpoint()
    if state:  # this rank's model and the optimizer state of the parameters it updates
        model.load_state_dict(state["model"])
        opt.optim.load_state_dict(state["opt"])
    # DDP's averaged gradients are the same on every rank: the norm needs no reduction
    stepper = ctx.stepper(opt, model.parameters())
    hook_state = {"step": 0}
    if ctx.spec.runtime.trace.get("enabled", True):
        ddp.register_comm_hook(hook_state, _traced_allreduce_hook(ctx))
    n = ctx.world_size
    moved = sum(p.numel() * p.element_size() for p in model.parameters()) * 2 * (n - 1) // n

    def at_step(step):  # the comm hook's and the broadcasts' spans name the step
        hook_state["step"] = opt.step_index = step

    def count_bytes(step):  # DDP averaged the gradients during backward: only their traffic is left
        ctx.metrics.add_bytes(sent=moved, recv=moved)

    train_steps(ctx, StepHooks(
        before_step=at_step,
        forward_backward=lambda step: ctx.forward_backward(ddp, step, ctx.rank),
        after_backward=count_bytes,
        stepper=stepper,  # the `optimizer` span: the local update and the broadcasts
        # the whole model and gradients; the optimizer state of this rank's parameters only
        memory_params=list(model.parameters()), memory_optimizer=opt.optim,
        checkpoint_state=lambda: {"model": model.state_dict(), "opt": opt.optim.state_dict()},
    ))
    if ctx.rank == 0:
        ctx.save_model(model.state_dict())


# --- training ----------------------------------------------------------------------------
def train(ctx) -> None:
    if option(ctx.spec, "shard") == "optimizer":
        _train_zero1(ctx)
        return
    model = ctx.build_model()
    state = _StepState()
    shard_model(ctx, model, state)
    opt = ctx.build_optimizer(model.parameters())  # over the shards: each rank updates its 1/N
    _resume(ctx, model, opt)
    params = list(model.parameters())

    def reduce_sq(sq):  # the clip's global norm: the squares of every rank's shards, summed
        ctx.comm.all_reduce(sq, group=ctx.group)
        return sq

    stepper = ctx.stepper(opt, params, norm_params=[_LocalShard(p) for p in params], reduce_sq=reduce_sq)

    def drop_grads():
        # The sharded parameters' gradients, by the list taken now. forward_backward zeroes
        # after the forward, when the root (not resharded after forward) has its gathered
        # parameters registered in place of the shards: model.zero_grad() would miss the
        # shards' gradients and FSDP would add the next step's to them.
        for p in params:
            p.grad = None

    train_steps(ctx, StepHooks(
        before_step=state.start,
        # FSDP's all-gathers and reduce-scatters run inside these (comm thread spans).
        forward_backward=lambda step: ctx.forward_backward(model, step, ctx.rank, zero_grad=drop_grads),
        stepper=stepper,
        # this rank's shards (runner/memory.py counts a DTensor's local part); the gathered
        # parameters autograd keeps for a unit's backward count as its activations
        memory_params=params, memory_optimizer=opt,
        checkpoint_state=lambda: {"model": _local(model.state_dict()), "opt": _local(opt.state_dict())},
    ))
    full = _full_state_dict(model, full_tensors(ctx))
    if ctx.rank == 0:
        ctx.save_model(full)
