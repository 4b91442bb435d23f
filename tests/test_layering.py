"""The figure and validation side must not import torch (fast start, works without it)."""

from __future__ import annotations

import subprocess
import sys

CODE = """
import importlib, pkgutil, sys
import opentikz_dt
for info in pkgutil.walk_packages(opentikz_dt.__path__, "opentikz_dt."):
    if info.name.startswith("opentikz_dt.runner"):
        continue
    importlib.import_module(info.name)
from opentikz_dt.cli import main  # the CLI registers every command, run included
print(sorted(main.commands))
print("torch" in sys.modules)
"""


def test_non_runner_modules_do_not_import_torch():
    result = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    commands, torch_loaded = result.stdout.splitlines()
    assert "run" in commands and "figure" in commands
    assert torch_loaded == "False"
