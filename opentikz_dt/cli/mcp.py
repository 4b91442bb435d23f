"""`dtgen mcp`: serve the edit contract to AI agents over the Model Context Protocol (stdio)."""

from __future__ import annotations

import importlib.util

import click

from ..errors import DtgenError


@click.command("mcp")
def mcp():
    """Run an MCP server on stdin/stdout: validate, render, every edit operation, batch-edit and
    run-status as tools; the contract as the resource dtgen://contract; the skill as the prompt
    dtgen-skill. An MCP client starts it (dtgen skill shows how to register it)."""
    if importlib.util.find_spec("mcp") is None:
        raise DtgenError("dtgen mcp needs the MCP SDK, which is not installed: pip install 'dtgen[mcp]'")
    from ..mcp_server import serve_stdio

    serve_stdio()
