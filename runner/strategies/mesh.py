"""`mesh`: hybrid pipeline x data x tensor parallelism on a 3-D DeviceMesh (torchtitan's
2D and 3D, Megatron-LM's 3D).

One `init_device_mesh(device, (pipeline, data, tensor), mesh_dim_names=DIMS)` owns every
group (a degree of 1 is a dimension of size 1): rank r is stage r // (data x tensor),
replica r // tensor % data, column r % tensor (tensor innermost, so a tensor group is
consecutive ranks, inside one host; pipeline outermost, so a stage is one contiguous block
of ranks). The rest asks it for its sub-mesh by name, and composes the one-dimensional
strategies in torchtitan's order:

0. pipeline (degree above 1): the model cut into stages as kind pipeline cuts it
   (runner/split.py `stage_module`, parameter names as in the whole model); this rank
   keeps its stage. The transformer's tied embedding is held by the first and the last
   stage, whose gradients are summed over the (first, last) pair of each replica and
   column every step (kind pipeline's handling);
1. tensor: `tensor.split_model(stage, plan, mesh["tensor"])`, kind tensor's own split
   (parallelize_module with its colwise/rowwise plan, the planned modules this stage
   holds), over the column's ranks. A colwise/rowwise pair of the mlp that a stage
   boundary cuts stays split: the first stage sends its column slice of the activation
   to the same column of the next stage, whose rowwise layer takes it as its input slice;
2. data, as strategy.data_parallel says:
   - fsdp: `fsdp.shard_model(..., mesh=mesh["data"])`, FSDP2's fully_shard over the
     replicas, on top of the tensor split (its parameters become 2-D DTensors); with
     stages, the pipeline schedule tells FSDP which microbatch's backward is the last
     (torch's PipelineStage does for an FSDPModule), so each unit reduce-scatters once
     per step. `shard: gradients` (ZeRO-2) keeps each unit gathered from its forward to
     its backward (fsdp.shard_model: reshard_after_forward false); `shard: optimizer`
     (ZeRO-1) shards nothing with FSDP: the gradient slices are all-reduced as allreduce
     does, and torch's ZeroRedundancyOptimizer over the data group updates each rank's
     whole tensors (slices) and broadcasts them (fsdp._traced_zero);
   - allreduce: after each step's backward, every rank all-reduces its local gradients
     (its tensor slices and the replicated parameters of its stage) with the ranks of its
     data group, which hold the same slices of the other replicas (DDP's average, without
     DDP: DDP does not take DTensor parameters).
3. the stages, with pipeline above 1: `PipelineStage(part, index, stages x v, device,
   group=mesh["pipeline"].get_group())` for each virtual stage the rank holds (one, or
   under a multi-stage schedule v: kind pipeline's placement), all given to the class
   strategy.schedule names, over `strategy.microbatches` microbatches, as kind pipeline
   runs them.

The batch: each replica takes its own slice of the global batch (batch_size x data); its
tensor ranks share it (a tensor split needs the same input everywhere) and its stages pass
it along in microbatches (the first stage feeds the inputs, the last the targets; the
schedule scales the gradients by 1/microbatches). So the run is `single`'s on the global
batch (tests/test_runner_numerics.py).

Tracing: every collective is an `allreduce` span on the comm thread with `dim` besides
kind tensor's and fsdp's own arguments: the tensor group's all-reduces
(tensor._CollectiveTrace, dim tensor), FSDP's all-gathers and reduce-scatters or the data
group's gradient all-reduce (dim data), the tied embedding's sum (phase tied, dim
pipeline). The pipeline's sends and receives are kind pipeline's `send` / `recv` spans
(pipeline._StageTrace) with `dim: pipeline`, its compute `forward` / `backward` spans per
microbatch.

Clipping: the global norm counts each gradient value once: a rank counts a tensor on
every data or tensor dimension it is sharded on, and on the others only where its index
is 0 (one copy of each replica); the stages hold different parameters (all counted),
except the last stage's copy of a tied weight (not counted); then the squares are summed
over all ranks.

The saved model: each stage's parameters gathered whole (a collective over its data and
tensor groups) and saved by its replica 0, column 0 rank; runner/merge.py joins the
stages (the tied weight's two copies must be equal).
"""

