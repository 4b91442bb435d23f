"""dtgen on one GPU against a plain PyTorch loop; 4 ranks sharing one GPU per strategy.

    python benchmarks/bench_gpu.py                 # on a GPU box (scripts/gpu-check.sh runs it)
    OMP_NUM_THREADS=1 python benchmarks/bench_gpu.py --smoke   # CPU, tiny model: the harness only

Part 1, one GPU: the built-in transformer at GPT-2-small size (12 blocks, d_model 768, 12
heads, seq_len 512, vocab 8192: about 92 M parameters), batch 16, SGD with momentum,
synthetic tokens, at fp32, tf32, bf16 and bf16 with torch.compile:
  - plain: a hand-written loop on the same nn.Module (opentikz_dt.runner.model.Transformer)
    in one process: the token table on the GPU, autocast for forward and loss, the
    losses kept on the device and read once at the end (no per-step wait for the GPU:
    the fastest a user's own loop gets; the window's two ends synchronise, so it holds
    finished GPU work); dtgen reads each loss a step later (runner/step_losses.py);
  - dtgen: `dtgen run` of a `single` spec with the same model, batch, optimizer and steps,
    `training.precision` / `training.compile` set for the mode; its samples/s from the
    run's metrics.json step end times.
Both rates use the same window: from the end of step --warmup to the last step (the first
steps pay for allocation, cuDNN/cuBLAS autotuning and compilation). A mode whose spec
this dtgen refuses is "not run" on the dtgen side with the refusal, never estimated
(every mode validates since `training.precision` and `training.compile` exist; a device
that cannot do a mode gets `dtgen run`'s one-line refusal instead). fp16 is not a mode
here: it needs a GPU and a gradient scaler, and bf16 is what an H100 trains in.
Part 2, 4 ranks sharing one GPU (gloo, tensors staged through host memory): `dtgen run` of
every strategy at fp32 on a smaller transformer (--shared-model; gpt2 for the part-1 model),
samples/s from metrics.json. Strategies that cannot share a GPU are listed with the
one-line refusal `dtgen run` printed.

Needs no network and nothing but torch and dtgen. Prints markdown tables for a result file,
benchmarks/results/gpu_<hardware>_<yyyy-mm>.md (and writes them to --out when given). --smoke: CPU, a tiny transformer, 2 steps, fp32 and
bf16 (autocast on the CPU, as CI tests bf16) and one shared strategy unless --modes /
--strategies say otherwise: checks the harness, not speed (tests/test_bench_gpu.py runs it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

MODES = ("fp32", "tf32", "bf16", "bf16+compile")
GOAL = 0.97  # dtgen `single` / the plain loop, at every mode
# mode -> the spec keys that ask dtgen for it (names agreed with the training engineer)
MODE_KEYS = {"fp32": {}, "tf32": {"precision": "tf32"}, "bf16": {"precision": "bf16"},
             "bf16+compile": {"precision": "bf16", "compile": True}}
MODELS = {
    "gpt2": {"kind": "transformer", "layers": 12, "d_model": 768, "heads": 12, "seq_len": 512, "vocab": 8192},
    "medium": {"kind": "transformer", "layers": 6, "d_model": 512, "heads": 8, "seq_len": 256, "vocab": 8192},
    "tiny": {"kind": "transformer", "layers": 2, "d_model": 32, "heads": 2, "seq_len": 16, "vocab": 64},
}
# Part 2: 4 ranks each (workers + servers), as `dtgen run` would place them on one GPU.
SHARED = {
    "allreduce-native": {"topology": {"workers": {"count": 4}}, "strategy": {"kind": "allreduce"}},
    "allreduce-ring": {"topology": {"workers": {"count": 4}}, "strategy": {"kind": "allreduce", "algorithm": "ring"}},
    "allreduce-tree": {"topology": {"workers": {"count": 4}}, "strategy": {"kind": "allreduce", "algorithm": "tree"}},
    "allreduce-hierarchical": {"topology": {"workers": {"count": 4}, "hosts": 2},
                               "strategy": {"kind": "allreduce", "algorithm": "hierarchical"}},
    "parameter-server sync": {"topology": {"workers": {"count": 3}, "servers": {"count": 1}},
                              "strategy": {"kind": "parameter-server", "sync": "sync"}},
    "parameter-server async": {"topology": {"workers": {"count": 3}, "servers": {"count": 1}},
                               "strategy": {"kind": "parameter-server", "sync": "async"}},
    "central-storage": {"topology": {"workers": {"count": 3}}, "strategy": {"kind": "central-storage"}},
    "gossip": {"topology": {"workers": {"count": 4}}, "strategy": {"kind": "gossip", "peers": 2}},
    "pipeline gpipe": {"topology": {"workers": {"count": 4}},
                       "strategy": {"kind": "pipeline", "schedule": "gpipe", "microbatches": 4}},
}


# ---------------------------------------------------------------- the plain loop


def plain_loop(model_cfg: dict, mode: str, batch: int, steps: int, warmup: int, device: str) -> dict:
    """The hand-written baseline, in this process: samples/s over steps warmup+1 .. steps-1."""
    import contextlib

    import torch
    from torch.nn import functional as F

    from opentikz_dt.runner.model import Transformer

    dev = torch.device(device)
    torch.manual_seed(0)
    torch.set_float32_matmul_precision("high" if mode == "tf32" else "highest")
    cfg = {k: v for k, v in model_cfg.items() if k != "kind"}
    model = Transformer(cfg["layers"], cfg["d_model"], cfg["heads"], cfg["seq_len"], cfg["vocab"]).to(dev)
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    forward = torch.compile(model) if mode.endswith("+compile") else model
    autocast = (lambda: torch.autocast(dev.type, dtype=torch.bfloat16)) if mode.startswith("bf16") \
        else contextlib.nullcontext
    gen = torch.Generator().manual_seed(0)
    samples = max(1024, 4 * batch)
    tokens = torch.randint(cfg["vocab"], (samples, cfg["seq_len"] + 1), generator=gen).to(dev)
    ends, losses = [], []
    w = max(0, min(warmup, steps - 2))  # the step whose end opens the measured window
    for step in range(steps):
        idx = torch.randint(0, samples, (batch,), generator=gen).to(dev)
        x, y = tokens[idx, :-1], tokens[idx, 1:]
        with autocast():
            logits = forward(x)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.detach())  # kept on the device: no step waits for the GPU
        if dev.type == "cuda" and step in (w, steps - 1):
            torch.cuda.synchronize(dev)  # the window opens and closes on finished GPU work
        ends.append(time.perf_counter())
    torch.stack(losses).tolist()  # the losses read once, at the end
    torch.set_float32_matmul_precision("highest")
    return {"samples_per_s": rate(ends, batch, warmup), "params": params}


def rate(ends: list, batch: int, warmup: int) -> float:
    """Samples/s from step end times, from the end of step `warmup` to the last step."""
    w = max(0, min(warmup, len(ends) - 2))
    span = ends[-1] - ends[w]
    return batch * (len(ends) - 1 - w) / span if span > 0 else 0.0


def _plain_worker(args) -> None:
    """`--plain-worker MODE`: one plain measurement in a fresh process (clean CUDA state)."""
    out = plain_loop(json.loads(args.model_json), args.plain_worker, args.batch, args.steps, args.warmup, args.device)
    print(json.dumps(out), flush=True)


def run_plain(model_cfg, mode, batch, steps, warmup, device, env) -> dict:
    cmd = [sys.executable, __file__, "--plain-worker", mode, "--model-json", json.dumps(model_cfg),
           "--batch", str(batch), "--steps", str(steps), "--warmup", str(warmup), "--device", device]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        return {"error": "plain loop: " + (_last_line(done.stderr) or f"exit status {done.returncode}")}
    return json.loads(done.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- dtgen runs


def spec_data(name: str, model_cfg: dict, batch: int, steps: int, device: str, extra_training=None,
              layout=None) -> dict:
    data = {"name": name, "strategy": {"kind": "single"},
            "training": {"model": dict(model_cfg), "dataset": {"kind": "synthetic", "samples": max(1024, 4 * batch)},
                         "batch_size": batch, "steps": steps, "optimizer": {"lr": 0.05, "momentum": 0.9},
                         **(extra_training or {})},
            # long enough for a first step that compiles; a hang still ends the run
            "runtime": {"device": device, "timeout_s": 600}}
    for key, value in (layout or {}).items():
        data[key] = value
    return data


def refused_keys(data: dict) -> str | None:
    """None when this dtgen accepts the spec, else its first validation line."""
    from opentikz_dt.errors import DtgenError
    from opentikz_dt.spec import spec_from_data

    try:
        spec_from_data(data)
    except DtgenError as exc:
        return str(exc).splitlines()[0]
    return None


def run_dtgen(data: dict, work: Path, warmup: int, env) -> dict:
    """`dtgen run` of the spec; its samples/s (same window as the plain loop) or its one-line error."""
    spec_path = work / f"{data['name']}.yaml"
    spec_path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    out = work / data["name"]
    cmd = [sys.executable, "-m", "opentikz_dt", "run", str(spec_path), "--out", str(out), "--force"]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        return {"error": "dtgen run: " + (_error_line(done.stderr) or f"exit status {done.returncode}")}
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    run = json.loads((out / "run.json").read_text(encoding="utf-8"))
    if data["strategy"]["kind"] == "single":  # the plain loop's window, from the same per-step end times
        samples = rate([t for t in metrics["wall_s"] if t is not None], data["training"]["batch_size"], warmup)
    else:  # the runner's own steady-state rate (after the first step), every worker's samples
        samples = metrics["samples_per_s"]
    return {"samples_per_s": samples, "ranks": run["world_size"], "backend": run["backend"], "device": run["device"]}


def _error_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.startswith("dtgen: error:")]
    return lines[0][len("dtgen: error:"):].strip() if lines else _last_line(stderr)


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1].strip() if lines else ""


# ---------------------------------------------------------------- the tables


def _fmt(value) -> str:
    return f"{value:,.1f}" if isinstance(value, (int, float)) else str(value)


def _cell(result) -> str:
    """A rate, or why there is none: 'not run: ...' (this dtgen lacks the keys, or the
    device lacks the mode) or the one-line error `dtgen run` printed."""
    if result is None:
        return "not run"
    if "error" in result:
        return result["error"].replace("|", "/")
    return _fmt(result["samples_per_s"])


def one_gpu_table(rows: dict, header: str) -> list[str]:
    lines = [header, "", "| precision | plain loop samples/s | dtgen `single` samples/s | dtgen / plain |",
             "|---|---:|---:|---:|"]
    for mode, (plain, ours) in rows.items():
        ok = plain and ours and "samples_per_s" in plain and "samples_per_s" in ours and plain["samples_per_s"] > 0
        ratio = f"{ours['samples_per_s'] / plain['samples_per_s']:.2f}x" if ok else "–"
        lines.append(f"| {mode} | {_cell(plain)} | {_cell(ours)} | {ratio} |")
    measured = {mode: ours["samples_per_s"] / plain["samples_per_s"] for mode, (plain, ours) in rows.items()
                if plain and ours and plain.get("samples_per_s") and "samples_per_s" in ours}
    if measured:
        below = [f"{mode} {r:.2f}x" for mode, r in measured.items() if r < GOAL]
        lines += ["", f"goal dtgen / plain >= {GOAL:.2f}x: " + (f"not met at {', '.join(below)}" if below else
                                                                 f"met at {', '.join(measured)}")]
    fp32, bf16 = rows.get("fp32", (None, None))[1], rows.get("bf16", (None, None))[1]
    if fp32 and bf16 and "samples_per_s" in fp32 and "samples_per_s" in bf16 and fp32["samples_per_s"] > 0:
        lines += ["", f"dtgen bf16 / dtgen fp32: {bf16['samples_per_s'] / fp32['samples_per_s']:.2f}x"]
    return lines


def shared_table(rows: dict, header: str) -> list[str]:
    lines = [header, "", "| strategy | ranks | samples/s |", "|---|---:|---:|"]
    for name, result in rows.items():
        lines.append(f"| {name} | {result.get('ranks', '–')} | {_cell(result)} |")
    return lines


def device_line(device: str) -> str:
    import torch

    if device == "cuda":
        name = torch.cuda.get_device_name(0)
        return f"{name}, torch {torch.__version__}, CUDA {torch.version.cuda}, Python {platform.python_version()}"
    from opentikz_dt.predict.calibration import cpu_model

    return f"CPU ({cpu_model()}), torch {torch.__version__}, Python {platform.python_version()}"


# ---------------------------------------------------------------- main


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="CPU, tiny model, 2 steps: check the harness")
    ap.add_argument("--modes", help=f"comma-separated, of {', '.join(MODES)} (default all; --smoke: fp32,bf16)")
    ap.add_argument("--strategies", help="comma-separated part-2 strategies, 'none' to skip (default all; "
                                         "--smoke: allreduce-native)")
    ap.add_argument("--steps", type=int, help="part-1 steps (default 30; --smoke 2)")
    ap.add_argument("--warmup", type=int, help="steps left out of part 1's rate (default 3; --smoke 0)")
    ap.add_argument("--batch", type=int, help="part-1 batch (default 16; --smoke 4)")
    ap.add_argument("--shared-model", choices=sorted(MODELS), help="part-2 model (default medium; --smoke tiny)")
    ap.add_argument("--shared-steps", type=int, help="part-2 steps (default 6; --smoke 2)")
    ap.add_argument("--out", type=Path, help="also write the tables to this markdown file")
    # internal: one plain measurement in a fresh process
    ap.add_argument("--plain-worker", help=argparse.SUPPRESS)
    ap.add_argument("--model-json", help=argparse.SUPPRESS)
    ap.add_argument("--device", default="cuda", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.plain_worker:
        _plain_worker(args)
        return 0
    smoke = args.smoke
    # bf16 autocasts on the CPU too (cheap on the tiny model); tf32 and compile are GPU matters
    modes = (args.modes or ("fp32,bf16" if smoke else ",".join(MODES))).split(",")
    unknown = [m for m in modes if m not in MODES]
    strategies = (args.strategies or ("allreduce-native" if smoke else ",".join(SHARED))).split(",")
    strategies = [] if strategies == ["none"] else strategies
    unknown += [s for s in strategies if s not in SHARED]
    if unknown:
        print(f"bench_gpu.py: unknown mode or strategy: {', '.join(unknown)}", file=sys.stderr)
        return 2
    steps = args.steps or (2 if smoke else 30)
    warmup = args.warmup if args.warmup is not None else (0 if smoke else 3)
    batch = args.batch or (4 if smoke else 16)
    model = MODELS["tiny" if smoke else "gpt2"]
    shared_model = MODELS[args.shared_model or ("tiny" if smoke else "medium")]
    shared_steps = args.shared_steps or (2 if smoke else 6)
    device = "cpu" if smoke else "cuda"
    env = dict(os.environ)
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print("bench_gpu.py: no CUDA GPU here (torch.cuda.is_available() is False); "
                  "--smoke checks the harness on the CPU", file=sys.stderr)
            return 2
        # one GPU for everything: the first visible one, so 4 ranks share it
        first = env.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0] or "0"
        env["CUDA_VISIBLE_DEVICES"] = first
    else:
        env.setdefault("OMP_NUM_THREADS", "1")
    start = time.monotonic()
    head = [f"Device: {device_line(device)}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", ""]
    shape = ", ".join(f"{k} {v}" for k, v in model.items() if k != "kind")
    rows: dict = {}
    shared: dict = {}
    params = None

    def tables() -> list[str]:
        from opentikz_dt.workload import human_count

        size = f", {human_count(params)} parameters" if params else ""
        out = one_gpu_table(rows, f"One {'GPU' if device == 'cuda' else 'CPU process'}: transformer ({shape}{size}), "
                                  f"batch {batch}, SGD (momentum 0.9), {steps} steps, rate after step {warmup}")
        if shared:
            sshape = ", ".join(f"{k} {v}" for k, v in shared_model.items() if k != "kind")
            where = "one GPU (gloo, tensors staged through host memory)" if device == "cuda" else "the CPU (gloo)"
            out += [""] + shared_table(shared, f"4 ranks sharing {where}: transformer ({sshape}), fp32, "
                                               f"batch {max(1, batch // 4)} per worker (pipeline: {batch} in 4 "
                                               f"microbatches), {shared_steps} steps, rate after the first step")
        return out

    def save_so_far() -> None:
        """--out holds what is measured so far: a benchmark stopped at a time limit leaves it."""
        if args.out:
            done = len(rows) + len(shared)
            args.out.write_text("\n".join(head + tables() + ["", f"Incomplete: {done} of "
                                f"{len(modes) + len(strategies)} measurements after {time.monotonic() - start:.0f} s "
                                "(still running, or stopped there)"]) + "\n", encoding="utf-8")

    with tempfile.TemporaryDirectory(prefix="dtgen-bench-gpu-") as tmp:
        work = Path(tmp)
        for mode in modes:
            if mode == "tf32" and device == "cpu":
                rows[mode] = ({"error": "not run: TF32 is a GPU mode"}, {"error": "not run: TF32 is a GPU mode"})
                continue
            plain = run_plain(model, mode, batch, steps, warmup, device, env)
            params = plain.get("params", params)
            data = spec_data(f"bench-single-{mode.replace('+', '-')}", model, batch, steps, device, MODE_KEYS[mode])
            why = refused_keys(data)
            if why:  # an older dtgen without the keys, or a mode it refuses: say which, never estimate
                ours = {"error": f"not run: {why}"}
            else:
                ours = run_dtgen(data, work, warmup, env)
            rows[mode] = (plain, ours)
            print(f"  part 1 {mode}: plain {_cell(plain)}, dtgen {_cell(ours)} ({time.monotonic() - start:.0f} s)",
                  file=sys.stderr, flush=True)
            save_so_far()
        for name in strategies:
            over = SHARED[name]
            per_worker = max(1, batch // 4) if over["strategy"]["kind"] != "pipeline" else batch
            data = spec_data(f"bench-shared-{name.replace(' ', '-')}", shared_model, per_worker, shared_steps, device,
                             layout={"topology": over["topology"], "strategy": over["strategy"]})
            why = refused_keys(data)
            shared[name] = {"error": f"not run: {why}"} if why else run_dtgen(data, work, 0, env)
            print(f"  part 2 {name}: {_cell(shared[name])} ({time.monotonic() - start:.0f} s)", file=sys.stderr,
                  flush=True)
            save_so_far()
    text = "\n".join(head + tables() + ["", f"Total time: {time.monotonic() - start:.0f} s"]) + "\n"
    print(text, end="")
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
