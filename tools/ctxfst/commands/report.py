"""`ctxfst report`: the published build as one HTML page."""

from __future__ import annotations

import argparse
import os

from ..cli_args import add_command, named_path
from .common import (
    EXIT_OK,
    Usage,
    say,
    stale_option,
)


def add_report(commands) -> None:
    report = add_command(
        commands, "report", "the entity graph, world model and build as one HTML page",
        ["ctxfst report", "ctxfst report --out site/kb.html", "ctxfst report --no-lint"],
        description="Write a self-contained HTML report of the published build: the entity "
                    "graph (search, profiles, edge scores), the world model with unreachable "
                    "states and skills flagged, stage timings, artifacts, and validation and "
                    "lint findings. It opens from a file, with no network.")
    report.add_argument("--out", type=named_path, default=None,
                        help="file to write (default: build/report.html)")
    report.add_argument("--no-lint", action="store_true",
                        help="leave out the findings (lint parses every source)")
    stale_option(report)
    report.set_defaults(run=_report)


def _report(args: argparse.Namespace) -> int:
    from ..artifacts.io import write_atomic
    from ..config import check_inside, typed_path
    from ..freshness import stale_reason
    from ..report import DEFAULT_NAME, ReportError, make_report
    from ..runtime.commands import RuntimeUsage, project

    try:
        config = project()
    except RuntimeUsage as error:
        raise Usage(str(error)) from None
    out = typed_path(config, args.out, "--out") if args.out else check_inside(
        config.root, config.build_dir / DEFAULT_NAME, "the report")
    if not args.allow_stale:
        reason = stale_reason(config, config.build_dir)
        if reason:
            raise Usage(f"{reason} (or pass --allow-stale)")
    try:
        page, _ = make_report(config, out, lint=not args.no_lint)
    except ReportError as error:
        raise Usage(str(error)) from None
    try:
        write_atomic(out, page)
    except OSError as error:
        raise Usage(f"--out {args.out or out}: {error.strerror or error}") from None
    say(args, f"wrote {os.path.relpath(out, config.root)} ({len(page):,} bytes)")
    return EXIT_OK
