"""`ctxfst chunk`: arguments and output only; the work is in convert.py and chunk.py."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..diagnostics import escape, output_json, text_line
from .common import at_least_zero, seconds_up_to, whole_number


def _category(text: str) -> str:
    from ..authoring import check_category

    try:
        return check_category(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def add_chunk(commands) -> None:
    from ..authoring import DEFAULT_CATEGORY, DEFAULT_MAX_TOKENS, DEFAULT_MIN_TOKENS
    from ..cli_args import add_command, format_option, named_path

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
    chunk.add_argument("--max-tokens", type=whole_number(16, 100_000), default=DEFAULT_MAX_TOKENS,
                       help="a chunk's budget, in tokens (a Latin word counts 4/3, a CJK "
                            "character 1)")
    chunk.add_argument("--min-tokens", type=at_least_zero, default=DEFAULT_MIN_TOKENS,
                       help="a smaller section joins the next one while both fit")
    chunk.add_argument("--category", type=_category, default=DEFAULT_CATEGORY,
                       help="the first part of every chunk id (category:topic)")
    chunk.add_argument("--force", action="store_true", help="replace drafts that exist")
    chunk.add_argument("--dry-run", action="store_true",
                       help="show the chunks each note would get; write nothing")
    format_option(chunk)
    chunk.set_defaults(run=run)


def add_contextualize(commands) -> None:
    from ..cli_args import add_command, format_option

    command = add_command(
        commands, "contextualize", "fill missing chunk contexts through a language model",
        ["ctxfst contextualize --base-url http://127.0.0.1:8080/v1 --model qwen2.5-7b",
         "ctxfst contextualize content/guide.ctxfst.md --provider anthropic "
         "--model claude-3-5-haiku-latest --dry-run",
         "ctxfst contextualize --provider command --command 'python3 ask.py'"],
        description="Give every chunk with no context one from a language model "
                    "(Contextual Retrieval: the document and the passage in, a short "
                    "situating context out), through an OpenAI-compatible endpoint (local "
                    "servers such as llama.cpp, vLLM or Ollama too), the Anthropic API, or "
                    "a command that reads JSON on stdin and writes JSON on stdout. Answers "
                    "are cached in .ctxfst/cache/, so a rerun asks nothing twice; contexts "
                    "are written into the frontmatter with everything else kept. API keys "
                    "come from the environment only. Never part of validate or the build.")
    command.add_argument("paths", nargs="*", type=Path, metavar="PATH",
                         help="documents or folders (default: the project's content)")
    command.add_argument("--provider", choices=("openai", "anthropic", "command"),
                         default="openai",
                         help="openai: any OpenAI-compatible chat endpoint (--base-url)")
    command.add_argument("--model", default=None, help="the model to ask (not for command)")
    command.add_argument("--base-url", default=None,
                         help="the endpoint's base, such as https://api.openai.com/v1 or "
                              "http://127.0.0.1:8080/v1 (anthropic: its API by default)")
    command.add_argument("--api-key-env", default=None, metavar="NAME",
                         help="the environment variable holding the key (default: "
                              "OPENAI_API_KEY, optional for a local server; "
                              "ANTHROPIC_API_KEY)")
    command.add_argument("--command", dest="provider_command", default=None, metavar="CMD",
                         help='for --provider command: reads {"system", "prompt", '
                              '"max_tokens", "model"} on stdin, prints {"text": "..."}')
    command.add_argument("--timeout", type=seconds_up_to(3600), default=60.0,
                         help="seconds a request may take")
    command.add_argument("--retries", type=at_least_zero, default=3,
                         help="retries of a request that timed out, was rate-limited (429, "
                              "Retry-After honoured up to 30 s) or met a server error")
    command.add_argument("--jobs", type=whole_number(1, 64), default=4, help="requests at once")
    command.add_argument("--dry-run", action="store_true",
                         help="show what would be asked and its size; ask nothing")
    format_option(command)
    command.set_defaults(run=run_contextualize)


def run_contextualize(args: argparse.Namespace) -> int:
    from ..authoring.contextualize import contextualize, load_documents
    from ..authoring.providers import make_provider
    from ..config import find_project
    from ..remote import HttpSettings
    from ..validation import UsageError

    for path in args.paths:
        if not path.exists():
            raise UsageError(f"{path}: no such file or directory")
    config = find_project(args.paths[0] if args.paths else Path.cwd())
    if args.paths:
        paths = args.paths
    elif config is not None:
        paths = [config.content_dir]
    else:
        raise UsageError("no ctxfst project here; name the documents to contextualize")
    try:
        provider = make_provider(args.provider, args.model, args.base_url,
                                 args.provider_command, args.api_key_env,
                                 HttpSettings(timeout=args.timeout, retries=args.retries))
    except ValueError as error:
        raise UsageError(str(error)) from None
    documents, problems = load_documents(paths)
    cache = config.cache_dir / "contexts.sqlite" if config is not None else None
    outcome = contextualize(documents, provider, cache, args.jobs, args.dry_run)
    outcome.diagnostics = problems + outcome.diagnostics
    if args.format == "json":
        sys.stdout.write(output_json(_contexts_payload(outcome, args.dry_run)) + "\n")
    else:
        for diagnostic in outcome.diagnostics:
            print(text_line(diagnostic), file=sys.stderr)
        _print_contexts(outcome, args.dry_run, cache is not None)
    return 1 if outcome.failed else 0


def _contexts_payload(outcome, dry_run: bool) -> dict:
    return {
        "dry_run": dry_run,
        "chunks": [{"path": job.path, "chunk_id": job.chunk_id, "cached": job.cached,
                    "prompt_chars": len(job.request.system) + len(job.request.prompt),
                    "context": job.context, "error": job.error} for job in outcome.jobs],
        "written": outcome.written,
        "diagnostics": [d.to_dict() for d in outcome.diagnostics],
    }


def _print_contexts(outcome, dry_run: bool, cached: bool) -> None:
    from ..authoring.chunk import estimate_tokens

    lines: list[str] = []
    asked = [job for job in outcome.jobs if not job.cached]
    for job in outcome.jobs:
        if dry_run:
            size = estimate_tokens(job.request.prompt)
            state = "cached" if job.cached else f"ask, ~{size} tokens in"
            lines.append(f"{job.path}: {job.chunk_id}: {state}")
        elif job.error:
            lines.append(f"{job.path}: {job.chunk_id}: failed: {job.error}")
        else:
            lines.append(f"{job.path}: {job.chunk_id}: {job.context}")
    if dry_run:
        total = sum(estimate_tokens(job.request.prompt) for job in asked)
        lines.append(f"{len(outcome.jobs)} chunk(s) without a context: {len(asked)} to ask "
                     f"(~{total} tokens in), {len(outcome.jobs) - len(asked)} cached; "
                     "nothing asked (--dry-run)")
    else:
        failed = sum(1 for job in outcome.jobs if job.error)
        lines.append(f"{len(outcome.jobs)} chunk(s) without a context: {len(asked)} asked, "
                     f"{len(outcome.jobs) - len(asked)} from the cache, {failed} failed; "
                     f"{len(outcome.written)} file(s) written"
                     + ("" if cached else " (outside a project: no cache)"))
    sys.stdout.write("".join(escape(line) + "\n" for line in lines))


def run(args: argparse.Namespace) -> int:
    from ..authoring.chunk import Options
    from ..authoring.convert import convert
    from ..cli_args import verbosity
    from ..validation import UsageError

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
                     "base; review the entity candidates, then `ctxfst contextualize` "
                     "and `ctxfst validate`")
    sys.stdout.write("".join(escape(line) + "\n" for line in lines))

