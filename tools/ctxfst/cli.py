"""The `ctxfst` command line: the root parser, the exit-code policy and the handling of
errors; each command family lives in ctxfst/commands/, the work in the library."""

from __future__ import annotations

import argparse
import os
import sys

from .cli_args import HelpFormatter, add_verbosity, verbosity
from .commands import add_all
from .commands.common import EXIT_BROKEN_PIPE, EXIT_INTERNAL, EXIT_USAGE, Usage
from .version import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ctxfst", formatter_class=HelpFormatter,
        description="Compile, validate and lint CtxFST knowledge bases; retrieve from the "
                    "build; plan and run skills toward a goal.",
        epilog="examples:\n  ctxfst validate\n  ctxfst query \"Hono on Cloudflare Workers\"\n"
               "  ctxfst rule CTX205\n\n`ctxfst COMMAND --help` shows a command's options; "
               "docs/cli-reference.md lists them all.")
    parser.add_argument("--version", action="version", version=f"ctxfst {__version__}")
    add_verbosity(parser, top=True)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_all(commands, parser)
    return parser


def _check_text_arguments(args: argparse.Namespace) -> None:
    """Text arguments must be text: bytes that are not UTF-8 reach Python as lone
    surrogates, which no output, JSON or model can carry (paths may hold any bytes)."""
    for name, value in vars(args).items():
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str) and any("\ud800" <= char <= "\udfff" for char in item):
                raise Usage(f"the {name.replace('_', '-')} argument is not valid UTF-8 text")


def _usage_errors() -> tuple[type[Exception], ...]:
    """What a command raises when it cannot run as asked (exit 2). Imported only once an
    exception is being handled: a query must not load the validator to be able to fail."""
    from .config import ConfigError
    from .files import UnreadableFolder
    from .hook import HookError
    from .mock import MockError
    from .runtime.commands import RuntimeUsage
    from .runtime.world import WorldError
    from .scaffold import ScaffoldError
    from .validation import UsageError

    return (UsageError, ConfigError, HookError, ScaffoldError, MockError, RuntimeUsage,
            WorldError, UnreadableFolder, Usage)


def _worker_died() -> type[Exception]:
    from .parallel import WorkerDied

    return WorkerDied


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from .diagnostics import escape

    try:
        _check_text_arguments(args)
        return args.run(args)
    except KeyboardInterrupt:
        return 130
    except _usage_errors() as error:
        from .config import ConfigError

        text = error.render() if isinstance(error, ConfigError) else f"ctxfst: error: {error}"
        print(escape(text), file=sys.stderr)
        return EXIT_USAGE
    except _worker_died() as error:  # a parallel parse lost a worker (killed, out of memory)
        print(f"ctxfst: error: {escape(error)}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # the reader stopped early (`| head`): not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no flush error at exit
        return EXIT_BROKEN_PIPE
    except Exception as error:  # a bug: say so briefly; -v or CTXFST_DEBUG=1 shows the traceback
        if os.environ.get("CTXFST_DEBUG") or verbosity(args) > 0:
            raise
        print(f"ctxfst: internal error: {type(error).__name__}: {escape(error)} "
              "(set CTXFST_DEBUG=1 for details)", file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
