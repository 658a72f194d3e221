"""`ctxfst facts ask|show|list`: arguments and rendering only; the work is in
facts/query.py."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..diagnostics import escape, escape_lines, output_json

OPS = ("exists", "count", "list")  # = query.OPS; not imported: parsing stays light


def add_facts(commands) -> None:
    from ..cli_args import add_command, format_option

    facts = add_command(commands, "facts", "semantic facts with evidence: ask, show, list",
                        ["ctxfst facts ask --tenant default --op exists --key topic "
                         "--value python", "ctxfst facts list --tenant default"],
                        description="Ask the build's semantic facts. An answer is yes, no or "
                                    "unknown: no facts is never taken for \"does not "
                                    "exist\".", leaf=False)
    facts.set_defaults(run=run)
    actions = facts.add_subparsers(dest="facts_command", required=True, metavar="FACTS_COMMAND")

    def common(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--tenant", required=True,
                            help="the tenant to answer for (never crosses tenants); "
                                 "`default` holds every source no [facts] tenants folder "
                                 "claims")
        format_option(parser)
        parser.add_argument("--build", type=Path, default=None,
                            help="build folder (default: the project's)")

    def filters(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--entity-type", default=None,
                            help="document, chunk, entity, skill (default: any)")
        parser.add_argument("--namespace", default=None,
                            help="for example theme, domain (default: any)")
        parser.add_argument("--key", default=None, help="for example tag, topic (default: any)")
        parser.add_argument("--value", default=None,
                            help="compared normalised: case, width, aliases, dates, numbers "
                                 "(default: any)")

    ask = add_command(actions, "ask", "exists / count / list: yes, no or unknown",
                      description="Ask whether facts exist, how many, or which: the answer "
                                  "is yes, no or unknown (no facts where the knowledge base "
                                  "is not declared complete is unknown, never no).",
                      examples=["ctxfst facts ask --tenant default --op exists --key topic "
                                "--value python",
                                "ctxfst facts ask --tenant default --op count --namespace domain "
                                "--format json"])
    common(ask)
    ask.add_argument("--op", choices=OPS, required=True, help="exists, count or list")
    filters(ask)
    ask.add_argument("--min-confidence", type=float, default=0.0,
                     help="ignore facts below this confidence, from 0 to 1")
    ask.add_argument("--limit", type=int, default=20, help="facts shown")
    show = add_command(actions, "show", "one fact with all its evidence",
                       ["ctxfst facts show FACT_ID --tenant default"])
    show.add_argument("fact_id", metavar="FACT_ID", help="a fact id from ask or list")
    common(show)
    listing = add_command(actions, "list", "the tenant's facts",
                          ["ctxfst facts list --tenant default",
                           "ctxfst facts list --tenant default --namespace domain --inactive"])
    common(listing)
    filters(listing)
    listing.add_argument("--inactive", action="store_true",
                         help="include invalidated facts")
    listing.add_argument("--limit", type=int, default=100, help="facts shown")


def run(args: argparse.Namespace) -> int:
    """Exit 0 with an answer (unknown is one), 1 when it cannot be answered (a tenant
    with no sources, an unknown fact), 2 for bad arguments or no usable build."""
    from ..config import find_project
    from ..facts.extractors import reader_version
    from ..facts.query import FactsError, FactsUsage, Store, ask, check_tenant, list_facts, show

    try:
        check_tenant(args.tenant)  # before touching any file: fail closed
        if getattr(args, "limit", 1) < 1:
            raise FactsUsage("--limit must be at least 1")
        if not 0.0 <= getattr(args, "min_confidence", 0.0) <= 1.0:  # (NaN fails too)
            raise FactsUsage("--min-confidence must be a number from 0 to 1")
        config = find_project(Path.cwd())
        build_dir = args.build or (config.build_dir if config else None)
        if build_dir is None:
            raise FactsUsage("no ctxfst project here; pass --build DIR")
        # Source freshness is checked when the build is the project's own.
        project = config if config is not None and (
            args.build is None or args.build.resolve() == config.build_dir) else None
        store = Store.load(build_dir, project)
        if args.facts_command == "show":
            data = show(store, args.tenant, args.fact_id)
            text = _show_text(data)
        elif args.facts_command == "list":
            data = list_facts(store, args.tenant, args.entity_type, args.namespace, args.key,
                              args.value, args.inactive, args.limit)
            text = _list_text(data)
        else:
            from ..config import BuildSettings

            settings = config.build if config else BuildSettings()
            version = reader_version(settings.facts_extractors, store.extract_version)
            data = ask(store, settings, args.tenant, args.op, args.entity_type,
                       args.namespace, args.key, args.value, args.min_confidence, args.limit,
                       version)
            text = _ask_text(data)
    except FactsUsage as error:
        print(f"ctxfst: error: {escape(error)}", file=sys.stderr)
        return 2
    except FactsError as error:
        print(f"ctxfst: error: {escape(error)}", file=sys.stderr)
        return 1
    # Values, excerpts and ids come from the KB: one line each, control characters escaped.
    print(output_json(data) if args.format == "json" else text)
    return 0


def _evidence_lines(fact: dict, indent: str = "     evidence: ") -> list[str]:
    lines = [f"{indent}{e['path']}:{e['start']}-{e['end']} "
             f"{json.dumps(e['excerpt'], ensure_ascii=False)} ({e['extractor']}, "
             f"{e['confidence']:g})" for e in fact["evidence"]]
    more = fact["evidence_count"] - len(fact["evidence"])
    if more > 0:  # (an answer shows the best few; an entity's facts cite every document)
        lines.append(f"{' ' * len(indent)}and {more} more")
    return lines


def _fact_line(fact: dict) -> str:
    return (f"{fact['entity_type']} {fact['entity_id']}: {fact['namespace']}/{fact['key']} = "
            f"{json.dumps(fact['value'], ensure_ascii=False)} (confidence "
            f"{fact['confidence']:g}) {fact['fact_id']}")


def _ask_text(data: dict) -> str:
    lines = [f"answer: {data['answer']}"]
    if data["op"] == "count" or data["answer"] == "yes":
        bound = "" if data["count_exact"] else " (at least)"
        lines.append(f"count: {data['count']}{bound} "
                     f"{'entity' if data['count'] == 1 else 'entities'}")
    lines.append(f"why: {data['reason']}")
    lines.append(f"tenant {data['tenant']}, min confidence {data['min_confidence']:g}, "
                 f"build {data['build_seq']}")
    for number, fact in enumerate(data["facts"], 1):
        lines.append(f"{number:>3}. {_fact_line(fact)}")
        lines.extend(_evidence_lines(fact))
    if data.get("truncated"):
        lines.append(f"     ... {data['facts_matched'] - len(data['facts'])} more "
                     "(--op list, --limit N or --format json)")
    fallback = data["fallback"]
    if fallback.get("used"):
        lines.append(f"fallback (lexical, not facts): {len(fallback['hits'])} hit(s) for "
                     f"{fallback['query']!r} in {fallback['scanned']} chunk(s) of this tenant"
                     f" (cap {fallback['scan_cap']}"
                     f"{', more not scanned' if fallback['truncated'] else ''}, "
                     f"limit {fallback['limit']})")
        for hit in fallback["hits"]:
            lines.append(f"  - {hit['chunk_id']} ({hit['source']}, {hit['score']:g}): "
                         f"{hit['excerpt']}")
    return escape_lines(lines)


def _show_text(data: dict) -> str:
    state = "active" if data["is_active"] else (
        f"inactive since build {data['invalidated_build_seq']} "
        f"({data['invalidation_reason']}, {data['invalidated_run_id']})")
    lines = [_fact_line(data), f"  tenant {data['tenant_id']}, {data['value_type']} "
             f"{json.dumps(data['value_norm'], ensure_ascii=False)}, {state}",
             f"  created by {data['created_run_id']} (build {data['created_build_seq']}), "
             f"last changed in build {data['updated_build_seq']}, freshness "
             f"{data['freshness_at'] or 'unknown'}",
             f"  {data['evidence_count']} evidence:"]
    lines.extend(_evidence_lines(data, "    - "))
    return escape_lines(lines)


def _list_text(data: dict) -> str:
    lines = [_fact_line(f) + ("" if f["is_active"] else "  [inactive]") for f in data["facts"]]
    lines.append(f"{data['total']} fact(s) in tenant {data['tenant']}"
                 + (f", {len(data['facts'])} shown" if data["truncated"] else ""))
    return escape_lines(lines)
