"""Run profiled scripts one after another in the same processes, as a notebook would:
each script makes and destroys its own process group and writes its traces to
$PROFILE_OUT/<script name>, each with its own rendezvous port. torch is imported once per rank instead of once per script
(most of a short script's start-up), so the tests trace four strategies for the cost of
about one start."""

import os
import runpy
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = Path(os.environ["PROFILE_OUT"])

PORTS = os.environ["PROFILE_PORTS"].split(",")  # a fresh rendezvous port per script (launch.py)

for script, port in zip(sys.argv[1:], PORTS):
    folder = OUT / Path(script).stem
    folder.mkdir(parents=True, exist_ok=True)
    os.environ["PROFILE_OUT"] = str(folder)
    os.environ["MASTER_PORT"] = port
    runpy.run_path(str(HERE / script), run_name="__main__")
