"""`ctxfst rule`: what a diagnostic code means."""

from __future__ import annotations

import argparse

from ..cli_args import add_command, format_option
from .common import (
    EXIT_OK,
    Usage,
    print_data,
)


def add_rule(commands) -> None:
    rule = add_command(commands, "rule", "explain a diagnostic code",
                       ["ctxfst rule CTX205", "ctxfst rule CTX5", "ctxfst rule --format json"],
                       description="Explain a diagnostic code: its severity, what it means and "
                                   "whether it can be silenced. A prefix (CTX5) or none lists "
                                   "codes.")
    from ..diagnostics import RULES

    rule.add_argument("code", nargs="?", default=None, metavar="CODE",
                      help="a code such as CTX205, or a prefix such as CTX5 (default: all)"
                      ).completions = sorted(RULES)
    format_option(rule)
    rule.set_defaults(run=_rule)


def _rule(args: argparse.Namespace) -> int:
    from ..rule_docs import UnknownRule, explain, text_lines

    try:
        rules = explain(args.code)
    except UnknownRule as error:
        raise Usage(str(error)) from None
    print_data({"rules": rules}, args.format, text_lines(rules))
    return EXIT_OK