from __future__ import annotations

import copy
from time import perf_counter_ns

import torch
import torch.distributed as dist
from torch import nn

from ...strategies.mesh.strategy import data_method, data_shard, degrees, groups, rank_of, shards_parameters
from ..host_gather import full_tensors
from ..loop import StepHooks, train_steps
from ..stage_host import stage_through_host_if_needed
from ..trace import TIDS
from . import collectives, fsdp, pipeline, tensor

KIND = "mesh"  # the strategy.kind this module runs (opentikz_dt/plugins.py)
DIMS = ("pipeline", "data", "tensor")  # the mesh's dimensions, outermost first


def roles(spec):
    return [("worker", w) for w in spec.topology.workers.ids]


def build_mesh(ctx):
    """The job's DeviceMesh: (pipeline, data, tensor), named; every group comes from it."""
    from torch.distributed.device_mesh import init_device_mesh

    d = degrees(ctx.spec)
    return init_device_mesh(ctx.device.type, tuple(d[dim] for dim in DIMS), mesh_dim_names=DIMS)


def train(ctx) -> None:
    from ..split import TIED, stage_module

    spec = ctx.spec
    mesh = build_mesh(ctx)
    pipe_mesh, data_mesh, tensor_mesh = mesh["pipeline"], mesh["data"], mesh["tensor"]
    stage_no, row, column = (m.get_local_rank() for m in (pipe_mesh, data_mesh, tensor_mesh))
    stages, rows, columns = (m.size() for m in (pipe_mesh, data_mesh, tensor_mesh))
    sharded = shards_parameters(spec)

    whole = ctx.build_model()
    # 0. pipeline: this rank's stages of the model (the whole model with one stage): one,
    # or under a multi-stage schedule v virtual stages (kind pipeline's rank_stages: r,
    # r+p, ... looped, or a V's r and 2p-1-r), held together as one module (_Held)
    kind = spec.training.model.get("kind", "mlp")
    layout = _StageLayout(spec, stage_no, stages)
    parts = [stage_module(whole, i, layout.total) for i in layout.indices] if stages > 1 else [whole]
    local_tie = _LocalTie.copy(parts, TIED.get(kind, ())) if layout.holds_both_ends else None
    model = parts[0] if len(parts) == 1 else _Held(parts)
    # 1. tensor: split every layer of the stage over the tensor group (kind tensor's plan and split)
    plan, reordered = {}, {}
    if columns > 1:
        plan, source = tensor.plan_of(spec, whole)
        held = dict(model.named_modules())
        plan = {name: style for name, style in plan.items() if name in held}
        whole_model = copy.deepcopy(model) if spec.training.model_kind == "python" else None
        reordered = tensor.split_model(model, plan, tensor_mesh)
        if whole_model is not None:  # (the spec rules refuse a python model in stages and columns)
            tensor._check_consistent(ctx, model, whole_model, source)
            del whole_model
    if stages > 1:
        from ..precision import autocast_forward

        for part in parts:
            autocast_forward(part, ctx.precision, ctx.device)  # a stage's forward, as kind pipeline's
    # 2. data: shard the split stage over the data group (FSDP2), or average its gradients
    state = fsdp._StepState(dim="data")
    if sharded and rows > 1:  # each virtual stage is its own FSDP root (PipelineStage tells it the last backward)
        for part in parts:
            units = None if stages == 1 else [u for u in fsdp.default_units(whole) if _holds(part, u)]
            fsdp.shard_model(ctx, part, state, mesh=data_mesh, units=units)
    del whole
    params = pipeline._unique_parameters(parts)  # with a V's tied copy, which `model` leaves out
    opt = _optimizer(ctx, params, data_mesh, state, mixed=columns > 1)
    local_opt = getattr(opt, "optim", opt)  # ZeRO-1: the state this rank holds, saves and restores
    tensor._resume(ctx, model, local_opt)  # kind tensor's: its DTensor slices (FSDP's shards of them) alike
    if local_tie is not None:
        local_tie.bind(parts)
    # the tied weight's pair on two ranks (the first and the last virtual stage's)
    tied_names = set(TIED.get(kind, ())) if stages > 1 and not layout.holds_both_ends else set()
    tied_copy = tied_names if layout.holds_last else set()  # counted once: on the first stage
    coords = {"data": row, "tensor": column}
    counted = [tensor._LocalGrad(p) for name, p in model.named_parameters()
               if name not in tied_copy and _counted_here(p, coords)]

    def reduce_sq(sq):
        dist.all_reduce(sq, group=ctx.group)  # every rank's counted squares (see the docstring)
        return sq

    stepper = ctx.stepper(opt, params, norm_params=counted, reduce_sq=reduce_sq)
    trace = tensor._CollectiveTrace(ctx, model, plan, workers=columns, dim="tensor")
    method = data_method(spec)
    mine = next(g for g in groups(spec, "data") if ctx.rank in g)
    average = None if sharded or rows == 1 else _GradientAverage(ctx, params, data_mesh.get_group(), method, mine)
    tied = _TiedSum(ctx, model, tied_names, stage_no, stages, pipe_mesh) if tied_names else local_tie

    def drop_grads():
        for p in params:  # fsdp.train's reason: the root's gathered parameters stand in for the shards
            p.grad = None

    if stages > 1:
        run = _PipelineStep(ctx, parts, layout, (row, rows), pipe_mesh, drop_grads, state)
    else:
        def run(step):
            return ctx.forward_backward(model, step, row, rows, zero_grad=drop_grads)

    def forward_backward(step):
        with trace(step):
            loss, samples = run(step)
        ctx.metrics.add_bytes(sent=trace.moved, recv=trace.moved)
        return loss, _share(samples, stage_no * columns + column, stages * columns)

    def sync_gradients(step):  # the data group's average, then the tied embedding's sum
        if average is not None:
            average(step)
        if tied is not None:
            tied(step)

    train_steps(ctx, StepHooks(
        before_step=state.start,
        forward_backward=forward_backward,
        after_backward=sync_gradients,
        stepper=stepper,
        memory_params=params, memory_optimizer=local_opt,
        checkpoint_state=lambda: {"model": tensor._local(model.state_dict()),
                                  "opt": tensor._local(local_opt.state_dict())},
    ))
    gathered = tensor.full_state_dict(model, reordered, full_tensors(ctx))  # collective: every rank of the stage gathers
    if row == 0 and column == 0:  # one copy per stage (runner/merge.py joins the stages)
        ctx.save_model(gathered)


