"""`ctxfst validate` and `ctxfst lint`: checking documents, skills and extra edges."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from ..cli_args import add_command, verbosity
from .common import (
    Usage,
)


def _add_check_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="*", type=Path, metavar="PATH",
                        help="files or folders (default: the project's content and skills)")
    parser.add_argument("--format", choices=("text", "json", "github"), default="text",
                        help="text lines, one JSON object, or GitHub Actions annotations")
    parser.add_argument("--strict", action="store_true",
                        help="fail on warnings as well as errors")
    parser.add_argument("--staged", action="store_true",
                        help="check the knowledge base as staged in the git index")
    parser.add_argument("--strict-spec", action="store_true",
                        help="report SKILL.md top-level fields the Agent Skills "
                        "specification does not allow")
    parser.add_argument("--no-cache", action="store_true",
                        help="ignore the parse cache in .ctxfst/ (one shipped with an "
                        "untrusted change); also CTXFST_NO_CACHE=1")
    parser.add_argument("--select", type=_codes(False), default=None, metavar="CODES",
                        help="show only these warnings and infos, codes or prefixes "
                        "separated by commas, such as CTX5,CTX106 (replaces [lint] select; "
                        "default: all); errors are always shown")
    parser.add_argument("--ignore", type=_codes(True), default=None, metavar="CODES",
                        help="also hide these warnings and infos (added to [lint] ignore; "
                        "default: none)")


def _codes(silenceable_only: bool):
    def parse(text: str) -> list[str]:
        from ..rule_selection import RuleSettingError, check_prefixes

        try:
            return check_prefixes([c for c in text.split(",") if c.strip()],
                                  silenceable_only=silenceable_only)
        except RuleSettingError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
    return parse


def add_validate(commands) -> None:
    validate = add_command(
        commands, "validate", "check documents and skills; exit 1 on errors",
        ["ctxfst validate", "ctxfst validate content/guide.ctxfst.md --format json",
         "ctxfst validate --staged --strict"],
        description="Check documents, skills and extra edges: syntax, fields, references "
                    "across the knowledge base. Exit 1 on an error (with --strict, on a "
                    "warning too); docs/rules.md explains every code, as `ctxfst rule` does.")
    _add_check_options(validate)
    validate.set_defaults(run=lambda args: _check(args, lint=False))


def add_lint(commands) -> None:
    lint = add_command(
        commands, "lint", "quality advice on chunks and entities",
        ["ctxfst lint", "ctxfst lint --select CTX5 --ignore CTX511", "ctxfst lint --strict",
         "ctxfst lint --diff", "ctxfst lint --fix"],
        description="Everything validate checks, plus quality advice (CTX5xx): near-duplicate "
                    "chunks, short or repetitive contexts, tags, id style. Advice never fails "
                    "the run unless --strict. --fix makes the safe mechanical fixes first "
                    "(missing aliases, id normal forms with every reference renamed, "
                    "repeated list items, chunks for undeclared <Chunk> tags, chunks in "
                    "body order).")
    _add_check_options(lint)
    lint.add_argument("--fix", action="store_true",
                      help="make the safe fixes in place (comments and formatting kept), "
                           "then lint")
    lint.add_argument("--diff", action="store_true",
                      help="show what --fix would change as a unified diff; write nothing")
    lint.set_defaults(run=lambda args: _check(args, lint=True))


def _check(args: argparse.Namespace, lint: bool) -> int:
    from ..diagnostics import RENDERERS
    from ..validation import check_paths, check_staged

    started = time.perf_counter()
    if getattr(args, "fix", False) or getattr(args, "diff", False):
        if args.staged:
            raise Usage("--fix and --diff take no --staged")
        from ..authoring.fix import fix_paths
        from ..diagnostics import text_line as _line

        done, refused = fix_paths(args.paths, write=args.fix and not args.diff)
        (sys.stderr if args.format == "json" else sys.stdout).write(done)
        for problem in refused:
            print(_line(problem), file=sys.stderr)
    if args.staged:
        if args.paths:
            raise Usage("--staged takes no paths")
        report = check_staged(lint=lint, strict_spec=args.strict_spec,
                              use_cache=not args.no_cache, select=args.select,
                              ignore=args.ignore)
    else:
        report = check_paths(args.paths, lint=lint, strict_spec=args.strict_spec,
                             use_cache=not args.no_cache, select=args.select,
                             ignore=args.ignore)
    quiet = verbosity(args) < 0 and args.format != "json"  # (JSON keeps its shape)
    sys.stdout.write(RENDERERS[args.format](report.diagnostics,
                                            None if quiet else report.summary,
                                            color=color_wanted(sys.stdout)))
    if verbosity(args) > 0:
        print(f"ctxfst: {report.hidden} warning(s) and info(s) hidden by [lint] settings, "
              f"--select/--ignore and noqa comments; {time.perf_counter() - started:.2f} s",
              file=sys.stderr)
    return report.exit_code(strict=args.strict)


def color_wanted(stream) -> bool:
    """Colour on a terminal, unless NO_COLOR is set (no-color.org) or TERM is dumb;
    FORCE_COLOR asks for it anywhere (a CI log that shows it)."""
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    return stream.isatty() and os.environ.get("TERM") != "dumb"
