#!/usr/bin/env bash
# One command for a GPU box, run once by a person who has one:
#   1. the `gpu`-marked tests (with a GPU per rank, fsdp, tensor and mesh against `single`,
#      whose measured differences go into the report);
#   2. every example (every strategy, and a user's own python model) for a few steps on the
#      GPU with `dtgen run --steps`: on one shared GPU, pipelines (gloo cannot send GPU
#      tensors point to point) and fsdp, tensor and mesh (their final gather crashed there)
#      are expected to be refused in one line, an example whose spec asks for the CPU runs
#      there, and anything else must run on cuda;
#   3. the GPU benchmark table (benchmarks/bench_gpu.py): dtgen `single` vs a plain PyTorch
#      loop at fp32, tf32, bf16 and bf16+compile; 4 ranks sharing one GPU per strategy.
# Needs no network and nothing but torch and dtgen's dependencies. Writes everything to
# runs/gpu-check/ (report.md: the tables for a benchmarks/results/ file; each example's run folder).
#
#   make gpu-check                                  # the project's .venv (make setup)
#   PYTHON=python3 bash scripts/gpu-check.sh        # the box's own torch, after pip install -e '.[run,dev]'
# STEPS (default 5) sets the examples' steps; PARALLEL (default 4) how many examples run at once;
# BENCH=0 leaves out step 3 (the benchmark, most of the time).
set -uo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
STEPS=${STEPS:-5}
PARALLEL=${PARALLEL:-4}
BENCH=${BENCH:-1}
OUT=runs/gpu-check
T0=$(date +%s)

# 0. a supported torch that sees a GPU, or nothing else is worth running
if ! "$PYTHON" - <<'EOF'
import sys
try:
    import torch
    from opentikz_dt.errors import DtgenError
    from opentikz_dt.runner.compat import check_torch
except ImportError as exc:
    sys.exit(f"gpu-check: {exc}: install dtgen with its runner first (pip install -e '.[run,dev]')")
try:
    check_torch()
except DtgenError as exc:
    sys.exit(f"gpu-check: {exc}")
if not torch.cuda.is_available():
    sys.exit(f"gpu-check: torch {torch.__version__} sees no CUDA GPU (torch.cuda.is_available() is False)")
print(f"gpu-check: torch {torch.__version__}, CUDA {torch.version.cuda}, "
      f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}")
EOF
then
  exit 2
fi
rm -rf "$OUT" && mkdir -p "$OUT/examples"
failures=0

# 1. the gpu-marked tests
echo "== 1/3 gpu-marked tests"
# -rP: the passed tests' printed lines (the sharded strategies' differences from `single`)
"$PYTHON" -m pytest -q -rP -m gpu tests 2>&1 | tee "$OUT/pytest.log" | tail -n 15
status=${PIPESTATUS[0]}
tests_line=$(grep -E "(passed|failed|skipped|error|no tests ran)" "$OUT/pytest.log" | tail -n 1)
differences=$(grep -E "max \|param - single's\|" "$OUT/pytest.log" | sed 's/^/    /')
[ "$status" -eq 0 ] || failures=$((failures + 1))

# 2. every example for $STEPS steps, $PARALLEL at a time
echo "== 2/3 every example for $STEPS steps on the GPU"
run_example() {  # spec -> $OUT/examples/NAME.{out,status}
  local spec=$1 name
  name=$(basename "$(dirname "$spec")")-$(basename "$spec" .yaml)
  name=${name#examples-}
  "$PYTHON" -m opentikz_dt run "$spec" --steps "$STEPS" --out "$OUT/examples/$name" --force \
    > "$OUT/examples/$name.out" 2>&1
  echo $? > "$OUT/examples/$name.status"
}
export -f run_example
export PYTHON STEPS OUT
ls examples/*.yaml examples/*/spec.yaml | xargs -P "$PARALLEL" -I{} bash -c 'run_example "$@"' _ {}
rows=""
for status_file in "$OUT"/examples/*.status; do
  name=$(basename "$status_file" .status)
  code=$(cat "$status_file")
  if [ "$code" -eq 0 ]; then
    row=$("$PYTHON" - "$OUT/examples/$name" <<'EOF'
import json, sys, yaml
d = sys.argv[1]
run = json.load(open(f"{d}/run.json"))
m = json.load(open(f"{d}/metrics.json"))
devices = sorted({r["device"] for r in run["ranks"]})
ok = all(str(x).startswith("cuda") for x in devices)
# an example that asks for the CPU itself (runtime.device: cpu) ran where it asked
pinned = yaml.safe_load(open(f"{d}/spec.yaml"))["runtime"]["device"] == "cpu"
result = "ok" if ok else "ok, on the CPU as its spec asks" if pinned else "FAILED: not on the GPU"
print(f"{result} | {run['world_size']} | {run['backend']} | "
      f"{', '.join(devices)} | {m['samples_per_s']:,.0f}")
EOF
)
    case "$row" in FAILED*) failures=$((failures + 1)) ;; esac
  else
    line=$(grep -m1 "^dtgen: error:" "$OUT/examples/$name.out" | sed 's/^dtgen: error: //; s/|/\//g')
    [ -n "$line" ] || line="exit status $code (see $OUT/examples/$name.out)"
    if [ "$code" -eq 1 ] && [[ "$line" == *"cannot share GPUs over gloo"* ]]; then  # refused before start: invalid input
      row="refused, as expected on one shared GPU: $line | – | – | – | –"
    else
      row="FAILED: $line | – | – | – | –"
      failures=$((failures + 1))
    fi
  fi
  rows+="| $name | $row |"$'\n'
done
examples_table="| example | result | ranks | backend | devices | samples/s |
|---|---|---:|---|---|---:|
$rows"
echo "$examples_table"

# 3. the benchmark table
if [ "$BENCH" != 0 ]; then
  echo "== 3/3 benchmarks/bench_gpu.py"
  "$PYTHON" benchmarks/bench_gpu.py --out "$OUT/bench.md" || failures=$((failures + 1))
else
  echo "== 3/3 benchmarks/bench_gpu.py: left out (BENCH=0)"
fi

{
  echo "## GPU box: \`make gpu-check\` ($(date -u '+%Y-%m-%d %H:%M UTC'), $(( $(date +%s) - T0 )) s)"
  echo
  echo "gpu-marked tests: ${tests_line:-no result}"
  echo
  if [ -n "$differences" ]; then
    echo "Sharded strategies against \`single\` on the GPU (same seed, data and steps):"
    echo
    echo "$differences"
    echo
  fi
  echo "Every example for $STEPS steps (\`dtgen run EXAMPLE --steps $STEPS\`):"
  echo
  echo "$examples_table"
  [ -f "$OUT/bench.md" ] && cat "$OUT/bench.md"
} > "$OUT/report.md"
echo
echo "gpu-check: report in $OUT/report.md ($(( $(date +%s) - T0 )) s, $failures failure(s))"
[ "$failures" -eq 0 ]
