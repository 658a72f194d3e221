"""The project's own commands: `build`, `init`, `generate-mock`, `install-hook`,
`completion`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..cli_args import add_command, named_path, verbosity
from ..completion import SHELLS
from .common import (
    EXIT_OK,
    say,
    whole_number,
)

MAX_MOCK_DOCS = 1_000_000


def add_build(commands) -> None:
    build = add_command(commands, "build", "run the doit build without doit on the PATH",
                        ["ctxfst build", "ctxfst build --root kb", "ctxfst build list",
                         "ctxfst build clean"],
                        description="Run the build (what `doit` runs in the project): compile "
                                    "content/ and skills/ into build/, incrementally.")
    build.add_argument("--root", type=Path, default=Path("."),
                       help="the knowledge-base repository")
    build.add_argument("--engine", choices=("local", "ray"), default=None,
                       help="where cache misses are embedded: this process, or a Ray "
                            "cluster (RAY_ADDRESS, else a local one); default: the "
                            "`engine` setting")
    build.add_argument("doit_args", nargs=argparse.REMAINDER, metavar="DOIT_ARGS",
                       help="passed to doit (for example: clean, list, embed)")
    build.set_defaults(run=_build)


def add_init(commands) -> None:
    init = add_command(commands, "init", "scaffold a new knowledge-base repository",
                       ["ctxfst init my-kb", "ctxfst init my-kb --model hash-256"],
                       description="Write a new knowledge-base repository: settings, a "
                                   "dodo.py, a pre-commit configuration, an example "
                                   "document and a skill in the Agent Skills form.")
    init.add_argument("directory", type=named_path, metavar="DIRECTORY",
                      help="a new or existing folder (nothing in it is overwritten)")
    init.add_argument("--model", default=None,
                      help="embedding model to configure (default: chosen by the notes "
                           "already in the folder: e5-small where a quarter or more is "
                           "CJK text and its extra is installed, else minilm)")
    init.set_defaults(run=_init)


def add_generate_mock(commands) -> None:
    mock = add_command(commands, "generate-mock", "write a mock knowledge base",
                       ["ctxfst generate-mock /tmp/kb --docs 1000",
                        "ctxfst generate-mock /tmp/career --career --seed 7"],
                       description="Write a generated knowledge base, for benchmarks and "
                                   "demos.")
    mock.add_argument("out", type=named_path, metavar="OUT", help="the folder to write")
    mock.add_argument("--docs", type=whole_number(1, MAX_MOCK_DOCS), default=200,
                      help=f"how many documents (1 to {MAX_MOCK_DOCS:,})")
    mock.add_argument("--seed", type=int, default=0, help="the random seed")
    mock.add_argument("--career", action="store_true",
                      help="add the course-style career articles (for retrieval demos)")
    mock.set_defaults(run=_generate_mock)


def add_install_hook(commands) -> None:
    hook = add_command(commands, "install-hook",
                       "install a git pre-commit hook that validates staged files",
                       ["ctxfst install-hook", "ctxfst install-hook --force"])
    hook.add_argument("--force", action="store_true",
                      help="replace an existing pre-commit hook")
    hook.set_defaults(run=_install_hook)


def add_completion(commands, root: argparse.ArgumentParser) -> None:
    completion = add_command(
        commands, "completion", "print a shell completion script",
        ["ctxfst completion bash > ~/.local/share/bash-completion/completions/ctxfst",
         "ctxfst completion zsh > \"${fpath[1]}/_ctxfst\"",
         "ctxfst completion fish > ~/.config/fish/completions/ctxfst.fish"],
        description="Print a completion script for bash, zsh or fish: commands, options and "
                    "their choices complete; paths complete as files.")
    completion.add_argument("shell", choices=SHELLS, metavar="SHELL",
                            help="bash, zsh or fish")
    completion.set_defaults(run=lambda args: _completion(args, root))


def _completion(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from ..completion import script

    sys.stdout.write(script(parser, args.shell))
    return EXIT_OK


def _install_hook(args: argparse.Namespace) -> int:
    from ..hook import install_hook

    path = install_hook(Path.cwd(), force=args.force)
    say(args, f"installed {path}")
    return EXIT_OK


def _build(args: argparse.Namespace) -> int:
    from ..pipeline.runner import run_build

    return run_build(args.root, args.doit_args, quiet=verbosity(args) < 0, engine=args.engine)


def _init(args: argparse.Namespace) -> int:
    from ..diagnostics import escape
    from ..scaffold import choose_model, init

    model, why = (args.model, "--model") if args.model else choose_model(args.directory)
    written = init(args.directory, model)
    for path in written:
        say(args, f"created {escape(path)}")
    say(args, f"embedding model: {escape(model)} ({escape(why)})")
    say(args, f"next: cd {escape(args.directory)} && doit")
    return EXIT_OK


def _generate_mock(args: argparse.Namespace) -> int:
    from ..diagnostics import escape
    from ..mock import MockError, generate, generate_career, prepare_target

    try:
        prepare_target(args.out)
        written = (generate_career if args.career else generate)(args.out, args.docs,
                                                                  args.seed)
    except OSError as error:
        raise MockError(f"cannot write the mock knowledge base into {args.out}: "
                        f"{error.strerror or error}") from None
    say(args, f"wrote {len(written)} documents under {escape(args.out / 'content')}")
    return EXIT_OK
