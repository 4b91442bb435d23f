"""Registers the commands that live beside their implementations.

Each module defines one or more click commands and must not import torch at module
level (the `run` command imports the runner inside its body).
"""

from __future__ import annotations


def register(group) -> None:
    from .cli_edit import edit
    from .cli_figure import compare, figure
    from .cli_run import run

    for command in (figure, compare, run, edit):
        group.add_command(command)
