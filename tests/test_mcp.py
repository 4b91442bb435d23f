"""`dtgen mcp`, driven the way an agent's client drives it: the MCP SDK's own client
(mcp.client.stdio) starting `python -m opentikz_dt mcp` as a subprocess over stdio."""

from __future__ import annotations

import base64
import json
import shutil
import sys
import tempfile
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner

pytest.importorskip("mcp")
from mcp import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402

from opentikz_dt.cli import main  # noqa: E402
from opentikz_dt.contract import load_contract  # noqa: E402
from opentikz_dt.spec import load_spec  # noqa: E402

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@asynccontextmanager
async def session(folder: Path):
    # The SDK passes only a safe set of variables on; TMPDIR too, so the suite's check
    # that nothing is left in the temporary directory covers the server.
    params = StdioServerParameters(command=sys.executable, args=["-m", "opentikz_dt", "mcp"], cwd=str(folder),
                                   env={"TMPDIR": tempfile.gettempdir()})
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as client:
            await client.initialize()
            yield client


def run(coroutine_function, *args):
    return anyio.run(coroutine_function, *args)


def test_tools_resource_and_prompt_come_from_the_contract(tmp_path):
    async def scenario():
        async with session(tmp_path) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            contract = await client.read_resource("dtgen://contract")
            prompt = await client.get_prompt("dtgen-skill")
            return tools, contract, prompt

    tools, contract, prompt = run(scenario)
    operations = load_contract()["edit_contract"]["operations"]
    assert set(operations) | {"validate", "render", "batch-edit", "run-status"} == set(tools)
    for name, operation in operations.items():
        schema = tools[name].input_schema
        assert {k: v for k, v in schema["properties"].items() if k not in ("spec", "dry_run", "compile")} == \
            operation["args"].get("properties", {})
        assert schema["required"] == ["spec"] + operation["args"].get("required", [])
        assert schema["properties"]["dry_run"]["type"] == "boolean"
    shown = json.loads(contract.contents[0].text)
    assert set(shown) == {"meta.json", "contract.exec.json"}
    assert prompt.messages[0].content.text.startswith("# Skill")


def test_edits_refuse_exactly_like_the_cli_and_malformed_calls_do_not_kill_the_server(tmp_path):
    spec = tmp_path / "spec.yaml"
    shutil.copyfile(EXAMPLES / "ps-sync.yaml", spec)
    original = spec.read_bytes()

    async def scenario():
        async with session(tmp_path) as client:
            out = {}
            out["refused"] = await client.call_tool(
                "recolor", {"spec": "spec.yaml", "flow": "data", "color": "otpurple", "compile": False})
            out["bad_enum"] = await client.call_tool("recolor", {"spec": "spec.yaml", "flow": "data", "color": "red"})
            out["bad_type"] = await client.call_tool("set-hosts", {"spec": "spec.yaml", "count": "two"})
            out["no_spec"] = await client.call_tool("add-worker", {})
            out["missing_file"] = await client.call_tool("add-worker", {"spec": "nope.yaml"})
            out["unknown"] = await client.call_tool("teleport", {"spec": "spec.yaml"})
            out["bad_batch"] = await client.call_tool("batch-edit", {"spec": "spec.yaml", "ops": [
                {"op": "add-worker"}, {"op": "remove-server"}], "compile": False})
            out["dry"] = await client.call_tool("add-worker", {"spec": "spec.yaml", "dry_run": True, "compile": False})
            out["bytes_after_failures"] = spec.read_bytes()
            out["applied"] = await client.call_tool("batch-edit", {"spec": "spec.yaml", "compile": False, "ops": [
                {"op": "add-worker"}, {"op": "set-slowdown", "args": {"worker": "w4", "factor": 2}}]})
            out["valid"] = await client.call_tool("validate", {"spec": "spec.yaml"})
            return out

    out = run(scenario)
    cli = CliRunner().invoke(main, ["edit", str(spec), "recolor", "--flow", "data", "--color", "otpurple",
                                    "--no-compile"])
    assert cli.exit_code == 1
    refused = out["refused"]
    assert refused.is_error and refused.structured_content["result"]["invariant"] == "distinct-flow-colors"
    # the same words as the command line (which names the file as it was given)
    assert refused.content[0].text == cli.stderr.strip().replace(str(spec), "spec.yaml")
    # exit_code: what the command line exits with for the same error (errors.py's table)
    for key, kind, words, code in [("bad_enum", "arguments", "'red' is not one of", 2),
                                   ("bad_type", "arguments", "is not of type", 2),
                                   ("no_spec", "arguments", "missing argument 'spec'", 2),
                                   ("missing_file", "spec", "nope.yaml:1:1: no such file", 1),
                                   ("unknown", "unknown-tool", "unknown tool 'teleport'", 2)]:
        result = out[key]
        assert result.is_error, key
        error = result.structured_content["error"]
        assert error["kind"] == kind and words in error["message"], (key, error)
        assert error["exit_code"] == code, (key, error)
    assert out["missing_file"].content[0].text.splitlines()[-1] == "dtgen: error: 1 problem(s) in 1 file(s)"
    assert out["bad_batch"].is_error and "batch step 2: remove-server refused" in out["bad_batch"].content[0].text
    assert not out["dry"].is_error and out["dry"].structured_content["result"]["dry_run"]
    assert out["bytes_after_failures"] == original
    assert not out["applied"].is_error, out["applied"].content[0].text
    assert not out["valid"].is_error  # the server is still serving after every bad call
    assert load_spec(spec).topology.workers.slowdown == {"w4": 2}


