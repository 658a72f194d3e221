"""`ctxfst chunk`: arguments and output only; the work is in convert.py and chunk.py."""

from __future__ import annotations

import argparse
import sys

from ..diagnostics import escape, output_json, text_line


def _tokens(text: str) -> int:
    value = int(text)
    if not 16 <= value <= 100_000:
        raise argparse.ArgumentTypeError("expected a number of tokens from 16 to 100000")
    return value


def _min_tokens(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("expected 0 or more tokens")
    return value


def _category(text: str) -> str:
    from .chunk import check_category

    try:
        return check_category(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def add_parser(commands) -> None:
    from ..cli_help import add_command, format_option, named_path
    from .chunk import DEFAULT_CATEGORY, DEFAULT_MAX_TOKENS, DEFAULT_MIN_TOKENS

    chunk = add_command(
        commands, "chunk", "turn plain Markdown notes into CtxFST drafts",
        ["ctxfst chunk notes/ --out content/", "ctxfst chunk README.md --out content/ --dry-run",
         "ctxfst chunk notes/ --out content/ --catalog content/entities.ctxfst.md --force"],
        description="Turn plain Markdown notes (with or without ordinary frontmatter) into "
                    "CtxFST drafts, offline and deterministically: chunks follow the headings "
                    "and fit a token budget (code blocks and tables are never cut), ids come "
                    "from headings, tags from headings and the note's frontmatter, entity "
                    "links from the catalog's names and aliases. The note's text is kept "
                    "byte for byte inside the <Chunk> tags; names not in the catalog are "
                    "proposed as comments for review. Drafts are validated with the "
                    "knowledge base they join and written all or none.")
    chunk.add_argument("notes", nargs="+", type=named_path, metavar="NOTES",
                       help="Markdown files, or folders searched for *.md")
    chunk.add_argument("--out", type=named_path, required=True,
                       help="the folder the drafts go to (a folder given in NOTES keeps its "
                            "layout below it); usually the project's content/")
    chunk.add_argument("--catalog", type=named_path, action="append", default=[],
                       metavar="PATH",
                       help="CtxFST documents whose entities may be linked as well as the "
                            "project's (repeatable); a draft declares those it links")
    chunk.add_argument("--max-tokens", type=_tokens, default=DEFAULT_MAX_TOKENS,
                       help="a chunk's budget, in tokens (a Latin word counts 4/3, a CJK "
                            "character 1)")
    chunk.add_argument("--min-tokens", type=_min_tokens, default=DEFAULT_MIN_TOKENS,
                       help="a smaller section joins the next one while both fit")
    chunk.add_argument("--category", type=_category, default=DEFAULT_CATEGORY,
                       help="the first part of every chunk id (category:topic)")
    chunk.add_argument("--force", action="store_true", help="replace drafts that exist")
    chunk.add_argument("--dry-run", action="store_true",
                       help="show the chunks each note would get; write nothing")
    format_option(chunk)


def run(args: argparse.Namespace) -> int:
    from ..cli_help import verbosity
    from ..validation import UsageError
    from .chunk import Options
    from .convert import convert

    options = Options(args.max_tokens, args.min_tokens, args.category)
    try:
        result = convert(args.notes, args.out, options, force=args.force,
                         catalog_paths=args.catalog, dry_run=args.dry_run)
    except FileNotFoundError as error:
        raise UsageError(str(error)) from None
    if args.format == "json":
        sys.stdout.write(output_json(_payload(result)) + "\n")
    else:
        for diagnostic in result.diagnostics:
            print(text_line(diagnostic), file=sys.stderr)
        if verbosity(args) >= 0:
            _print_text(result, args.dry_run)
    return 1 if result.failed else 0


def _payload(result) -> dict:
    from ..files import display_path

    return {
        "written": [display_path(path) for path in result.written],
        "drafts": [{
            "note": draft.source,
            "draft": display_path(draft.target),
            "title": draft.title,
            "chunks": [{"id": c.id, "line_start": c.start + 1, "line_end": c.end,
                        "tokens": c.tokens, "tags": c.tags, "entities": c.entities}
                       for c in draft.chunks],
            "declared": [entity.id for entity in draft.declared],
            "candidates": [{"name": c.name, "id": c.entity_id, "mentions": c.mentions,
                            "line": c.line} for c in draft.candidates],
        } for draft in result.drafts],
        "skipped": result.skipped,
        "diagnostics": [d.to_dict() for d in result.diagnostics],
    }


def _print_text(result, dry_run: bool) -> None:
    from ..files import display_path

    lines: list[str] = []
    for draft in result.drafts:
        links = sum(len(c.entities) for c in draft.chunks)
        lines.append(f"{draft.source} -> {display_path(draft.target)}: "
                     f"{len(draft.chunks)} chunk(s), {links} entity link(s), "
                     f"{len(draft.candidates)} candidate(s) to review")
        for chunk in draft.chunks:
            linked = " ".join(chunk.entities) or "(no entity)"
            lines.append(f"  {chunk.id}  ~{chunk.tokens} tokens  {linked}")
    for path in result.skipped:
        lines.append(f"{path}: skipped, CtxFST already")
    if result.failed:
        lines.append("nothing written: the errors above stop the whole batch")
    elif dry_run:
        lines.append(f"{len(result.drafts)} draft(s) planned; nothing written (--dry-run)")
    else:
        lines.append(f"{len(result.written)} draft(s) written, each valid in its knowledge "
                     "base; review the entity candidates, then `ctxfst validate`")
    sys.stdout.write("".join(escape(line) + "\n" for line in lines))

