"""`mesh`: hybrid data x tensor parallelism on a 2-D DeviceMesh (torchtitan's 2D).

One `init_device_mesh(device, (data, tensor), mesh_dim_names=("data", "tensor"))` owns
every group: rank r is row r // tensor, column r % tensor (tensor innermost, so a tensor
group is consecutive ranks, inside one host). The rest asks it for its sub-mesh by name,
and composes the two one-dimensional strategies in torchtitan's order:

1. tensor: `tensor.split_model(model, plan, mesh["tensor"])`, kind tensor's own split
   (parallelize_module with its colwise/rowwise plan), over the row's ranks;
2. data, as strategy.data_parallel says:
   - fsdp: `fsdp.shard_model(..., mesh=mesh["data"])`, FSDP2's fully_shard over the
     column's ranks, on top of the tensor split (its parameters become 2-D DTensors);
   - allreduce: after each backward, every rank all-reduces its local gradients (its
     tensor slices and the replicated parameters) with the ranks of its column, which
     hold the same slices of the other replicas (DDP's average, without DDP: DDP does not
     take DTensor parameters).

The batch: each row takes its own slice of the global batch (batch_size x data), the
ranks of a row share it (a tensor split needs the same input everywhere). So the run
is `single`'s on the global batch (tests/test_runner_numerics.py).

Tracing: every collective is an `allreduce` span on the comm thread with `dim` (data or
tensor) besides kind tensor's and fsdp's own arguments: the tensor group's all-reduces
(tensor._CollectiveTrace), FSDP's all-gathers and reduce-scatters over the data group,
or the data group's gradient all-reduce.

Clipping: the global norm counts each gradient value once: a rank counts a tensor on
every mesh dimension it is sharded on, and on the others only where its index is 0
(one copy of each replica), then the squares are summed over all ranks.
"""

from __future__ import annotations

import copy
import time
from time import perf_counter_ns

import torch
import torch.distributed as dist

from ...errors import InputError
from ...strategies.mesh import data_method, degrees
from ..trace import TIDS
from . import fsdp, tensor

KIND = "mesh"  # the strategy.kind this module runs (opentikz_dt/plugins.py)
DIMS = ("data", "tensor")  # the mesh's dimensions, outermost first


def roles(spec):
    return [("worker", w) for w in spec.topology.workers.ids]


def build_mesh(ctx):
    """The job's DeviceMesh: (data, tensor), named; every group comes from it."""
    from torch.distributed.device_mesh import init_device_mesh

    d = degrees(ctx.spec)
    return init_device_mesh(ctx.device.type, (d["data"], d["tensor"]), mesh_dim_names=DIMS)


def train(ctx) -> None:
    spec = ctx.spec
    mesh = build_mesh(ctx)
    data_mesh, tensor_mesh = mesh["data"], mesh["tensor"]
    row, column = data_mesh.get_local_rank(), tensor_mesh.get_local_rank()
    rows, columns = data_mesh.size(), tensor_mesh.size()
    sharded = data_method(spec) == "fsdp"

    model = ctx.build_model()
    # 1. tensor: split every layer over the row (kind tensor's plan and split)
    plan, reordered = {}, {}
    if columns > 1:
        plan, source = tensor.plan_of(spec, model)
        whole_model = copy.deepcopy(model) if spec.training.model_kind == "python" else None
        reordered = tensor.split_model(model, plan, tensor_mesh)
        if whole_model is not None:
            tensor._check_consistent(ctx, model, whole_model, source)
            del whole_model
    # 2. data: shard the split model over the column (FSDP2), or average its gradients
    state = fsdp._StepState(dim="data")
    if sharded and rows > 1:
        fsdp.shard_model(ctx, model, state, mesh=data_mesh)
    params = list(model.parameters())
    opt = ctx.build_optimizer(_groups(params))
    _resume(ctx, model, opt)
    coords = {"data": row, "tensor": column}
    counted = [tensor._LocalGrad(p) for p in params if _counted_here(p, coords)]

    def reduce_sq(sq):
        dist.all_reduce(sq, group=ctx.group)  # every rank's counted squares (see the docstring)
        return sq

    stepper = ctx.stepper(opt, params, norm_params=counted, reduce_sq=reduce_sq)
    trace = tensor._CollectiveTrace(ctx, model, plan, workers=columns, dim="tensor")
    average = None if sharded or rows == 1 else _GradientAverage(ctx, params, data_mesh.get_group())

    def drop_grads():
        for p in params:  # fsdp.train's reason: the root's gathered parameters stand in for the shards
            p.grad = None

    for step in range(ctx.start_step, ctx.steps):
        ctx.fault_check(step)
        state.start(step)
        t0 = time.perf_counter()
        with trace(step):
            loss, samples = ctx.forward_backward(model, step, row, rows, zero_grad=drop_grads)
        ctx.metrics.add_bytes(sent=trace.moved, recv=trace.moved)
        if average is not None:
            average(step)
        with ctx.tracer.span("optimizer", step=step) as span:
            stepper.step(step, span)
        ctx.record_memory(params, opt)
        ctx.metrics.step_done(step, loss.item(), _share(samples, column, columns), time.perf_counter() - t0)
        ctx.maybe_checkpoint(step, lambda: {"model": tensor._local(model.state_dict()),
                                            "opt": tensor._local(opt.state_dict())})
    whole = tensor.full_state_dict(model, reordered)  # collective: every rank gathers
    if ctx.rank == 0:
        ctx.save_model(whole)


