"""`ctxfst skills migrate|to-prompt`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..cli_args import add_command
from .common import (
    EXIT_FAILED,
    EXIT_OK,
    Usage,
    say,
)


def add_skills(commands) -> None:
    skills = add_command(commands, "skills", "skill tools: migrate, to-prompt",
                         ["ctxfst skills migrate --check", "ctxfst skills to-prompt"],
                         leaf=False)
    skill_commands = skills.add_subparsers(dest="skills_command", required=True,
                                           metavar="SKILLS_COMMAND")
    migrate = add_command(
        skill_commands, "migrate", "rewrite v2-dialect SKILL.md files into the Agent Skills form",
        ["ctxfst skills migrate", "ctxfst skills migrate skills/analyze-gaps --check"],
        description="Rewrite v2-dialect SKILL.md files into the Agent Skills form (the "
                    "world-model fields under metadata); the body is kept byte for byte.")
    migrate.add_argument("paths", nargs="*", type=Path, metavar="PATH",
                         help="SKILL.md files or folders (default: the project's skills)")
    migrate.add_argument("--check", action="store_true",
                         help="change nothing; exit 1 if a file would change")
    migrate.add_argument("--drop-comments", action="store_true",
                         help="rewrite files whose frontmatter has YAML comments, which the "
                              "rewrite loses (without it such a file is refused, naming "
                              "the lines)")
    prompt = add_command(
        skill_commands, "to-prompt", "print the <available_skills> block for an agent's prompt",
        ["ctxfst skills to-prompt", "ctxfst skills to-prompt skills/analyze-gaps"])
    prompt.add_argument("paths", nargs="*", type=Path, metavar="PATH",
                        help="SKILL.md files or folders (default: the project's skills)")
    skills.set_defaults(run=_skills)


def _skill_files(paths: list[Path]) -> list[Path]:
    from ..config import find_project
    from ..files import walk

    if not paths:
        config = find_project(Path.cwd())
        if config is None:
            raise Usage("no ctxfst project here; name the skill files or folders")
        paths = [config.skills_dir]
    files: list[Path] = []
    for path in paths:
        if not path.exists():
            raise Usage(f"{path}: no such file or directory")
        files.extend(p for p in (walk(path, follow_links=True) if path.is_dir() else [path])
                     if p.name == "SKILL.md")
    return files


def _skills(args: argparse.Namespace) -> int:
    files = _skill_files(args.paths)
    if args.skills_command == "migrate":
        from ..artifacts.io import read_bytes_no_follow, write_atomic
        from ..diagnostics import escape
        from ..skills.migrate import MigrationError, migrate_text

        changed = failed = 0
        for path in files:
            try:
                if path.is_symlink():  # rewriting would replace the link with a copy
                    raise MigrationError("is a symbolic link; migrate the file it points to")
                # bytes decoded as they are: CRLF files stay CRLF (the body is kept byte
                # for byte); never through a link, never a FIFO
                text, differs = migrate_text(read_bytes_no_follow(path).decode("utf-8"),
                                             str(path), args.drop_comments)
                if differs and not args.check:
                    write_atomic(path, text.encode("utf-8"))  # keeps the file's mode
            except (MigrationError, UnicodeDecodeError, OSError) as error:
                reason = error.strerror or error if isinstance(error, OSError) else error
                print(f"{escape(path)}: error: {escape(reason)}", file=sys.stderr)
                failed += 1
                continue
            if differs:
                changed += 1
                print(f"{'would migrate' if args.check else 'migrated'} {escape(path)}")
        say(args, f"{len(files)} skill file(s): {changed} "
             f"{'to migrate' if args.check else 'migrated'}, {failed} failed")
        return EXIT_FAILED if failed or (args.check and changed) else EXIT_OK
    from ..document.kb import Input
    from ..document.source import Source
    from ..files import display_path
    from ..kb import load_kb
    from ..skills.index import build_index, to_prompt

    kb = load_kb(Path.cwd(), [Input(Source(display_path(p), p), True) for p in files])
    problems = [d for d in kb.parse_diagnostics() if d.severity.value == "error"]
    from ..diagnostics import text_line

    for problem in problems:
        print(text_line(problem), file=sys.stderr)
    sys.stdout.write(to_prompt(build_index(kb.skills, Path.cwd())["skills"], Path.cwd()))
    return EXIT_FAILED if problems else EXIT_OK
