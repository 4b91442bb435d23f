"""`dtgen mcp`: the edit contract as a Model Context Protocol server over stdio.

Built on the official Python SDK (`pip install 'dtgen[mcp]'`), its low-level Server,
because the tools' input schemas come from the contract rather than from Python
signatures: each edit operation is a tool whose input schema is the operation's
argument schema (contract.exec.json) plus `spec`, `dry_run` and `compile`. The other
tools: validate, render (a spec's topology, timeline or expected memory figure: PNG as
image content plus the page size), batch-edit, and
run-status (summary of a run directory). The contract is a resource, the skill a prompt.

Every tool calls the same library functions as the command line, so a refusal is the
same refusal: the same message text (what `dtgen` prints on stderr), the file left
byte-identical, the same edit lock (two clients editing one spec serialise). Anything
wrong with a call -- an unknown tool, bad arguments, a missing file -- comes back as
a tool result with `isError` and a structured `error`; the server keeps serving.
Blocking work (edits waiting on the lock, pdflatex) runs in worker threads.
Must not import torch.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

from . import __version__
from .errors import EXIT_USAGE, DtgenError, SpecError, error_text  # error_text: the command line's words

CONTRACT_URI = "dtgen://contract"
SKILL_PROMPT = "dtgen-skill"
RENDER_DPI = 110
RENDER_KINDS = ("topology", "timeline", "memory", "partitioning")  # the figures of a spec the render tool draws


# -- tool definitions --------------------------------------------------------------

_SPEC = {"type": "string", "description": "path of the YAML spec file (relative to the server's working folder)"}
_COMMON_EDIT = {
    "dry_run": {"type": "boolean", "default": False, "description": "return the diff; write nothing"},
    "compile": {"type": "boolean", "default": True,
                "description": "run the invariants that need pdflatex (figure-compiles, no-overlaps, ...); "
                               "false is faster and weaker, like --no-compile"},
}


def tool_definitions() -> list[dict]:
    """name, description and input schema of every tool (the edit tools from the contract)."""
    from .contract import load_contract

    tools = [
        {"name": "validate", "description": "Check a spec: schema, cross-field rules and spec invariants; every "
                                            "problem as file:line:col: key: message.",
         "input_schema": {"type": "object", "additionalProperties": False, "required": ["spec"],
                          "properties": {"spec": _SPEC}}},
        {"name": "render", "description": "Render the topology, timeline, memory or partitioning figure of a "
                                          "spec (memory: the expected bytes per rank, by category; partitioning: "
                                          "its model split two ways); returns the PNG and its page size in cm.",
         "input_schema": {"type": "object", "additionalProperties": False, "required": ["spec"],
                          "properties": {"spec": _SPEC,
                                         "kind": {"enum": list(RENDER_KINDS), "default": "topology"},
                                         "dpi": {"type": "integer", "minimum": 30, "maximum": 300,
                                                 "default": RENDER_DPI}}}},
        {"name": "batch-edit", "description": "Apply several edit operations to one spec atomically: all or none.",
         "input_schema": {"type": "object", "additionalProperties": False, "required": ["spec", "ops"],
                          "properties": {"spec": _SPEC, **_COMMON_EDIT,
                                         "ops": {"type": "array", "minItems": 1, "items": {
                                             "type": "object", "required": ["op"],
                                             "properties": {"op": {"type": "string"}, "args": {"type": "object"}}}}}}},
        {"name": "run-status", "description": "Status and summary of a run directory (dtgen run): ok/failed/"
                                              "in progress, failure, steps, loss, throughput.",
         "input_schema": {"type": "object", "additionalProperties": False, "required": ["run_dir"],
                          "properties": {"run_dir": {"type": "string", "description": "the run directory"}}}},
    ]
    for name, operation in load_contract()["edit_contract"]["operations"].items():
        args = operation["args"]
        schema = {"type": "object", "additionalProperties": False,
                  "required": ["spec"] + list(args.get("required", [])),
                  "properties": {"spec": _SPEC, **args.get("properties", {}), **_COMMON_EDIT}}
        tools.append({"name": name, "description": f"Edit operation: {operation['description']}",
                      "input_schema": schema})
    return tools


# -- tool implementations (plain functions: (arguments) -> (content, structured, is_error)) ----

class ToolFailure(Exception):
    """A call the server refuses before doing anything (unknown tool, malformed arguments)."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def _argument(arguments: dict, name: str, kind: type, required: bool = True, default=None):
    if name not in arguments:
        if required:
            raise ToolFailure("arguments", f"missing argument '{name}'")
        return default
    value = arguments[name]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ToolFailure("arguments", f"argument '{name}' must be {kind.__name__}, got {type(value).__name__}")
    return value


