"""docs/cli-reference.md, every command's --help, generated from the parsers:

    python -m ctxfst.cli_help --write     # rewrite it
    python -m ctxfst.cli_help             # exit 1 when it drifted from the code
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from .cli_args import walk


def reference(parser: argparse.ArgumentParser) -> str:
    """docs/cli-reference.md: every command's --help, in the tree's order."""
    # argparse wraps to COLUMNS - 2: the file must not follow the terminal it is made in
    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "90"
    try:
        parts = ["# Command reference\n",
                 "Every command's `--help`, generated (`python -m ctxfst.cli_help --write`; "
                 "a test fails when it drifts from the code). [cli.md](cli.md) explains exit "
                 "codes, JSON outputs, completion and colour.\n"]
        for path, command in walk(parser):
            title = " ".join(("ctxfst",) + path)
            parts.append(f"## {title}\n\n```text\n{command.format_help().rstrip()}\n```\n")
        return "\n".join(parts)
    finally:
        if previous is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = previous


def main(argv: list[str] | None = None) -> int:
    import sys

    from .cli import build_parser

    parser = argparse.ArgumentParser(description="Write or check docs/cli-reference.md.")
    parser.add_argument("--write", action="store_true", help="rewrite the file")
    parser.add_argument("--file", type=Path,
                        default=Path(__file__).resolve().parents[2] / "docs" / "cli-reference.md")
    args = parser.parse_args(argv)
    text = reference(build_parser())
    if args.write:
        args.file.write_text(text, encoding="utf-8")
        return 0
    if not args.file.is_file() or args.file.read_text(encoding="utf-8") != text:
        print(f"out of date: {args.file} (python -m ctxfst.cli_help --write)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
