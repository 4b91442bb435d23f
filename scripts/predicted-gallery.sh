#!/usr/bin/env bash
# Regenerate the predicted figures of docs/figures/ (docs/predict.md, docs/planning.md, the
# README) with the commands those pages show: the all-reduce scaling sweep, the mesh shapes
# of 64 workers (illustrative costs) and GPT-3 175B's shapes on 1,024 A100s (datasheets).
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
dtgen predict examples/allreduce-ring.yaml --sweep workers=2,4,...,1024 \
  --set strategy.algorithm=ring,tree,native --link 10gbit --steps 100 --format png -o "$work/scaling" >/dev/null
cp "$work/scaling/predicted-scaling.png" docs/figures/predicted-allreduce-scaling.png
dtgen predict examples/fsdp-tensor.yaml --sweep shapes --workers 64 --set training.model.layers=8 \
  --set training.batch_size=32 --set strategy.microbatches=8 --steps 20 --format png -o "$work/mesh" >/dev/null
cp "$work/mesh/predicted-shapes.png" docs/figures/predicted-mesh-shapes.png
dtgen predict examples/planning/gpt3-175b-a100.yaml --sweep shapes --format png -o "$work/gpt3" >/dev/null
cp "$work/gpt3/predicted-shapes.png" docs/figures/predicted-gpt3-175b-shapes.png
echo "wrote docs/figures/predicted-{allreduce-scaling,mesh-shapes,gpt3-175b-shapes}.png"