def _edit_tool(name: str, arguments: dict) -> dict:
    from .edit import EditRefusal, edit_file

    arguments = dict(arguments)
    spec = _argument(arguments, "spec", str)
    dry_run = _argument(arguments, "dry_run", bool, False, False)
    compile_ = _argument(arguments, "compile", bool, False, True)
    op_args = {k: v for k, v in arguments.items() if k not in ("spec", "dry_run", "compile")}
    try:
        return {"result": edit_file(spec, name, op_args, dry_run=dry_run, compile=compile_).to_json()}
    except EditRefusal as exc:
        return {"result": exc.result.to_json(), "error": error_text(exc), "refused": True}


def _batch_tool(arguments: dict) -> dict:
    from .edit import EditRefusal, edit_batch
    from .edit.batch import read_ops

    spec = _argument(arguments, "spec", str)
    ops = _argument(arguments, "ops", list)
    extra = set(arguments) - {"spec", "ops", "dry_run", "compile"}
    if extra:
        raise ToolFailure("arguments", f"unknown argument(s) {', '.join(sorted(extra))}")
    steps = read_ops(json.dumps(ops), "ops")
    try:
        result = edit_batch(spec, steps, dry_run=_argument(arguments, "dry_run", bool, False, False),
                            compile=_argument(arguments, "compile", bool, False, True))
        return {"result": result.to_json()}
    except EditRefusal as exc:
        return {"result": exc.result.to_json(), "error": error_text(exc), "refused": True}


def _validate_tool(arguments: dict) -> dict:
    from .validate import validate_files

    spec = _argument(arguments, "spec", str)
    issues, waiting = validate_files([Path(spec)])
    lines = [str(issue) for issue in issues]
    text = "\n".join(lines + ([f"{waiting} run once these are fixed"] if waiting else [])) if issues else f"{spec}: ok"
    return {"ok": not issues, "issues": lines, "text": text}


def render_png(spec_path: str, kind: str = "topology", dpi: int = RENDER_DPI) -> tuple[bytes, dict]:
    """(PNG bytes, page size) of one figure of a spec."""
    from .figures.compile import compile_cached, pdf_to_png
    from .figures.write import render_texts
    from .invariants import pdf_page_size_cm
    from .spec import load_spec

    spec = load_spec(spec_path)
    tex = render_texts(spec, (kind,))[kind]  # what `dtgen figure SPEC --kind KIND` writes
    pdf = compile_cached(tex).pdf
    width, height = pdf_page_size_cm(pdf)
    size = {"width_cm": round(width, 3), "height_cm": round(height, 3),
            "width_pt": round(width / 2.54 * 72, 2), "height_pt": round(height / 2.54 * 72, 2)}
    return pdf_to_png(pdf, dpi=dpi), size


def _run_status_tool(arguments: dict) -> dict:
    folder = Path(_argument(arguments, "run_dir", str))
    if not folder.is_dir():
        raise DtgenError(f"{folder}: not a run directory (no such folder)")

    def read(name):
        path = folder / name
        try:
            return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
        except (OSError, ValueError) as exc:
            raise DtgenError(f"{path}: unreadable: {exc}") from None

    run, metrics = read("run.json"), read("metrics.json")
    if run is None and not (folder / "launch.json").is_file() and not (folder / "spec.yaml").is_file():
        raise DtgenError(f"{folder}: not a run directory (no run.json, launch.json or spec.yaml)")
    summary = {"run_dir": str(folder), "status": run.get("status") if run else "in progress (no run.json yet)"}
    if run:
        summary.update({key: run.get(key) for key in ("world_size", "backend", "device", "start", "end", "failure")})
    if metrics:
        loss = metrics.get("loss") or []
        summary.update({"steps": metrics.get("steps"), "steps_done": metrics.get("steps_done"),
                        "final_loss": loss[-1] if loss else None, "samples_per_s": metrics.get("samples_per_s"),
                        "step_time_s": metrics.get("step_time_s")})
    traces = sorted((folder / "trace").glob("rank*.jsonl")) if (folder / "trace").is_dir() else []
    summary["trace_lines"] = {p.stem: sum(1 for _ in p.open(encoding="utf-8", errors="replace")) for p in traces}
    return summary


