"""`dtgen init`: a commented starter spec that editors can check as the user types.

The first line is the YAML language server's `$schema` comment, naming the schema by
its `$id` (a URL that stays the same wherever dtgen is installed, and that names no
machine path a committed spec would carry to other machines). Editors map that id to
the installed file (`dtgen init` says how, in the comment below it), then autocomplete
keys and flag errors as the user types.
"""

from __future__ import annotations

from pathlib import Path

from .errors import DtgenError
from .resources import spec_schema
from .spec import name_from_file, spec_from_data
from .strategies import plugin, strategy


def render_starter(kind: str, name: str | None = None) -> str:
    """The starter spec text for a strategy, named `name` (default my-KIND)."""
    name = name or f"my-{kind}"
    schema = spec_schema()["$id"]
    workers, servers = strategy(kind).default_workers, strategy(kind).servers[0]
    icons = spec_from_data({"strategy": {"kind": kind}}).data["figure"]["icons"]  # they follow the kind
    one_worker = strategy(kind).workers[1] == 1  # no straggler to slow down
    slowdown = "" if one_worker else "\n    slowdown: {}              # stragglers, e.g. {w3: 2.0} = w3 computes twice as slowly"
    return f"""\
# yaml-language-server: $schema={schema}
# (the schema ships with dtgen: python -c "import opentikz_dt.resources as r; print(r.schemas_dir())")
# dtgen experiment spec. Check it:   dtgen validate THIS_FILE
# Draw it:   dtgen figure THIS_FILE --format pdf      Run it:   dtgen run THIS_FILE
# Every key below is optional except strategy.kind; the values shown are the defaults,
# and a commented-out line is an example of a key left unset.
name: {name:<23} # lowercase letters, digits, dashes; names output files
title: My {kind.replace('-', ' ')} experiment

topology:
  data: {{label: Training data}}
  workers:
    count: {workers}                  # w1..wN, one process each
    label: "Worker {{i}}"         # {{i}} = 1-based index{slowdown}
  servers: {{count: {servers}}}         # parameter-server shards ps / ps1..psS (0: none)
  hosts: 1                      # machines; workers spread evenly over them

{plugin(kind).starter_block(kind)}

training:
  model: {{kind: mlp, layers: [32, 128, 128, 10]}}   # input width first, classes last
  dataset: {{kind: synthetic, samples: 16384, seed: 0}}
  batch_size: 256               # per worker per step
  steps: 200
  optimizer: {{kind: sgd, lr: 0.05}}   # sgd: momentum 0.9 by default; or adam / adamw with betas, eps, weight_decay
  # lr_schedule: {{kind: cosine, warmup_steps: 20, min_lr: 0.005}}   # constant | cosine | linear
  # grad_clip: 1.0              # max global gradient norm
  precision: fp32               # fp32 | tf32 | bf16 | fp16 (GPU); bf16 runs on the CPU too
  seed: 0

runtime: {{backend: auto, device: auto, timeout_s: 120}}   # auto: NCCL on GPUs, else gloo on CPU

figure:
  palette: light                # light | dark
  # colsep: 4.6                 # cm between data, workers and server (unset: 4.6, or what the labels need)
  # rowsep: 2.5                 # cm between workers (unset: 2.5, or what the labels need)
  # Single quotes for TeX: in double quotes "\\nabla" would become a newline.
  labels: {{batch: batch, grad: '$\\nabla\\theta$', weight: '$\\theta$'}}
  colors: {{data: otgray, grad: otpurple, weight: otteal}}   # palette names only
  icons: {{data: {icons['data']}, worker: {icons['worker']}, server: {icons['server']}}}
"""


def write_starter(kind: str, path: Path | None, force: bool = False) -> str:
    """Render the starter; write it to `path` unless None. Refuses to overwrite without force."""
    text = render_starter(kind, name_from_file(path) if path is not None else None)  # exp.yaml: exp
    if path is not None:
        if path.exists() and not force:
            raise DtgenError(f"{path} exists; use --force to overwrite it")
        if path.is_dir():
            raise DtgenError(f"{path} is a directory")
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    return text
