#!/usr/bin/env python3
"""Move each strategy's non-torch modules into opentikz_dt/strategies/<kind>/ and rewrite
imports and references. Idempotent: re-run after `git merge main` to move files others
added in the old places. Usage: python _restructure_move.py REPO_ROOT"""
import ast, re, subprocess, sys
from pathlib import Path

ROOT = Path(sys.argv[1]).resolve()
PKG = ROOT / "opentikz_dt"
SKIP = {"__init__", "_base", "interface"}
DOC = {"strategy": "descriptor, rules, edit hooks", "figures": "drawing", "predict": "simulation"}


def git(*args):
    subprocess.run(["git", *args], cwd=ROOT, check=True)


def kinds_and_moves():
    """{old module: new module} and the set of kind folder names."""
    moves, folders = {}, set()
    for p in sorted((PKG / "strategies").glob("*.py")):
        if p.stem not in SKIP and re.search(r"^KIND = ", p.read_text(), re.M):  # a plugin, not a shared module
            folders.add(p.stem)
            moves[f"opentikz_dt.strategies.{p.stem}"] = (p, f"opentikz_dt.strategies.{p.stem}.strategy")
    for side in ("figures", "predict"):
        for p in sorted((PKG / side / "strategies").glob("*.py")) if (PKG / side / "strategies").is_dir() else []:
            if p.stem not in SKIP:
                if not re.search(r"^KIND = ", p.read_text(), re.M):
                    print(f"WARNING: {p} declares no KIND: move it by hand")
                    continue
                folders.add(p.stem)
                moves[f"opentikz_dt.{side}.strategies.{p.stem}"] = (p, f"opentikz_dt.strategies.{p.stem}.{side}")
    return moves, folders


def all_folders():
    return sorted(d.name for d in (PKG / "strategies").iterdir() if d.is_dir() and (d / "__init__.py").exists()
                  or d.is_dir() and any(d.glob("*.py")))


