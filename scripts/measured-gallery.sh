#!/usr/bin/env bash
# Regenerate docs/figures/measured-*.png from real runs of the examples (about 2 minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
png() { pdftoppm -png -r 150 -singlefile "$1" "docs/figures/$2"; }
for ex in ps-sync ps-async pipeline-1f1b allreduce-ring; do
  dtgen run "examples/$ex.yaml" --out "$work/runs/$ex" --force > /dev/null
  dtgen figure "$work/runs/$ex" -o "$work/fig/$ex" --format pdf > /dev/null
  for f in "$work/fig/$ex"/*.pdf; do
    name=$(basename "$f" .pdf)
    case "$ex:${name#measured-$ex-}" in  # the figures are named measured-<run>-<kind>, as the gallery's
      *:timeline|*:topology|ps-async:loss|ps-async:staleness) png "$f" "$name" ;;
    esac
  done
done
sed 's/count: 4/count: 3/; s/name: allreduce-ring/name: allreduce-ring-3/' examples/allreduce-ring.yaml > "$work/ar3.yaml"
dtgen run "$work/ar3.yaml" --out "$work/runs/allreduce-ring-3" --force > /dev/null
dtgen compare "$work/runs/ps-sync" "$work/runs/ps-async" "$work/runs/allreduce-ring-3" -o "$work/fig/compare" --format pdf > /dev/null
for f in "$work/fig/compare"/*.pdf; do png "$f" "measured-$(basename "$f" .pdf)"; done
ls docs/figures/measured-*.png