def _optimizer(ctx, params, data_mesh, state, mixed: bool):
    """The spec's optimizer over the rank's parameters; ZeRO-1 (data_parallel fsdp, shard
    optimizer) over two or more replicas: ZeroRedundancyOptimizer over the data group."""
    if data_shard(ctx.spec) == "optimizer" and data_mesh.size() > 1:
        return fsdp._traced_zero(ctx, params, data_mesh.get_group(), mixed=mixed, steps=state, dim="data")
    return ctx.build_optimizer(_groups(params))


def _holds(model, name: str) -> bool:
    try:
        model.get_submodule(name)
    except AttributeError:
        return False
    return True


class _StageLayout:
    """Which virtual stages this pipeline rank holds under strategy.schedule (kind
    pipeline's placement: one per rank; looped r, r+p, ...; a V's r and 2p-1-r)."""

    def __init__(self, spec, stage_no: int, stages: int):
        from ...strategies.pipeline_schedules import SCHEDULES, rank_stages, stages_per_rank

        self.name = spec.strategy.schedule
        self.multi = stages > 1 and SCHEDULES[self.name].placement != "one"
        v = stages_per_rank(spec.strategy) if stages > 1 else 1
        self.total = stages * v
        self.indices = rank_stages(self.name, stage_no, stages, v) if stages > 1 else [0]
        self.holds_first, self.holds_last = 0 in self.indices, self.total - 1 in self.indices
        self.holds_both_ends = stages > 1 and self.holds_first and self.holds_last


