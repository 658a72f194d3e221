"""`ctxfst serve` and `ctxfst mcp`: the warm server and the MCP endpoint."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..cli_args import add_command, verbosity
from .common import (
    Usage,
    at_least_zero_seconds,
    build_option,
    positive,
    seconds,
)


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (0 to 65535)")
    return value


def _server_options(parser: argparse.ArgumentParser) -> None:
    """What `serve` and `mcp` share: how they watch the build, and which build. (The
    defaults are serve.POLL_SECONDS and STALE_CHECK_SECONDS, not imported: parsing stays
    light; a test holds them equal.)"""
    parser.add_argument("--poll", type=seconds, default=0.5,
                        help="seconds between looks at the build's manifest")
    parser.add_argument("--stale-check", type=at_least_zero_seconds, default=10.0,
                        help="seconds between comparisons of the sources with the build "
                             "(0: never)")
    build_option(parser)
    parser.add_argument("--allow-stale", action="store_true",
                        help="answer even when the sources changed since the build")


def add_serve(commands) -> None:
    serving = add_command(
        commands, "serve", "answer queries, facts, plans and the state over local HTTP",
        ["ctxfst serve", "ctxfst serve --port 9000 --stale-check 2"],
        description="A long-running server on 127.0.0.1 that loads the build's index and "
                    "model once and answers POST /query, /facts/ask, /plan and GET /state "
                    "and /health as JSON (docs/serve.md). It switches to a new build once "
                    "it is fully published and checked; SIGTERM stops it.")
    serving.add_argument("--port", type=_port, default=8765,  # = serve.DEFAULT_PORT
                         help="the TCP port on 127.0.0.1 (0: any free one, printed)")
    serving.add_argument("--workers", type=positive, default=1,
                         help="processes answering (each loads the build; 2 or more use "
                              "more CPUs for concurrent clients)")
    _server_options(serving)
    serving.set_defaults(run=_serve)


def add_mcp(commands) -> None:
    mcp = add_command(
        commands, "mcp", "the same answers as MCP tools over stdio, for agent runtimes",
        ["ctxfst mcp", "ctxfst mcp --build build"],
        description="A Model Context Protocol server on standard input and output with the "
                    "tools query, facts_ask, plan and state_show (JSON schemas, the answers "
                    "of the matching --format json commands; docs/serve.md). Needs "
                    "`pip install 'ctxfst[mcp]'`.")
    _server_options(mcp)
    mcp.set_defaults(run=_serve)


def _serve(args: argparse.Namespace) -> int:
    from ..serve import Service, log_to_stderr, serve, share_cpus

    if args.command == "serve" and args.workers > 1:
        share_cpus(args.workers)  # (before anything imports numpy)
    from ..retrieval.search import RetrievalError

    def make_service(prefix: str) -> Service:
        log = (lambda text: log_to_stderr(prefix + text)) if verbosity(args) >= 0 else None
        return Service(Path.cwd(), args.build, args.allow_stale, args.poll, args.stale_check,
                       log)

    try:
        service = make_service("")  # (a usage error, before any port is bound)
    except RetrievalError as error:
        raise Usage(str(error)) from None
    if args.command == "mcp":
        try:
            import mcp.server.mcpserver  # noqa: F401 (the extra)
        except ImportError as error:
            raise Usage(f"`ctxfst mcp` needs the MCP SDK ({error}): pip install "
                         "'ctxfst[mcp]'") from None
        from ..mcp_server import run_stdio

        return run_stdio(service)

    def ready(address: tuple[str, int]) -> None:
        host, port = address
        print(f"ctxfst serve: listening on http://{host}:{port}", file=sys.stderr, flush=True)
        if args.workers == 1 and service.current is None:
            print(f"ctxfst serve: no build to serve yet ({service.load_error}); waiting for "
                  "one", file=sys.stderr, flush=True)

    try:
        return serve(lambda prefix: service if args.workers == 1 else make_service(prefix),
                     args.port, args.workers, ready)
    except OSError as error:  # the port is taken, or not ours to bind
        raise Usage(f"--port {args.port}: {error.strerror or error}") from None
