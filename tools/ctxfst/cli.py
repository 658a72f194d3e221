"""The `ctxfst` command line: argument parsing and output only; the work is in the library."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from . import __version__

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 70


def _add_check_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="*", type=Path, metavar="PATH",
                        help="files or folders (default: the project's content and skills)")
    parser.add_argument("--format", choices=("text", "json", "github"), default="text")
    parser.add_argument("--strict", action="store_true",
                        help="fail on warnings as well as errors")
    parser.add_argument("--staged", action="store_true",
                        help="check the knowledge base as staged in the git index")
    parser.add_argument("--strict-spec", action="store_true",
                        help="report SKILL.md top-level fields the Agent Skills "
                        "specification does not allow")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ctxfst", description=(
        "Compile, validate and lint CtxFST knowledge bases."))
    parser.add_argument("--version", action="version", version=f"ctxfst {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_check_options(commands.add_parser(
        "validate", help="check documents and skills; exit 1 on errors"))
    _add_check_options(commands.add_parser(
        "lint", help="quality advice on chunks and entities"))
    build = commands.add_parser("build", help="run the doit build without doit on the PATH")
    build.add_argument("--root", type=Path, default=Path("."),
                       help="the knowledge-base repository (default: here)")
    build.add_argument("doit_args", nargs=argparse.REMAINDER,
                       help="passed to doit (for example: clean, list, embed)")
    init = commands.add_parser("init", help="scaffold a new knowledge-base repository")
    init.add_argument("directory", type=Path)
    init.add_argument("--model", default=None,
                      help="embedding model to configure (default: the measured best)")
    mock = commands.add_parser("generate-mock", help="write a mock knowledge base")
    mock.add_argument("out", type=Path)
    mock.add_argument("--docs", type=int, default=200)
    mock.add_argument("--seed", type=int, default=0)
    skills = commands.add_parser("skills", help="skill tools: migrate, to-prompt")
    skill_commands = skills.add_subparsers(dest="skills_command", required=True,
                                           metavar="SKILLS_COMMAND")
    migrate = skill_commands.add_parser(
        "migrate", help="rewrite v2-dialect SKILL.md files into the Agent Skills form")
    migrate.add_argument("paths", nargs="*", type=Path, metavar="PATH",
                         help="SKILL.md files or folders (default: the project's skills)")
    migrate.add_argument("--check", action="store_true",
                         help="change nothing; exit 1 if a file would change")
    prompt = skill_commands.add_parser(
        "to-prompt", help="print the <available_skills> block for an agent's prompt")
    prompt.add_argument("paths", nargs="*", type=Path, metavar="PATH")
    hook = commands.add_parser("install-hook",
                               help="install a git pre-commit hook that validates staged files")
    hook.add_argument("--force", action="store_true",
                      help="replace an existing pre-commit hook")
    return parser


def _check(args: argparse.Namespace, lint: bool) -> int:
    from .diagnostics import RENDERERS
    from .validation import check_paths, check_staged

    if args.staged:
        if args.paths:
            raise _Usage("--staged takes no paths")
        report = check_staged(lint=lint, strict_spec=args.strict_spec)
    else:
        report = check_paths(args.paths, lint=lint, strict_spec=args.strict_spec)
    sys.stdout.write(RENDERERS[args.format](report.diagnostics, report.summary))
    return report.exit_code(strict=args.strict)


def _install_hook(args: argparse.Namespace) -> int:
    from .hook import install_hook

    path = install_hook(Path.cwd(), force=args.force)
    print(f"installed {path}")
    return EXIT_OK


def _build(args: argparse.Namespace) -> int:
    from .build.runner import run_build

    return run_build(args.root, args.doit_args)


def _init(args: argparse.Namespace) -> int:
    from .config import DEFAULT_MODEL
    from .scaffold import init

    written = init(args.directory, args.model or DEFAULT_MODEL)
    for path in written:
        print(f"created {path}")
    print(f"next: cd {args.directory} && doit")
    return EXIT_OK


def _generate_mock(args: argparse.Namespace) -> int:
    from .mock import generate

    if args.docs < 1:
        raise _Usage("--docs must be at least 1")
    written = generate(args.out, args.docs, args.seed)
    print(f"wrote {len(written)} documents under {args.out / 'content'}")
    return EXIT_OK


def _skill_files(paths: list[Path]) -> list[Path]:
    from .config import find_project
    from .files import walk

    if not paths:
        config = find_project(Path.cwd())
        if config is None:
            raise _Usage("no ctxfst project here; name the skill files or folders")
        paths = [config.skills_dir]
    files: list[Path] = []
    for path in paths:
        if not path.exists():
            raise _Usage(f"{path}: no such file or directory")
        files.extend(p for p in (walk(path, follow_links=True) if path.is_dir() else [path])
                     if p.name == "SKILL.md")
    return files


def _skills(args: argparse.Namespace) -> int:
    files = _skill_files(args.paths)
    if args.skills_command == "migrate":
        from .build.io import write_atomic
        from .skills.migrate import MigrationError, migrate_text

        changed = failed = 0
        for path in files:
            try:
                text, differs = migrate_text(path.read_text(encoding="utf-8"), str(path))
            except (MigrationError, UnicodeDecodeError) as error:
                print(f"{path}: error: {error}", file=sys.stderr)
                failed += 1
                continue
            if differs:
                changed += 1
                print(f"{'would migrate' if args.check else 'migrated'} {path}")
                if not args.check:
                    write_atomic(path, text.encode("utf-8"))
        print(f"{len(files)} skill file(s): {changed} {'to migrate' if args.check else 'migrated'}"
              f", {failed} failed")
        return EXIT_FAILED if failed or (args.check and changed) else EXIT_OK
    from .document.kb import Input, load_kb
    from .document.source import Source
    from .files import display_path
    from .skills.index import build_index, to_prompt

    kb = load_kb(Path.cwd(), [Input(Source(display_path(p), p), True) for p in files])
    problems = [d for d in kb.parse_diagnostics() if d.severity.value == "error"]
    for problem in problems:
        print(f"{problem.path}:{problem.line}:{problem.column}: {problem.severity.value} "
              f"{problem.code}: {problem.message}", file=sys.stderr)
    sys.stdout.write(to_prompt(build_index(kb.skills, Path.cwd())["skills"], Path.cwd()))
    return EXIT_FAILED if problems else EXIT_OK


class _Usage(Exception):
    pass


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from .config import ConfigError
    from .hook import HookError
    from .validation import UsageError

    from .scaffold import ScaffoldError

    try:
        if args.command in ("validate", "lint"):
            return _check(args, lint=args.command == "lint")
        if args.command == "install-hook":
            return _install_hook(args)
        if args.command == "build":
            return _build(args)
        if args.command == "init":
            return _init(args)
        if args.command == "generate-mock":
            return _generate_mock(args)
        if args.command == "skills":
            return _skills(args)
    except (UsageError, ConfigError, HookError, ScaffoldError, _Usage) as error:
        print(f"ctxfst: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except Exception as error:  # a bug: say so briefly; CTXFST_DEBUG=1 shows the traceback
        if os.environ.get("CTXFST_DEBUG"):
            raise
        print(f"ctxfst: internal error: {type(error).__name__}: {error} "
              "(set CTXFST_DEBUG=1 for details)", file=sys.stderr)
        return EXIT_INTERNAL
    parser.error(f"unknown command {args.command}")
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