class _Held(nn.Module):
    """A rank's virtual stages as one module for what sees the rank's parameters whole
    (the tensor split and its trace, the norm, checkpoints, the saved model): the parts'
    children merged under the whole model's names (their block dicts joined). Never run:
    each part runs as its own PipelineStage. A V's copy of the tied weight (its last part's)
    is left out: the first part's is the one saved and counted."""

    def __init__(self, parts):
        super().__init__()
        for part in parts:
            for name, child in part.named_children():
                if isinstance(child, nn.ModuleDict):
                    if name not in self._modules:
                        self.add_module(name, nn.ModuleDict())
                    self._modules[name].update(child)
                elif name not in self._modules:
                    self.add_module(name, child)


class _LocalTie:
    """A V's first pipeline rank holds the first and the last virtual stage: the last gets its
    own copy of the tied module (one Parameter under two PipelineStages ends off `single`:
    runner/strategies/pipeline.py _local_tie), and after the schedule the two gradients are
    summed into both, as two ranks' all-reduce would; the copies then stay equal."""

    def __init__(self, names):
        self.names, self.pairs = names, []

    @classmethod
    def copy(cls, parts, names):
        if not names:
            return None
        for module in {name.rsplit(".", 1)[0] for name in names}:
            setattr(parts[-1], module, copy.deepcopy(getattr(parts[0], module)))
        return cls(names)

    def bind(self, parts) -> None:
        """The pairs as they are after the tensor split and FSDP (which replace the
        Parameters); the copy set equal to the first's (a resumed run restores the first)."""
        a, b = dict(parts[0].named_parameters()), dict(parts[-1].named_parameters())
        self.pairs = [(a[n], b[n]) for n in self.names]
        with torch.no_grad():
            for p, q in self.pairs:
                _local_tensor(q).copy_(_local_tensor(p))

    def __call__(self, step: int) -> None:
        for p, q in self.pairs:
            if p.grad is None or q.grad is None:
                grad = p.grad if q.grad is None else q.grad
            else:
                grad = p.grad + q.grad
            if grad is not None:
                p.grad, q.grad = grad, grad.clone()


