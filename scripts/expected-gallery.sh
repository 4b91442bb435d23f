#!/usr/bin/env bash
# Regenerate the expected timelines of docs/figures/ (the simulator's schedule under the
# illustrative calibration) from the examples, at 120 dpi, with the gallery's variants: a
# column-wide figure, the dark palette, 1,024 workers, the pipeline schedules side by side.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
png() { pdftoppm -png -r 120 -singlefile "$1" "docs/figures/$2"; }
# variant SPEC NAME KEY=VALUE...: the example with its keys set, as examples/NAME.yaml's copy
variant() {
  python3 - "$@" <<'PY'
import sys, yaml
source, name, *pairs = sys.argv[1:]
data = yaml.safe_load(open(source, encoding="utf-8"))
data["name"] = name
for pair in pairs:
    key, value = pair.split("=", 1)
    node = data
    *path, last = key.split(".")
    for part in path:
        node = node.setdefault(part, {})
    node[last] = yaml.safe_load(value)
yaml.safe_dump(data, open(f"{name}.yaml", "w", encoding="utf-8"), sort_keys=False)
PY
}
(cd "$work" && variant "$OLDPWD/examples/ps-sync.yaml" ps-sync-dark figure.palette=dark \
  && variant "$OLDPWD/examples/ps-sync.yaml" ps-1024-workers topology.workers.count=1024 \
       training.dataset.samples=2000000 \
  && variant "$OLDPWD/examples/allreduce-hierarchical.yaml" hierarchical-1024-workers \
       topology.workers.count=1024 topology.hosts=128 training.dataset.samples=2000000)
for png in docs/figures/*-timeline.png; do
  name=$(basename "$png" -timeline.png)
  case "$name" in
    measured-*) continue ;;
    *-column) spec="examples/${name%-column}.yaml"; width=(--width column) ;;
    ps-sync-dark|ps-1024-workers|hierarchical-1024-workers) spec="$work/$name.yaml"; width=() ;;
    *) spec="examples/$name.yaml"; width=() ;;
  esac
  dtgen figure "$spec" --kind timeline --format pdf "${width[@]}" -o "$work/$name" > /dev/null
  png "$work/$name"/*-timeline.pdf "$name-timeline"
done
dtgen figure examples/pipeline-zbv.yaml --kind schedules --format pdf -o "$work/schedules" > /dev/null
png "$work/schedules/pipeline-zbv-schedules.pdf" pipeline-zbv-schedules
ls docs/figures/*-timeline.png docs/figures/pipeline-zbv-schedules.png | grep -v measured-
