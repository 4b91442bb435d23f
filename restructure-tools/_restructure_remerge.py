#!/usr/bin/env python3
"""After `git merge main` (conflicts or not): every file main changed or added in the old
strategy places is taken as main has it, at its old path, and moved again by
_restructure_move.py (which rewrites its imports). Prints what needs a hand."""
import subprocess, sys
from pathlib import Path

ROOT = Path(sys.argv[1]).resolve()
BASE = sys.argv[2]  # the merge base of the branch and main before the merge
OLD = ("opentikz_dt/strategies/", "opentikz_dt/figures/strategies/", "opentikz_dt/predict/strategies/")


def git(*a, out=False):
    r = subprocess.run(["git", *a], cwd=ROOT, check=True, capture_output=True, text=True)
    return r.stdout


changed = git("diff", "--name-status", "--no-renames", BASE, "main").splitlines()
hand = []
for line in changed:
    status, path = line.split("\t")[0], line.split("\t")[-1]
    if not path.startswith(OLD) or not path.endswith(".py"):
        continue
    rel = path[len([o for o in OLD if path.startswith(o)][0]):]
    if "/" in rel:
        continue  # already a folder path
    stem = rel[:-3]
    side = "strategy" if path.startswith(OLD[0]) else ("figures" if "figures" in path else "predict")
    if stem.startswith("_") or stem in ("__init__", "interface"):
        hand.append(f"{status} {path} (by hand: registry/defaults/interface)")
        continue
    new = ROOT / "opentikz_dt" / "strategies" / stem / f"{side}.py"
    if status == "D":
        hand.append(f"D {path}: main deleted it; delete {new.relative_to(ROOT)}?")
        continue
    (ROOT / path).parent.mkdir(parents=True, exist_ok=True)
    (ROOT / path).write_text(git("show", f"main:{path}"))
    if new.exists():
        subprocess.run(["git", "rm", "-q", "-f", str(new)], cwd=ROOT, check=True)
    git("add", path)
    print("re-taken from main:", path, "->", new.relative_to(ROOT))
for h in hand:
    print("HAND:", h)

# Conflicts elsewhere whose hunks are only import lines: take main's lines (the move
# script then maps the old module names).
import re
unmerged = git("diff", "--name-only", "--diff-filter=U").split()
for path in unmerged:
    p = ROOT / path
    if not p.exists() or not path.endswith(".py"):
        print("HAND: unmerged", path)
        continue
    text = p.read_text()
    blocks = re.findall(r"<<<<<<< [^\n]*\n(.*?)=======\n(.*?)>>>>>>> [^\n]*\n", text, re.S)
    def imports_only(s):
        return all(l.startswith(("from ", "import ", "    ", ")")) or not l.strip() for l in s.splitlines())
    if blocks and all(imports_only(a) and imports_only(b) for a, b in blocks):
        text = re.sub(r"<<<<<<< [^\n]*\n(.*?)=======\n(.*?)>>>>>>> [^\n]*\n", lambda m: m.group(2), text, flags=re.S)
        p.write_text(text)
        git("add", path)
        print("took main's imports:", path)
    else:
        print("HAND: conflict", path)

# This branch's own fixes in moved modules (a re-taken module loses them): mypy's findings.
def fix(path, old, new):
    p = ROOT / path
    if p.exists():
        s = p.read_text()
        if old in s:
            p.write_text(s.replace(old, new))
            print("re-fixed", path)

fix("opentikz_dt/strategies/gossip/strategy.py", "    offsets = []\n", "    offsets: list[int] = []\n")
fix("opentikz_dt/strategies/mesh/strategy.py",
    '''    method = {"fsdp": "FSDP", "ring": "ring all-reduce", "tree": "tree all-reduce"}.get(block.get("data_parallel"),
                                                                                     "all-reduce")''',
    '''    methods = {"fsdp": "FSDP", "ring": "ring all-reduce", "tree": "tree all-reduce"}
    method = methods.get(str(block.get("data_parallel")), "all-reduce")''')
fix("opentikz_dt/strategies/parameter_server/figures.py", "parameter_server/figures.py, central_storage.py)",
    "parameter_server/figures.py, central_storage/figures.py)")
