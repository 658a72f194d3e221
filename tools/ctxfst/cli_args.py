"""What every command's parser is made of: one help layout (each option's default and
required options said aloud, examples last), the -q/-v options every command takes, and
a walk over the command tree for shell completion and the generated reference
(cli_help.py)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path


class HelpFormatter(argparse.HelpFormatter):
    """Descriptions wrapped by paragraph, examples as written; every option's help ends
    with its default (or says it is required) unless the text already does."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("examples:"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return "\n\n".join(super(HelpFormatter, self)._fill_text(part, width, indent)
                           for part in text.split("\n\n"))

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if not action.option_strings:
            return text
        if action.required:
            return text if "required" in text else f"{text} (required)".strip()
        shown = default_text(action)
        if shown is None or "default" in text:
            return text
        return f"{text} (default: {shown})".strip()


def default_text(action: argparse.Action) -> str | None:
    """The default as a user types it, or None where there is nothing to say (flags off,
    no value, counters, help and version)."""
    default = action.default
    if (default is None or default is False or default == argparse.SUPPRESS
            or isinstance(action, (argparse._HelpAction, argparse._VersionAction,
                                   argparse._CountAction, argparse._StoreTrueAction))
            or default == []):
        return None
    if isinstance(default, (list, tuple)):
        default = " ".join(str(item) for item in default)
    return str(default).replace("%", "%%")  # (help strings are %-formatted)


def named_path(text: str) -> Path:
    """A path argument that may not be empty (Path("") is ".": it would mean "here")."""
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a path, got an empty one")
    return Path(text)


def format_option(parser: argparse.ArgumentParser, diagrams: bool = False) -> None:
    parser.add_argument("--format", choices=("text", "json", *(("mermaid", "dot", "html")
                                                               if diagrams else ())),
                        default="text",
                        help="text, or one JSON object"
                        + (", or a diagram: to paste (Mermaid, Graphviz DOT) or a "
                           "self-contained HTML page" if diagrams else ""))


def add_command(commands, name: str, summary: str, examples: list[str],
                description: str | None = None, leaf: bool = True) -> argparse.ArgumentParser:
    """A subcommand with its one-line summary (the parent's list), a description (its own
    --help), examples, and, on a command that does the work, -q/-v."""
    parser = commands.add_parser(
        name, help=summary, description=description or summary[:1].upper() + summary[1:] + ".",
        epilog="examples:\n" + "\n".join(f"  {example}" for example in examples),
        formatter_class=HelpFormatter)
    if leaf:
        add_verbosity(parser, top=False)
    return parser


def add_verbosity(parser: argparse.ArgumentParser, top: bool) -> None:
    # Given before or after the command: the command's copies default to SUPPRESS, so they
    # never overwrite what was given before it.
    default = 0 if top else argparse.SUPPRESS
    parser.add_argument("-q", "--quiet", action="count", default=default,
                        help="print only findings and errors (no summaries, notes or progress)")
    parser.add_argument("-v", "--verbose", action="count", default=default,
                        help="say more: what settings hid, timings, and a traceback on an "
                             "internal error")


def verbosity(args: argparse.Namespace) -> int:
    """Below 0 quiet, 0 normal, above 0 verbose."""
    return getattr(args, "verbose", 0) - getattr(args, "quiet", 0)


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def summaries(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Each subcommand's one-line summary, as the parent's --help lists it."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return {choice.dest: choice.help or "" for choice in action._choices_actions}
    return {}


def walk(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
         ) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every command of the tree, the root first, parents before their subcommands."""
    yield path, parser
    for name, sub in subcommands(parser).items():
        yield from walk(sub, path + (name,))


def options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [action for action in parser._actions if action.option_strings]