def module_of(path: Path) -> str:
    rel = path.relative_to(ROOT)
    parts = list(rel.with_suffix("").parts)
    if parts[0] == "runner":
        parts = ["opentikz_dt"] + parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def package_of(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rsplit(".", 1)[0]


def resolve(node: ast.ImportFrom, package: str) -> str:
    if node.level == 0:
        return node.module
    base = package.split(".")
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def relative(target: str, package: str) -> str:
    """target as a relative import from `package` (both inside opentikz_dt)."""
    p, t = package.split("."), target.split(".")
    common = 0
    while common < min(len(p), len(t)) and p[common] == t[common]:
        common += 1
    if common == 0:
        return target
    dots = len(p) - common + 1
    return "." * dots + ".".join(t[common:])


def build_map(folders):
    m = {"opentikz_dt.figures.strategies": "opentikz_dt.figures.plugin",
         "opentikz_dt.predict.strategies": "opentikz_dt.predict.plugin"}
    for k in folders:
        m[f"opentikz_dt.strategies.{k}"] = f"opentikz_dt.strategies.{k}.strategy"
        m[f"opentikz_dt.figures.strategies.{k}"] = f"opentikz_dt.strategies.{k}.figures"
        m[f"opentikz_dt.predict.strategies.{k}"] = f"opentikz_dt.strategies.{k}.predict"
    return m


def mapped(name: str, m: dict) -> str:
    if name in m:
        return m[name]
    # a submodule of a mapped module does not exist (they are modules), so exact match only
    return name


def render_from(target, names, package, was_relative):
    mod = relative(target, package) if was_relative and target.startswith("opentikz_dt") else target
    return f"from {mod} import {', '.join(names)}"


def rewrite_file(path: Path, old_module: str, m: dict, force_relative_resolution=True):
    src = path.read_text()
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return False
    old_package = package_of(old_module, path) if old_module else None
    new_module = m.get(old_module, old_module) if old_module else None
    new_package = package_of(new_module, path) if new_module else None
    # after the move a module `strategy.py` is no __init__: its package is the kind folder
    if old_module in m and new_module != old_module:
        new_package = new_module.rsplit(".", 1)[0]
    lines = src.splitlines(keepends=True)
    edits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level and old_package is None:
                continue
            target = resolve(node, old_package) if node.level else node.module
            if not target or not target.startswith("opentikz_dt"):
                continue
            groups = {}
            new_target = mapped(target, m)
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                if alias.name in DOC and re.fullmatch(r"opentikz_dt\.strategies\.\w+", target):
                    groups.setdefault(target, []).append(
                        alias.name if not alias.asname else f"{alias.name} as {alias.asname}")
                    continue  # already the new layout: a side module of a kind folder
                if sub in m:
                    full = m[sub]
                    parent, last = full.rsplit(".", 1)
                    shown = alias.asname or alias.name
                    text = last if shown == last else f"{last} as {shown}"
                    groups.setdefault(parent, []).append(text)
                else:
                    groups.setdefault(new_target, []).append(
                        alias.name if not alias.asname else f"{alias.name} as {alias.asname}")
            moved_file = new_package != old_package
            if list(groups) == [target] and not (moved_file and node.level):
                continue
            indent = re.match(r"\s*", lines[node.lineno - 1]).group(0)
            text = "\n".join(indent + render_from(t, ns, new_package, bool(node.level)) for t, ns in groups.items())
            edits.append((node.lineno, node.end_lineno, text + "\n"))
        elif isinstance(node, ast.Import):
            changed = False
            parts = []
            for alias in node.names:
                new = mapped(alias.name, m)
                if new != alias.name:
                    changed = True
                    if not alias.asname:
                        print(f"WARNING {path}:{node.lineno}: plain import of moved {alias.name}")
                parts.append(new + (f" as {alias.asname}" if alias.asname else ""))
            if changed:
                indent = re.match(r"\s*", lines[node.lineno - 1]).group(0)
                edits.append((node.lineno, node.end_lineno, f"{indent}import {', '.join(parts)}\n"))
    if not edits:
        return False
    for start, end, text in sorted(edits, reverse=True):
        lines[start - 1:end] = [text]
    path.write_text("".join(lines))
    return True


def rewrite_strings(path: Path, folders):
    try:
        s = path.read_text()
    except UnicodeDecodeError:
        return False
    alt = "|".join(sorted(folders, key=len, reverse=True))
    n = s
    n = re.sub(rf"opentikz_dt\.(figures|predict)\.strategies\.({alt})\b", r"opentikz_dt.strategies.\2.\1", n)
    n = re.sub(rf"opentikz_dt\.strategies\.({alt})\b(?!\.(strategy|figures|predict)\b)(?! import (strategy|figures|predict)\b)(?!/)", r"opentikz_dt.strategies.\1.strategy", n)
    n = re.sub(rf"(?:opentikz_dt/)?(figures|predict)/strategies/({alt})\.py", r"opentikz_dt/strategies/\2/\1.py", n)
    n = re.sub(rf"opentikz_dt/strategies/({alt})\.py", r"opentikz_dt/strategies/\1/strategy.py", n)
    if n != s:
        path.write_text(n)
        return True
    return False


def main():
    moves, folders = kinds_and_moves()
    folders |= set(all_folders())
    m = build_map(folders)
    # 1. rewrite imports in every python file (moved ones by their OLD module name)
    files = [p for d in ("opentikz_dt", "runner", "tests", "benchmarks", "scripts", "examples")
             for p in (ROOT / d).rglob("*.py") if "__pycache__" not in p.parts]
    changed = []
    for p in files:
        if p.name == "__init__.py" and p.parent.name == "strategies" and p.parent.parent.name in ("figures", "predict"):
            continue  # merged into figures/plugin.py, predict/plugin.py by hand
        old = module_of(p) if p.parts[len(ROOT.parts)] in ("opentikz_dt", "runner") else None
        if rewrite_file(p, old, m):
            changed.append(p)
    # 2. move
    for old, (path, new) in moves.items():
        kind = new.split(".")[2]
        folder = PKG / "strategies" / kind
        folder.mkdir(exist_ok=True)
        init = folder / "__init__.py"
        if not init.exists():
            init.write_text(f'"""The `{kind.replace("_", "-")}` strategy (opentikz_dt/plugins.py): strategy.py (descriptor, rules,\n'
                            'edit hooks), figures.py (drawing), predict.py (simulation); its torch side is\n'
                            f'runner/strategies/{kind}.py. Must not import torch."""\n')
            git("add", str(init))
        dest = folder / (new.rsplit(".", 1)[1] + ".py")
        git("mv", str(path), str(dest))
    # 3. dotted names and paths in strings, docs and config
    texts = [p for p in files if p.exists()] + [p for d in ("opentikz_dt", "runner", "tests", "docs", "benchmarks", "scripts", "examples")
                                                 for p in (ROOT / d).rglob("*") if p.suffix in (".md", ".py", ".yaml", ".toml", ".json", ".txt")
                                                 and "__pycache__" not in p.parts]
    texts += [ROOT / n for n in ("CONTRIBUTING.md", "Makefile") if (ROOT / n).exists()]
    for p in sorted(set(texts)):
        if p.exists() and p.is_file() and not (p.name == "__init__.py" and p.parent.name == "strategies"
                                               and p.parent.parent.name in ("figures", "predict")):
            rewrite_strings(p, folders)
    # 4. pyproject packages
    pp = ROOT / "pyproject.toml"
    s = pp.read_text()
    mpk = re.search(r"^packages = \[(.*)\]$", s, re.M)
    pk = [x.strip().strip('"') for x in mpk.group(1).split(",")]
    pk = [x for x in pk if x not in ("opentikz_dt.figures.strategies", "opentikz_dt.predict.strategies")
          and not re.fullmatch(r"opentikz_dt\.strategies\.\w+", x)]
    at = pk.index("opentikz_dt.strategies") + 1
    pk[at:at] = [f"opentikz_dt.strategies.{k}" for k in sorted(folders)]
    s = s[:mpk.start()] + "packages = [" + ", ".join(f'"{x}"' for x in pk) + "]" + s[mpk.end():]
    pp.write_text(s)
    print("moved", len(moves), "modules; rewrote imports in", len(changed), "files; folders:", sorted(folders))


main()