def call_tool(name: str, arguments: dict | None) -> tuple[list, dict, bool]:
    """(content blocks as dicts, structured content, is_error) for one tool call; never raises."""
    from .contract import load_contract

    if arguments is None:
        arguments = {}
    try:
        if not isinstance(arguments, dict):
            raise ToolFailure("arguments", "arguments must be an object")
        if name == "validate":
            out = _validate_tool(arguments)
            return [{"type": "text", "text": out.pop("text")}], out, not out["ok"]
        if name == "render":
            kind = _argument(arguments, "kind", str, False, "topology")
            dpi = _argument(arguments, "dpi", int, False, RENDER_DPI)
            if kind not in RENDER_KINDS or not 30 <= dpi <= 300:
                raise ToolFailure("arguments", f"kind is {', '.join(RENDER_KINDS[:-1])} or {RENDER_KINDS[-1]}; "
                                               "dpi 30..300")
            png, size = render_png(_argument(arguments, "spec", str), kind, dpi)
            content = [{"type": "image", "data": base64.b64encode(png).decode("ascii"), "mime_type": "image/png"},
                       {"type": "text", "text": json.dumps(size)}]
            return content, {"kind": kind, "page_size": size}, False
        if name == "run-status":
            out = _run_status_tool(arguments)
            return [{"type": "text", "text": json.dumps(out, indent=2)}], out, False
        if name == "batch-edit":
            out = _batch_tool(arguments)
        elif name in load_contract()["edit_contract"]["operations"]:
            out = _edit_tool(name, arguments)
        else:
            raise ToolFailure("unknown-tool", f"unknown tool '{name}'")
        text = out["error"] if out.get("refused") else json.dumps(out["result"], indent=2, ensure_ascii=False)
        return [{"type": "text", "text": text}], out, bool(out.get("refused"))
    except ToolFailure as exc:
        return _failure(exc.kind, f"{name}: {exc}", EXIT_USAGE)
    except DtgenError as exc:  # bad operation arguments, unreadable spec, missing toolchain
        from .edit import EditArgumentError

        kind = "arguments" if isinstance(exc, EditArgumentError) else "spec" if isinstance(exc, SpecError) else "error"
        return _failure(kind, error_text(exc), exc.exit_code)
    except Exception as exc:  # a bug must not take the server down with it
        return _failure("internal", f"{name}: internal error: {type(exc).__name__}: {exc}")


def _failure(kind: str, message: str, exit_code: int | None = None) -> tuple[list, dict, bool]:
    """`exit_code`: what the command line exits with for the same error (errors.py's table)."""
    error = {"kind": kind, "message": message}
    if exit_code is not None:
        error["exit_code"] = exit_code
    return [{"type": "text", "text": message}], {"error": error}, True


# -- the server ----------------------------------------------------------------------

def build_server():
    """The MCP Server (low-level API of the `mcp` SDK) with dtgen's tools, resource and prompt."""
    import anyio
    import mcp_types as types
    from mcp.server.lowlevel import Server

    from .resources import contract_exec, contract_meta, skill_text

    async def list_tools(ctx, params):
        return types.ListToolsResult(tools=[types.Tool(**tool) for tool in tool_definitions()])

    async def handle_call(ctx, params):
        content, structured, is_error = await anyio.to_thread.run_sync(call_tool, params.name, params.arguments)
        blocks = [types.ImageContent(**c) if c["type"] == "image" else types.TextContent(**c) for c in content]
        return types.CallToolResult(content=blocks, structured_content=structured, is_error=is_error)

    async def list_resources(ctx, params):
        return types.ListResourcesResult(resources=[types.Resource(
            name="contract", uri=CONTRACT_URI, mime_type="application/json",
            description="The edit contract: meta.json (OpenTikZ format) and contract.exec.json (argument "
                        "schemas, spec paths, checks), keyed by the same ids")])

    async def read_resource(ctx, params):
        if str(params.uri) != CONTRACT_URI:
            from mcp.shared.exceptions import MCPError

            raise MCPError(code=-32602, message=f"unknown resource {params.uri}; the one resource is {CONTRACT_URI}")
        text = json.dumps({"meta.json": contract_meta(), "contract.exec.json": contract_exec()}, indent=2,
                          ensure_ascii=False)
        return types.ReadResourceResult(contents=[types.TextResourceContents(
            uri=CONTRACT_URI, mime_type="application/json", text=text)])

    async def list_prompts(ctx, params):
        return types.ListPromptsResult(prompts=[types.Prompt(
            name=SKILL_PROMPT, description="How to edit dtgen specs and figures through the edit contract")])

    async def get_prompt(ctx, params):
        if params.name != SKILL_PROMPT:
            from mcp.shared.exceptions import MCPError

            raise MCPError(code=-32602, message=f"unknown prompt {params.name}; the one prompt is {SKILL_PROMPT}")
        return types.GetPromptResult(description="dtgen skill", messages=[types.PromptMessage(
            role="user", content=types.TextContent(type="text", text=skill_text()))])

    return Server("dtgen", version=__version__, instructions="Edit dtgen specs only through the edit tools; "
                  "read the dtgen://contract resource and the dtgen-skill prompt first.",
                  on_list_tools=list_tools, on_call_tool=handle_call, on_list_resources=list_resources,
                  on_read_resource=read_resource, on_list_prompts=list_prompts, on_get_prompt=get_prompt)


def serve_stdio() -> None:
    """Serve over stdin/stdout until the client closes the connection."""
    import anyio
    from mcp.server.stdio import stdio_server

    server = build_server()

    async def main():
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(main)
