"""The end-of-run summary table (plain text)."""

from __future__ import annotations

from ..lossfacts import FINAL_DEFINITION, final_loss
from .strategies import load_strategy


def render_summary(spec, roles, metrics: dict, run: dict, run_dir) -> str:
    strategy = load_strategy(spec.strategy.kind)
    rows = [("rank", "id", "role", "step time", "samples/s", "sent MB", "recv MB", "memory MB")]
    for rank, (role, ident) in enumerate(roles):
        b = metrics["bytes"].get(str(rank), {"sent": 0, "recv": 0})
        st = metrics["step_time_s"].get(ident)
        rate = metrics["per_worker_samples_per_s"].get(ident)
        rows.append((str(rank), ident, role, f"{st * 1000:.1f} ms" if st else "-",
                     f"{rate:,.0f}" if rate else "-", f"{b['sent'] / 1e6:.2f}", f"{b['recv'] / 1e6:.2f}",
                     memory_mb(metrics.get("memory", {}).get(str(rank)))))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.rjust(w) if i >= 3 else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    losses = [v for v in metrics["loss"] if v is not None]
    head = (f"{spec.name}: {spec.strategy.kind}{strategy.summary_variant(spec)}"
            + f", {run['world_size']} rank(s), {run['backend']} on {run['device']}, "
            + f"{metrics['steps_done']}/{metrics['steps']} steps")
    # the final loss as `dtgen compare`'s table defines it (opentikz_dt/lossfacts.py), and said
    # so: the last step's loss alone would differ from the table's by a step's noise
    tail = [f"loss {losses[0]:.4f} -> {final_loss(losses):.4f} ({FINAL_DEFINITION})" if losses else "loss -",
            f"throughput {metrics['samples_per_s']:,.0f} samples/s after a {metrics.get('warmup_s', 0):.1f} s warm-up step"]
    if metrics["staleness"]:
        s = metrics["staleness"]
        tail.append(f"staleness mean {sum(s) / len(s):.2f} max {max(s):g}")
    tail += strategy.summary_facts(spec, metrics)
    evaluated = metrics.get("eval")
    if evaluated:
        tail.append(f"eval loss {evaluated['loss']:.4f}" + (f" (perplexity {evaluated['perplexity']:.2f})"
                                                             if "perplexity" in evaluated else "")
                    + f" on {evaluated['samples']} held-out samples" if "loss" in evaluated
                    else f"eval failed: {evaluated.get('error')}")
    if run.get("attempts", 1) > 1:
        tail.append(f"{run['attempts']} attempts")
    return "\n".join([head] + lines + ["; ".join(tail), f"run directory: {run_dir}"] + divergence_warning(spec, metrics))


def memory_mb(memory: dict | None) -> str:
    """A rank's memory in MB: the CUDA allocator's peak where there is one, else the sum of
    the categories counted from the tensors (runner/memory.py); `-` when not measured."""
    if not memory:
        return "-"
    if memory.get("peak") is not None:
        return f"{memory['peak'] / 1e6:.2f}"
    return f"{sum(memory.get(c) or 0 for c in ('params', 'grads', 'optimizer', 'activations')) / 1e6:.2f}"


def divergence_warning(spec, metrics: dict) -> list:
    """One warning line when the loss diverged (opentikz_dt.lossfacts), with what the
    strategy knows of the cause (async updates on stale weights)."""
    from ..lossfacts import divergence

    why = divergence(metrics["loss"])
    if why is None:
        return []
    hint = load_strategy(spec.strategy.kind).divergence_hint(spec, metrics)
    return [f"dtgen: warning: the loss diverged: {why}" + (f"; {hint}" if hint else "")]
