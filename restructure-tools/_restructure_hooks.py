#!/usr/bin/env python3
"""Attribute names read from plugin objects anywhere in the code, versus the interface
fields: a name read but not a field fails at run time (AttributeError)."""
import dataclasses, re, sys, pathlib
root = pathlib.Path(sys.argv[1])
sys.path.insert(0, str(root))
from opentikz_dt.strategies.interface import StrategyPlugin
from opentikz_dt.figures.interface import FiguresPlugin
from opentikz_dt.predict.interface import PredictPlugin
import importlib.util
spec = importlib.util.spec_from_file_location("ri", root / "runner/strategies/interface.py")
ri = importlib.util.module_from_spec(spec); sys.modules["ri"] = ri; spec.loader.exec_module(ri)
fields = set()
for c in (StrategyPlugin, FiguresPlugin, PredictPlugin, ri.RunnerPlugin):
    fields |= {f.name for f in dataclasses.fields(c)}
pat = re.compile(r"(?:plugin_of\([^()]*(?:\([^()]*\))?[^()]*\)|REGISTRY\.get\([^()]*(?:\([^()]*\))?[^()]*\)|load_strategy\([^()]*(?:\([^()]*\))?[^()]*\)|\bplugin\([^()]*\)|\bstrategy\b|\bplugin\b)\.([A-Za-z_]\w*)")
seen = {}
for p in list((root / "opentikz_dt").rglob("*.py")) + list((root / "runner").rglob("*.py")):
    for i, line in enumerate(p.read_text().splitlines(), 1):
        for m in pat.finditer(line):
            seen.setdefault(m.group(1), []).append(f"{p.relative_to(root)}:{i}")
for name, where in sorted(seen.items()):
    if name not in fields:
        print(name, where[:3])
