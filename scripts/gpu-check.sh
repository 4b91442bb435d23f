#!/usr/bin/env bash
# One command for a GPU box, run once by a person who has one:
#   1. the `gpu`-marked tests (with a GPU per rank, fsdp, tensor and mesh against `single`,
#      whose measured differences go into the report);
#   2. every example (every strategy, and a user's own python model) for a few steps on the
#      GPU with `dtgen run --steps`: nothing is refused on one shared GPU (the final gather
#      and the pipelines' messages go through host memory, docs/gpu.md); an example whose
#      spec asks for the CPU runs there, anything else must run on cuda; each rank counts the
#      host reads its training loop makes (DTGEN_SYNC_AUDIT), reported per example;
#   3. the memory check: each example's measured memory per rank (the CUDA allocator's
#      peak, and parameters, gradients and optimizer state) against opentikz_dt/memory.py;
#   4. the GPU benchmark table (benchmarks/bench_gpu.py): dtgen `single` vs a plain PyTorch
#      loop at fp32, tf32, bf16 and bf16+compile, with the ratios; 4 ranks sharing one GPU
#      per strategy;
#   5. the device probe (`dtgen calibrate --device-probe`): the box's best bf16 matmul rate,
#      memory copy rate and NCCL bus bandwidth over its GPUs, against its datasheet preset.
# Writes ONE result file, benchmarks/results/gpu-check_<hardware>_<yyyy-mm>.md (hardware,
# versions, command, date, the tables; scripts/gpu_check_report.py), and each example's run
# folder under runs/gpu-check/. Needs no network and nothing but torch and dtgen's dependencies.
#
#   make gpu-check                                  # the project's .venv (make setup)
#   PYTHON=python3 bash scripts/gpu-check.sh        # the box's own torch, after pip install -e '.[run,dev]'
#   bash scripts/gpu-check.sh --dry-run             # no GPU needed: the harness on the CPU, two
#                                                   # examples, bench --smoke; the result file goes
#                                                   # to $OUT, never to benchmarks/results/
# STEPS (default 5; dry run 2) sets the examples' steps; PARALLEL (default 4; dry run 1) how many
# run at once; EXAMPLES (default every one; dry run single and pipeline-1f1b) which spec files;
# BENCH=0 leaves out the benchmark; OUT (default runs/gpu-check) the output folder; RESULTS
# (default benchmarks/results; dry run $OUT) where the result file goes.
set -uo pipefail
cd "$(dirname "$0")/.."
DRY=0
for arg in "$@"; do
  case "$arg" in
    --dry-run) DRY=1 ;;
    *) echo "gpu-check: unknown argument $arg (only --dry-run)" >&2; exit 2 ;;
  esac
done
if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
OUT=${OUT:-runs/gpu-check}
BENCH=${BENCH:-1}
if [ "$DRY" = 1 ]; then
  STEPS=${STEPS:-2}; PARALLEL=${PARALLEL:-1}; RESULTS=${RESULTS:-$OUT}
  EXAMPLES=${EXAMPLES:-examples/single.yaml examples/pipeline-1f1b.yaml}
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
  COMMAND="bash scripts/gpu-check.sh --dry-run"
else
  STEPS=${STEPS:-5}; PARALLEL=${PARALLEL:-4}; RESULTS=${RESULTS:-benchmarks/results}
  EXAMPLES=${EXAMPLES:-$(ls examples/*.yaml examples/*/spec.yaml)}
  COMMAND="make gpu-check"
fi
T0=$(date +%s)

# 0. a supported torch (that sees a GPU, unless a dry run), or nothing else is worth running
if ! DRY=$DRY "$PYTHON" - <<'PY'
import os, sys
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
if os.environ["DRY"] == "1":
    print(f"gpu-check: dry run on the CPU, torch {torch.__version__}: the harness only, no GPU numbers")
elif not torch.cuda.is_available():
    sys.exit(f"gpu-check: torch {torch.__version__} sees no CUDA GPU (torch.cuda.is_available() is False); "
             "--dry-run checks the harness on the CPU")
else:
    print(f"gpu-check: torch {torch.__version__}, CUDA {torch.version.cuda}, "
          f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}")
PY
then
  exit 2
fi
rm -rf "$OUT" && mkdir -p "$OUT/examples"
failures=0

# 1. the gpu-marked tests
if [ "$DRY" = 1 ]; then
  echo "== 1/5 gpu-marked tests: left out (dry run)"
else
  echo "== 1/5 gpu-marked tests"
  # -rP: the passed tests' printed lines (the sharded strategies' differences from `single`)
  "$PYTHON" -m pytest -q -rP -m gpu tests -p no:cacheprovider 2>&1 | tee "$OUT/pytest.log" | tail -n 15
fi

# 2. every example for $STEPS steps, $PARALLEL at a time (3. reads their run folders)
echo "== 2/5 every example for $STEPS steps"
run_example() {  # spec -> $OUT/examples/NAME.{out,status}
  local spec=$1 name
  name=$(basename "$(dirname "$spec")")-$(basename "$spec" .yaml)
  name=${name#examples-}
  # DTGEN_SYNC_AUDIT: each rank counts its host reads (docs/gpu.md); the report sums the loop's
  DTGEN_SYNC_AUDIT="$OUT/examples/$name.audit" \
    "$PYTHON" -m opentikz_dt run "$spec" --steps "$STEPS" --out "$OUT/examples/$name" --force \
    > "$OUT/examples/$name.out" 2>&1
  echo $? > "$OUT/examples/$name.status"
}
export -f run_example
export PYTHON STEPS OUT
printf '%s\n' $EXAMPLES | xargs -P "$PARALLEL" -I{} bash -c 'run_example "$@"' _ {}

# 4. the benchmark table (before the report, which includes it)
if [ "$BENCH" != 0 ]; then
  echo "== 4/5 benchmarks/bench_gpu.py"
  if [ "$DRY" = 1 ]; then
    "$PYTHON" benchmarks/bench_gpu.py --smoke --modes fp32 --strategies none --out "$OUT/bench.md" \
      > /dev/null || failures=$((failures + 1))
  else
    "$PYTHON" benchmarks/bench_gpu.py --out "$OUT/bench.md" || failures=$((failures + 1))
  fi
else
  echo "== 4/5 benchmarks/bench_gpu.py: left out (BENCH=0)"
fi

# 5. the device probe: this box's matmul, memory and NCCL rates against its datasheet
echo "== 5/5 dtgen calibrate --device-probe"
probe_ranks=""
[ "$DRY" = 1 ] && probe_ranks="--ranks 2"
"$PYTHON" -m opentikz_dt calibrate --device-probe $probe_ranks -o "$OUT/device-probe.json" > "$OUT/device-probe.out" 2>&1 \
  || { failures=$((failures + 1)); tail -5 "$OUT/device-probe.out"; }

# 3. the memory check, in the one result file
echo "== 3/5 memory per rank against the model; the result file"
dry_flag=""
[ "$DRY" = 1 ] && dry_flag="--dry-run"
report=$("$PYTHON" scripts/gpu_check_report.py --out "$OUT" --results "$RESULTS" --command "$COMMAND" \
  --steps "$STEPS" --seconds $(( $(date +%s) - T0 )) --failures "$failures" $dry_flag) || exit 1
path=${report% *}
failures=${report##* }
echo
cat "$path"
echo
echo "gpu-check: result in $path ($(( $(date +%s) - T0 )) s, $failures failure(s))"
[ "$failures" -eq 0 ]
