"""`ctxfst mcp`: the server's answers as Model Context Protocol tools over stdio, for agent
runtimes that speak MCP. The tools call the same Service as `ctxfst serve` (one build
loaded, reloaded when a new one is published, stale builds refused); their arguments
have JSON schemas with the same bounds, and a bad argument is a tool error that names it.

The `mcp` SDK is an extra (`pip install 'ctxfst[mcp]'`), imported only by this command.
"""

# (No `from __future__ import annotations`: the SDK reads the tools' annotations, which
# name types made inside build_server.)
import inspect
from collections.abc import Callable
from typing import Annotated, Any, Literal

from .diagnostics import OUTPUT_SCHEMA_VERSION
from .serve import BRIDGE_MODELS, MAX_HOPS, MAX_TEXT_CHARS, MAX_TOP_K, BadRequest, Service

INSTRUCTIONS = (
    "Tools over a compiled CtxFST knowledge base. `query` retrieves chunks (graph mode walks "
    "the entity graph from the entities the question names); `facts_ask` answers yes, no or "
    "unknown from extracted facts, never taking no facts for 'does not exist'; `plan` finds "
    "a cheapest chain of skills from the world state to a goal; `state_show` is the world "
    "state. Answers are the JSON of the matching `ctxfst ... --format json` command.")


def build_server(service: Service):
    """An MCPServer whose tools answer from `service`."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from pydantic import ConfigDict, Field, ValidationError, create_model

    from .retrieval import MODES
    from .version import __version__

    strict: dict[str, Any] = {}  # tool name -> its arguments' strict model

    class StrictServer(MCPServer):
        """Arguments checked as the HTTP API checks them before the SDK sees them: an
        unknown name (a typo) or a value of the wrong JSON type ("3" for a number, true
        for a number, "yes" for a flag) is a tool error naming it, never coerced."""

        async def call_tool(self, name, arguments, context=None):
            model = strict.get(name)
            if model is not None:
                try:
                    model.model_validate(arguments or {})
                except ValidationError as error:
                    raise ToolError("bad_request: " + "; ".join(
                        f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}"
                        for e in error.errors(include_input=False))) from None
            return await super().call_tool(name, arguments, context)

    server = StrictServer("ctxfst", version=__version__, instructions=INSTRUCTIONS)

    def tool(name: str, description: str):
        """server.tool, with the strict model of the function's arguments kept."""
        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            fields = {param: (info.annotation, ... if info.default is inspect.Parameter.empty
                              else info.default)
                      for param, info in inspect.signature(fn).parameters.items()}
            strict[name] = create_model(f"{name}_arguments", __config__=ConfigDict(
                extra="forbid", strict=True), **fields)
            return server.tool(name=name, description=description)(fn)

        return register

    def answer(method: Callable[[dict[str, Any]], dict[str, Any]],
               arguments: dict[str, Any]) -> dict[str, Any]:
        try:  # (the schema_version first, as every --format json output has it)
            return {"schema_version": OUTPUT_SCHEMA_VERSION,
                    **method({k: v for k, v in arguments.items() if v is not None})}
        except BadRequest as error:
            raise ToolError(f"{error.code}: {error}") from None

    Text = Annotated[str, Field(min_length=1, max_length=MAX_TEXT_CHARS)]
    Stale = Annotated[bool, Field(description="answer even if the sources changed since "
                                              "the build")]

    @tool(name="query", description=(
        "Retrieve the chunks of the knowledge base that answer a question: content, title, "
        "source file and line span, and `via` (the entity path that led graph mode there)."))
    def query(text: Annotated[str, Field(min_length=1, max_length=MAX_TEXT_CHARS,
                                         description="the question")],
              mode: Annotated[Literal[MODES], Field(  # type: ignore[valid-type]
                  description="graph (default), vector, lexical, hybrid or keyword-graph")
              ] = "graph",
              top_k: Annotated[int, Field(ge=1, le=MAX_TOP_K)] = 5,
              hops: Annotated[int, Field(ge=0, le=MAX_HOPS)] = 2,
              bridge_model: Annotated[Literal[BRIDGE_MODELS], Field(  # type: ignore
                  description="multilingual model for text the build's model cannot "
                  "read, or none")] = "use-multilingual",
              allow_stale: Stale = False) -> dict[str, Any]:
        return answer(service.query, dict(text=text, mode=mode, top_k=top_k, hops=hops,
                                          bridge_model=bridge_model, allow_stale=allow_stale))

    @tool(name="facts_ask", description=(
        "Ask the semantic facts: exists, count or list, for one tenant. The answer is yes, "
        "no or unknown, with the facts and their evidence (file, lines, excerpt)."))
    def facts_ask(tenant: Annotated[str, Field(min_length=1, max_length=200)],
                  op: Literal["exists", "count", "list"],
                  entity_type: Text | None = None, namespace: Text | None = None,
                  key: Text | None = None, value: Text | None = None,
                  min_confidence: Annotated[float, Field(ge=0.0, le=1.0)] = 0.0,
                  limit: Annotated[int, Field(ge=1, le=1000)] = 20,
                  allow_stale: Stale = False) -> dict[str, Any]:
        return answer(service.facts_ask, dict(
            tenant=tenant, op=op, entity_type=entity_type, namespace=namespace, key=key,
            value=value, min_confidence=min_confidence, limit=limit, allow_stale=allow_stale))

    @tool(name="plan", description=(
        "Plan the cheapest chain of skills from the world state (or from `seed` states) to "
        "the goal (the state's, or `goal`); `explain` says why each step is there."))
    def plan(goal: Text | None = None,
             seed: Annotated[list[str], Field(max_length=MAX_TOP_K)] | None = None,
             algorithm: Literal["astar", "ucs", "greedy"] = "astar", explain: bool = False,
             allow_stale: Stale = False) -> dict[str, Any]:
        return answer(service.plan, dict(goal=goal, seed=seed, algorithm=algorithm,
                                         explain=explain, allow_stale=allow_stale))

    @tool(name="state_show", description=(
        "The world state: the goal, the active states and the completed skills."))
    def state_show(allow_stale: Stale = False) -> dict[str, Any]:
        return answer(service.state, dict(allow_stale=allow_stale))

    return server


def run_stdio(service: Service) -> int:
    service.start()
    try:
        build_server(service).run("stdio")
    finally:
        service.stop()
    return 0