class _PipelineStep:
    """One step of this rank's pipeline stages: its replica's slice of the global batch in
    `strategy.microbatches` microbatches through torch's schedule over the pipeline group
    (kind pipeline's run: one PipelineStage per virtual stage, all given to the one
    schedule object; its spans with dim: pipeline, and chunk under a multi-stage
    schedule). Returns (loss, samples): the loss where the rank holds the last stage
    (None on the others), the replica's samples."""

    def __init__(self, ctx, parts, layout, replica: tuple[int, int], pipe_mesh, drop_grads, state):
        from torch.distributed.pipelining import PipelineStage

        from ..schedule_order import schedule_class

        spec = ctx.spec
        self.layout, (self.row, self.rows) = layout, replica
        self.ctx, self.drop_grads = ctx, drop_grads
        self.microbatches = spec.strategy.microbatches
        stage_through_host_if_needed(ctx)  # GPUs shared over gloo: the schedule's messages via host memory
        schedule_cls = schedule_class(layout.name)
        if schedule_cls is None:  # the spec was validated where torch has it; this rank's torch lacks it
            raise InputError(f"strategy.schedule: {pipeline._refused(layout.name)}")
        indices, total = layout.indices, layout.total
        group = pipe_mesh.get_group()
        torch_stages = [PipelineStage(part, i, total, ctx.device, group=group) for part, i in zip(parts, indices)]
        self.hooks = [pipeline._StageTrace(ctx, st, i, chunk=c if layout.multi else None, dim="pipeline")
                      for c, (st, i) in enumerate(zip(torch_stages, indices))]
        for st in torch_stages:
            _mark_passes(st, state)
        loss_fn = pipeline._stage_loss(ctx)
        self.schedule = (schedule_cls(torch_stages, self.microbatches, loss_fn=loss_fn) if layout.multi
                         else schedule_cls(torch_stages[0], self.microbatches, loss_fn=loss_fn))
        # the schedule talks to its neighbours itself: its traffic is counted as kind pipeline
        # counts it (a boundary between two stages of this rank moves nothing)
        self.boundaries = [pipeline._BoundaryBytes(part, first=i == 0 or (i - 1) in indices,
                                                   last=i == total - 1 or (i + 1) in indices)
                           for part, i in zip(parts, indices)]

    def __call__(self, step: int):
        ctx, layout = self.ctx, self.layout
        x, y = ctx.batch(step, self.row, self.rows)
        for hooks in self.hooks:
            hooks.step = step
        self.drop_grads()
        losses: list = []
        args = (x,) if layout.holds_first else ()
        kwargs = {"target": y, "losses": losses} if layout.holds_last else {}
        self.schedule.step(*args, **kwargs)
        loss = None
        if losses:  # the last stage's loss, read a step later (ctx.step_done)
            scale = ctx.scaler.scale if ctx.scaler is not None else 1.0
            loss = torch.stack([v.detach() for v in losses]).mean() / scale
        moved = sum(b.per_step(self.microbatches) for b in self.boundaries)
        ctx.metrics.add_bytes(sent=moved, recv=moved)
        return loss, len(x)


def _mark_passes(stage, state) -> None:
    """FSDP's all-gathers name the pass of the chunk they run in: a stage runs several
    microbatches' forwards before their backwards, so counting a unit's gathers (kind
    fsdp's way) would call the second forward's a backward's."""
    for method, name in (("forward_one_chunk", "forward"), ("backward_one_chunk", "backward"),
                         ("backward_weight_one_chunk", "backward")):
        original = getattr(stage, method, None)
        if not callable(original):
            continue

        def marked(*args, _original=original, _name=name, **kwargs):
            state.current = _name
            try:
                return _original(*args, **kwargs)
            finally:
                state.current = None

        setattr(stage, method, marked)


