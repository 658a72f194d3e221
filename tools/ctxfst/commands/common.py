"""What the commands share: exit codes, the usage error, output helpers, argument types
and the options several commands take."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from pathlib import Path

from ..cli_args import verbosity

# One policy for every command (docs/cli.md): 0 done (an answer, even an empty one),
# 1 findings or work that did not succeed, 2 it cannot run as asked (arguments, settings,
# a missing or damaged build or state file), 70 a bug.
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 70
EXIT_BROKEN_PIPE = 141  # as a process killed by SIGPIPE
MAX_TIMEOUT_S = 86_400.0  # a day; the OS cannot wait on much larger timeouts


class Usage(Exception):
    """The command cannot run as asked (exit 2); the message says why."""


def say(args: argparse.Namespace, text: str) -> None:
    """A progress or summary line: not with --quiet."""
    if verbosity(args) >= 0:
        print(text)


def print_data(data, fmt: str, lines: list[str]) -> None:
    """JSON, or the text lines with control characters made visible in each (ids and
    summaries come from the knowledge base and its scripts: a newline in one must not
    forge a line)."""
    from ..diagnostics import escape_lines, output_json

    if fmt == "json":
        print(output_json(data))
    else:
        print(escape_lines(lines))


def whole_number(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse type: a whole number from low (to high), or an error that says so."""
    bounds = f"of at least {low}" if high is None else f"from {low} to {high:,}"

    def parse(text: str) -> int:
        value = int(text) if _DIGITS.fullmatch(text.strip()) else None
        if value is None or value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"expected a whole number {bounds}, got {text!r}")
        return value

    return parse


def seconds_up_to(limit: float, zero: bool = False) -> Callable[[str], float]:
    """An argparse type: seconds above 0 (or 0 itself, with zero) and at most limit."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        if zero and value == 0:
            return 0.0
        if not 0 < value <= limit:  # also refuses nan
            raise argparse.ArgumentTypeError(f"expected seconds above 0 and at most "
                                             f"{limit:g}, got {text!r}")
        return value

    return parse


_DIGITS = re.compile(r"[0-9]+")
positive = whole_number(1)
at_least_zero = whole_number(0)
seconds = seconds_up_to(MAX_TIMEOUT_S)
at_least_zero_seconds = seconds_up_to(MAX_TIMEOUT_S, zero=True)


def bridge_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bridge-model", default="use-multilingual",
                        help="multilingual model that seeds graph mode when the build's model "
                        "cannot read the query; none turns it off")


def build_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--build", type=Path, default=None,
                        help="build folder (default: the project's)")


def stale_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--allow-stale", action="store_true",
                        help="read build/ even when sources changed since it was built")