def _groups(params) -> list[dict]:
    """Optimizer parameter groups, one per kind of tensor (plain, or DTensor on one mesh):
    a foreach update cannot mix them."""
    from torch.distributed.tensor import DTensor

    groups: dict = {}
    for p in params:
        key = (p.device_mesh, tuple(p.placements)) if isinstance(p, DTensor) else None
        groups.setdefault(key, []).append(p)
    return [{"params": group} for group in groups.values()]


def _counted_here(p, coords: dict) -> bool:
    """Whether this rank counts `p`'s local gradient in the global norm: on each mesh
    dimension the parameter is sharded on, every rank holds a different part; on the
    others the ranks hold copies, and only index 0 counts its copy."""
    from torch.distributed.tensor import DTensor

    split = set()
    if isinstance(p, DTensor):
        names = p.device_mesh.mesh_dim_names or ()
        # not replicated = split: FSDP's data dimension over a tensor split is a _StridedShard,
        # whose is_shard() says False (torch 2.13)
        split = {name for name, placement in zip(names, p.placements) if not placement.is_replicate()}
    return all(index == 0 for dim, index in coords.items() if dim not in split)


class _GradientAverage:
    """data_parallel: allreduce: the column's ranks hold the same slices of different
    replicas; one all-reduce of all their local gradients (one flat buffer), divided by
    the rows, gives each the global batch's mean gradient."""

    def __init__(self, ctx, params, group):
        self.ctx, self.params, self.group = ctx, params, group
        self.rows = dist.get_world_size(group)

    def __call__(self, step: int) -> None:
        grads = [_local_tensor(p.grad) for p in self.params if p.grad is not None]
        flat = torch.cat([g.reshape(-1) for g in grads])
        nbytes = flat.numel() * flat.element_size()
        t0 = perf_counter_ns()
        dist.all_reduce(flat, group=self.group)
        if self.ctx.tracer.enabled_for(step):
            self.ctx.tracer._record("allreduce", TIDS["comm"], t0, perf_counter_ns(), step,
                                    {"algorithm": "native", "phase": "all-reduce", "dim": "data", "bytes": nbytes,
                                     "pass": "backward"})
        moved = nbytes * 2 * (self.rows - 1) // self.rows
        self.ctx.metrics.add_bytes(sent=moved, recv=moved)
        flat.div_(self.rows)
        offset = 0
        for g in grads:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()


def _local_tensor(value):
    return value.to_local() if hasattr(value, "to_local") else value


def _share(samples: int, column: int, columns: int) -> int:
    """This rank's share of its row's samples: the row's ranks train one slice together
    (runner/merge.py sums the workers' samples), so each counts 1/columns of it."""
    share, left = divmod(samples, columns)
    return share + (left if column == 0 else 0)


def _resume(ctx, model, opt) -> None:
    """After a restart: this rank's checkpointed slices back into the parameters, and
    the optimizer's state laid out like its parameters."""
    from torch.distributed.tensor import DTensor

    state = ctx.load_checkpoint()
    if not state:
        return
    with torch.no_grad():
        for name, value in model.state_dict().items():
            (value.to_local() if isinstance(value, DTensor) else value).copy_(state["model"][name])
    params = [p for group in opt.param_groups for p in group["params"]]
    saved = state["opt"]
    saved["state"] = {i: {k: fsdp._as_shard_of(v, params[int(i)]) if isinstance(params[int(i)], DTensor) else v
                          for k, v in entry.items()} for i, entry in saved["state"].items()}
    opt.load_state_dict(saved)


# --- the runner's other questions (runner/strategies/_defaults.py) ------------------------

def data_parallel_width(spec, roles) -> int:
    return degrees(spec)["data"]  # the rows; a row's ranks share one slice


def check_model(spec, model, names: list[str], where: str) -> None:
    d = degrees(spec)
    if d["tensor"] > 1:
        plan, source = tensor.plan_of(spec, model)
        tensor.check_plan(plan, model, d["tensor"], source)
    if data_method(spec) == "fsdp":
        fsdp._check_units(spec, model)


def check_placement(placement) -> None:
    if placement.stage_through_host:
        raise InputError("strategy mesh has not been run on GPUs shared over gloo (its tensor and fsdp parts are "
                         "untested there): give each worker its own GPU (nccl) or set runtime.device: cpu")


def sent(spec) -> str:
    if spec.training.precision != "fp32":
        return ""
    return "partial sums of layer outputs (tensor groups) and gradients" + (
        " and parameters (data groups)" if data_method(spec) == "fsdp" else " (data groups)")


def summary_variant(spec) -> str:
    d = degrees(spec)
    return f" ({d['data']} data x {d['tensor']} tensor, {data_method(spec)})"