class _TiedSum:
    """The transformer's token embedding, held by the first and the last stage: after the
    backward, each pair of copies (the same replica and column on the two stages) sums
    its gradients, traced as an `allreduce` (phase tied, dim pipeline). Every rank creates
    every pair's group (with two stages: the pipeline group itself)."""

    def __init__(self, ctx, model, names, stage_no: int, stages: int, pipe_mesh):
        d = degrees(ctx.spec)
        if stages == 2:
            group = pipe_mesh.get_group()
        else:
            group = None
            for data_index in range(d["data"]):
                for column in range(d["tensor"]):
                    pair = [rank_of(ctx.spec, {"pipeline": s, "data": data_index, "tensor": column})
                            for s in (0, stages - 1)]
                    made = ctx.new_group(pair)
                    if ctx.rank in pair:
                        group = made
        held = dict(model.named_parameters())
        self.ctx, self.group = ctx, group
        self.tensors = [held[n] for n in names if n in held] if stage_no in (0, stages - 1) else []

    def __call__(self, step: int) -> None:
        if not self.tensors:
            return
        grads = [_local_tensor(t.grad) for t in self.tensors]
        nbytes = sum(g.numel() * g.element_size() for g in grads)
        with self.ctx.tracer.span("allreduce", tid="comm", step=step, algorithm="native", phase="tied", chunk=0,
                                  dim="pipeline", bytes=nbytes):
            for t in self.tensors:
                dist.all_reduce(_local_tensor(t.grad), group=self.group)


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
    """data_parallel allreduce, ring or tree: the data group's ranks hold the same slices of
    different replicas; one all-reduce of all their local gradients (one flat buffer),
    divided by the replicas, gives each the global batch's mean gradient. allreduce is
    gloo's own (one span); ring and tree are dtgen's (runner/strategies/collectives.py,
    traced hop by hop, as kind allreduce's), over the group's global ranks."""

    def __init__(self, ctx, params, group, method: str, ranks: list[int]):
        self.ctx, self.params, self.group, self.ranks = ctx, params, group, ranks
        self.rows = dist.get_world_size(group)
        self.reduce = {"ring": collectives.ring_all_reduce, "tree": collectives.tree_all_reduce}.get(method)

    def __call__(self, step: int) -> None:
        grads = [_local_tensor(p.grad) for p in self.params if p.grad is not None]
        flat = torch.cat([g.reshape(-1) for g in grads])
        nbytes = flat.numel() * flat.element_size()
        if self.reduce is not None:
            self.reduce(self.ctx, flat, self.ranks, step, payload=True, dim="data", **{"pass": "backward"})
        else:
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


def _share(samples: int, index: int, count: int) -> int:
    """This rank's share of its replica's samples: the replica's `count` ranks (its stages
    x columns; `index` this rank's among them) train one slice together (runner/merge.py
    sums the workers' samples), so each counts 1/count of it."""
    share, left = divmod(samples, count)
    return share + (left if index == 0 else 0)


# --- the runner's other questions (runner/strategies/interface.py) ------------------------

def data_parallel_width(spec, roles) -> int:
    return degrees(spec)["data"]  # the rows; a row's ranks share one slice


def check_model(spec, model, names: list[str], where: str) -> None:
    d = degrees(spec)
    if d["pipeline"] > 1:
        from ...strategies.pipeline_schedules import stages_per_rank
        from ..schedule_order import schedule_class
        from ..split import check_splittable

        if schedule_class(spec.strategy.schedule) is None:  # the oldest supported torch may lack a newer one
            raise InputError(f"{spec_location(spec, ('strategy', 'schedule'))}: "
                             f"{pipeline._refused(spec.strategy.schedule)}")
        check_splittable(model, d["pipeline"] * stages_per_rank(spec.strategy), where)
    if d["tensor"] > 1:
        plan, source = tensor.plan_of(spec, model)
        tensor.check_plan(plan, model, d["tensor"], source)
    if shards_parameters(spec):
        fsdp._check_units(spec, model)


def check_placement(placement, spec) -> str | None:
    """On GPUs shared over gloo a pipeline dimension's messages go through host memory
    (runner/stage_host.py, said in the run's first line), and the final gather too
    (runner/host_gather.py)."""
    from ..stage_host import COST

    return COST if placement.stage_through_host and degrees(spec)["pipeline"] > 1 else None


def sent(spec) -> str:
    if spec.training.precision != "fp32":
        return ""
    staged = ", activations and their gradients (pipeline stages)" if degrees(spec)["pipeline"] > 1 else ""
    return "partial sums of layer outputs (tensor groups) and gradients" + (
        " and parameters (data groups)" if data_method(spec) == "fsdp" else " (data groups)") + staged


def summary_variant(spec) -> str:
    d = degrees(spec)
    if d["pipeline"] > 1:
        return (f" ({d['pipeline']} pipeline x {d['data']} data x {d['tensor']} tensor, {data_method(spec)}, "
                f"{spec.strategy.microbatches} microbatches {spec.strategy.schedule})")
    return f" ({d['data']} data x {d['tensor']} tensor, {data_method(spec)})"