def test_two_clients_editing_one_spec_keep_the_lock(tmp_path):
    spec = tmp_path / "spec.yaml"
    shutil.copyfile(EXAMPLES / "allreduce-ring.yaml", spec)
    count = load_spec(spec).topology.workers.count
    per_client = 3

    async def one_client(results):
        async with session(tmp_path) as client:
            for _ in range(per_client):
                result = await client.call_tool("add-worker", {"spec": "spec.yaml", "compile": False})
                results.append(result.is_error)

    async def scenario():
        results = []
        async with anyio.create_task_group() as group:
            group.start_soon(one_client, results)
            group.start_soon(one_client, results)
        return results

    results = run(scenario)
    assert results == [False] * (2 * per_client)
    assert load_spec(spec).topology.workers.count == count + 2 * per_client  # no edit lost


@pytest.mark.latex
def test_render_returns_the_png_and_its_page_size(tmp_path):
    shutil.copyfile(EXAMPLES / "ps-sync.yaml", tmp_path / "spec.yaml")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "run.json").write_text(json.dumps({"status": "failed", "world_size": 4, "failure": {"rank": 2}}))
    (run_dir / "metrics.json").write_text(json.dumps({"steps": 5, "loss": [1.0, 0.5], "samples_per_s": 10.0}))

    async def scenario():
        async with session(tmp_path) as client:
            return (await client.call_tool("render", {"spec": "spec.yaml", "kind": "topology", "dpi": 40}),
                    await client.call_tool("run-status", {"run_dir": "run"}),
                    await client.call_tool("run-status", {"run_dir": "spec.yaml"}))

    rendered, status, not_a_run = run(scenario)
    assert not rendered.is_error
    image, size = rendered.content
    png = base64.b64decode(image.data)
    assert image.mime_type == "image/png" and png.startswith(b"\x89PNG")
    page = json.loads(size.text)
    width_px = int.from_bytes(png[16:20], "big")
    assert abs(width_px - page["width_cm"] / 2.54 * 40) <= 2  # the PNG is the page at 40 dpi
    assert status.structured_content["status"] == "failed" and status.structured_content["final_loss"] == 0.5
    assert not_a_run.is_error


@pytest.mark.latex
def test_render_draws_a_specs_expected_memory_and_refuses_a_python_model(tmp_path):
    shutil.copyfile(EXAMPLES / "ps-sync.yaml", tmp_path / "spec.yaml")
    shutil.copytree(EXAMPLES / "custom-model", tmp_path / "custom")

    async def scenario():
        async with session(tmp_path) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            return (tools["render"], await client.call_tool("render", {"spec": "spec.yaml", "kind": "memory", "dpi": 40}),
                    await client.call_tool("render", {"spec": "custom/spec.yaml", "kind": "memory", "dpi": 40}),
                    await client.call_tool("render", {"spec": "spec.yaml", "kind": "loss"}))

    tool, rendered, python_model, unknown = run(scenario)
    assert tool.input_schema["properties"]["kind"]["enum"] == ["topology", "timeline", "memory", "partitioning"]
    assert not rendered.is_error, rendered.content[0].text
    image, size = rendered.content
    png = base64.b64decode(image.data)
    assert png.startswith(b"\x89PNG") and rendered.structured_content["kind"] == "memory"
    # the same figure as `dtgen figure SPEC --kind memory`: its page size
    from opentikz_dt.figures.compile import compile_pdf
    from opentikz_dt.figures.write import render_texts
    from opentikz_dt.invariants import pdf_page_size_cm

    width, _ = pdf_page_size_cm(compile_pdf(render_texts(load_spec(tmp_path / "spec.yaml"), ("memory",))["memory"]).pdf)
    assert abs(json.loads(size.text)["width_cm"] - width) < 0.01
    # a python model's sizes are known only once built: the command line's refusal, the server still up
    assert python_model.is_error and "no expected memory for a python model" in python_model.content[0].text
    assert unknown.is_error and unknown.structured_content["error"]["kind"] == "arguments"
    assert "memory" in unknown.content[0].text
