"""`ctxfst mcp`: the MCP server, end to end with the SDK's own client over stdio."""

from __future__ import annotations

import asyncio
import json
import sys

import pytest

from .conftest import run_process

mcp = pytest.importorskip("mcp", reason="the MCP SDK (ctxfst[mcp], in the dev extras)")


@pytest.fixture
def project(built_example):
    return built_example


async def _session(root, calls):
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=sys.executable, args=["-m", "ctxfst", "mcp"],
                                   cwd=str(root))
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            tools = (await session.list_tools()).tools
            results = [await session.call_tool(name, arguments) for name, arguments in calls]
    return tools, results


def talk(root, calls):
    return asyncio.run(asyncio.wait_for(_session(root, calls), 120))


def payload(result) -> dict:
    assert not result.is_error, result.content
    return json.loads(result.content[0].text)


def cli_json(root, *args: str) -> dict:
    done = run_process(*args, "--format", "json", cwd=root)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_tools_answer_as_the_commands_and_name_a_bad_argument(project):
    ask = {"tenant": "default", "op": "exists", "key": "topic", "value": "python"}
    tools, results = talk(project, [
        ("query", {"text": "Hono on Cloudflare Workers", "top_k": 3}),
        ("facts_ask", ask),
        ("query", {"text": "Hono", "top_k": 500}),
        ("query", {"text": "Hono", "mode": "psychic"}),
        ("query", {"text": "!!!"}),
        ("plan", {"seed": ["state:has-resume"]}),
        ("state_show", {}),
    ])
    by_name = {tool.name: tool for tool in tools}
    assert sorted(by_name) == ["facts_ask", "plan", "query", "state_show"]
    schema = by_name["query"].input_schema
    assert schema["required"] == ["text"]
    assert schema["properties"]["top_k"]["maximum"] == 100
    assert "graph" in schema["properties"]["mode"]["enum"]
    assert by_name["facts_ask"].input_schema["required"] == ["tenant", "op"]
    assert all(tool.description for tool in tools)
    query, facts, too_many, bad_mode, punctuation, plan, state = results
    assert payload(query) == cli_json(project, "query", "Hono on Cloudflare Workers",
                                      "--top-k", "3")
    assert payload(facts) == cli_json(project, "facts", "ask", "--tenant", "default", "--op",
                                      "exists", "--key", "topic", "--value", "python")
    # A bad argument is a tool error that names it (the SDK checks the schema).
    for result, argument in ((too_many, "top_k"), (bad_mode, "mode")):
        assert result.is_error and argument in result.content[0].text
    assert punctuation.is_error and "retrieval_error" in punctuation.content[0].text
    assert plan.is_error and "`seed` needs `goal`" in plan.content[0].text
    assert state.is_error and "no_state" in state.content[0].text


def test_arguments_are_checked_as_strictly_as_the_http_api(project):
    _, results = talk(project, [
        ("query", {"text": "hono", "topk": 1}),
        ("query", {"text": "hono", "top_k": "3"}),
        ("query", {"text": "hono", "top_k": True}),
        ("query", {"text": "hono", "allow_stale": "yes"}),
        ("facts_ask", {"tenant": "default", "op": "exists", "min_confidence": "0.5"}),
        ("query", {"text": "hono", "top_k": 2}),
    ])
    *bad, good = results
    for result, argument in zip(bad, ("topk", "top_k", "top_k", "allow_stale",
                                      "min_confidence"), strict=True):
        assert result.is_error and argument in result.content[0].text, result.content
        assert "bad_request" in result.content[0].text
    assert len(payload(good)["results"]) == 2


def test_without_a_project_it_says_so(tmp_path):
    done = run_process("mcp", cwd=tmp_path)
    assert done.returncode == 2 and "no ctxfst project" in done.stderr


# ---- fuzzing the tools in process: any arguments are an answer or a tool error

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                     st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=30),
                     st.sampled_from(["Hono", "graph", "default", "exists", "3", "yes"]))
_VALUES = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=3)
                       | st.dictionaries(st.text(max_size=6), inner, max_size=2), max_leaves=5)
_KEYS = st.sampled_from(["text", "mode", "top_k", "hops", "bridge_model", "allow_stale",
                         "tenant", "op", "key", "value", "min_confidence", "limit", "goal",
                         "seed", "algorithm", "explain", "topk"])


@pytest.fixture(scope="module")
def tool_server(tmp_path_factory):
    from ctxfst.mcp_server import build_server
    from ctxfst.pipeline.runner import run_build
    from ctxfst.serve import Service

    from .conftest import copy_example

    root = copy_example(tmp_path_factory.mktemp("mcp-fuzz"))
    assert run_build(root, [], quiet=True) == 0
    service = Service(root)
    service.start()
    yield build_server(service)
    service.stop()


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(name=st.sampled_from(["query", "facts_ask", "plan", "state_show"]),
       arguments=st.dictionaries(_KEYS, _VALUES, max_size=4))
def test_any_tool_arguments_are_an_answer_or_a_tool_error(tool_server, name, arguments):
    from mcp.server.mcpserver.exceptions import ToolError

    try:
        asyncio.run(tool_server.call_tool(name, arguments))
    except ToolError as error:
        assert "Traceback" not in str(error) and str(error)
