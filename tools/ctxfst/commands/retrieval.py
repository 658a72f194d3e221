"""Retrieval's commands: `query`, `eval`, `export lancedb|graph`."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ..cli_args import add_command, format_option, named_path, verbosity
from ..retrieval import HALVES, MODES
from .common import (
    EXIT_OK,
    EXIT_USAGE,
    Usage,
    at_least_zero,
    bridge_option,
    build_option,
    positive,
    print_data,
    say,
    stale_option,
)


def add_query(commands) -> None:
    query = add_command(
        commands, "query", "retrieve chunks from the build artifacts",
        ["ctxfst query \"Hono on Cloudflare Workers\"",
         "ctxfst query \"deploy an edge API\" --mode vector --top-k 10 --format json",
         "ctxfst query \"what should I learn next\" --explain"],
        description="Retrieve chunks from build/. graph mode (the default) seeds entities "
                    "from the query and walks the entity graph to chunks plain vector search "
                    "misses.")
    query.add_argument("text", metavar="TEXT", help="the question or search text")
    query.add_argument("--mode", choices=MODES, default="graph",
                       help="vector, lexical (BM25), keyword-graph, graph or hybrid")
    query.add_argument("--skill-graph", type=Path, default=None,
                       help="hand-made skill graph for keyword-graph mode (default: "
                       "skill-graph.json in the project, when there is one)")
    query.add_argument("--top-k", type=positive, default=5, help="how many chunks")
    query.add_argument("--hops", type=at_least_zero, default=2,
                       help="how far graph mode walks from its seeds")
    query.add_argument("--explain", action="store_true", help="show seeds and expansion "
                       "(a diagram format implies it)")
    format_option(query, diagrams=True)
    build_option(query)
    bridge_option(query)
    stale_option(query)
    query.set_defaults(run=_retrieval)


def add_export(commands) -> None:
    export = add_command(commands, "export", "export artifacts to other systems",
                         ["ctxfst export lancedb --db lance",
                          "ctxfst export graph --format graphml --out graph.graphml"],
                         leaf=False)
    targets = export.add_subparsers(dest="target", required=True, metavar="TARGET")
    lance = add_command(
        targets, "lancedb", "chunks, entities and skills as LanceDB tables",
        ["ctxfst export lancedb --db lance",
         "ctxfst export lancedb --db lance --fts-tokenizer ngram"],
        description="Write LanceDB tables chunks (with a full-text index on text), entities "
                    "and skills from build/, replacing tables of those names.")
    lance.add_argument("--db", type=Path, required=True,
                       help="LanceDB database folder (made or replaced)")
    lance.add_argument("--fts-tokenizer", choices=("icu", "simple", "ngram"), default="icu",
                       help="the full-text index's tokenizer: icu (words in every script, "
                            "Chinese too), simple (split on spaces), ngram (2- "
                            "and 3-character n-grams)")
    build_option(lance)
    stale_option(lance)
    graph = add_command(
        targets, "graph", "the entity graph as GraphML or GEXF (networkx, Gephi, Cytoscape)",
        ["ctxfst export graph --format graphml --out graph.graphml",
         "ctxfst export graph --format gexf > graph.gexf"],
        description="Write build/entity-graph.json as GraphML or GEXF; list attributes "
                    "become strings.")
    graph.add_argument("--format", required=True, choices=("graphml", "gexf"),
                       help="graphml or gexf")
    graph.add_argument("--out", type=named_path, default=None,
                       help="file to write (default: standard output)")
    build_option(graph)
    stale_option(graph)
    export.set_defaults(run=_retrieval)


def add_eval(commands) -> None:
    evaluation = add_command(
        commands, "eval", "retrieval quality per mode on a queries file",
        ["ctxfst eval queries.yaml", "ctxfst eval queries.yaml --modes vector graph --k 5 "
         "--format json"],
        description="Score retrieval modes on a YAML file of queries with their expected "
                    "chunks and entities: Hit@k, relevant chunks in the top k, entity recall, "
                    "MRR and nDCG.")
    evaluation.add_argument("queries", type=Path, metavar="QUERIES",
                            help="the queries file (YAML)")
    evaluation.add_argument("--modes", nargs="+", default=["vector", "lexical", "graph",
                                                           "hybrid"],
                            choices=MODES, help="the modes to compare")
    evaluation.add_argument("--skill-graph", type=Path, default=None,
                            help="hand-made skill graph for keyword-graph mode (default: "
                            "skill-graph.json in the project, when there is one)")
    evaluation.add_argument("--k", type=positive, default=3, help="the cut-off rank")
    evaluation.add_argument("--half", choices=HALVES, default=None,
                            help="score only this half of the queries (split by a seeded "
                            "hash of each id: choose a change on dev, judge it on test)")
    evaluation.add_argument("--format", choices=("markdown", "json"), default="markdown",
                            help="a Markdown table, or one JSON object")
    build_option(evaluation)
    bridge_option(evaluation)
    stale_option(evaluation)
    evaluation.set_defaults(run=_retrieval)


def _retrieval(args: argparse.Namespace) -> int:
    import yaml

    from ..diagnostics import escape, output_json
    from ..retrieval.evaluate import evaluate, load_queries, markdown
    from ..retrieval.search import RetrievalError
    from ..workspace import QueryRequest, Workspace

    try:
        workspace = Workspace.open(Path.cwd(), args.build)
    except RetrievalError as error:
        raise Usage(str(error)) from None
    config, build_dir = workspace.config, workspace.build_dir
    try:
        if not args.allow_stale:
            workspace.check_fresh()
        if args.command == "export" and args.target == "graph":
            return _export_graph(args, build_dir, config)
        if args.command == "export":
            from ..retrieval.export import export_lancedb, lancedb_folder

            counts = export_lancedb(build_dir, lancedb_folder(config, args.db),
                                    workspace.cache_dir, args.fts_tokenizer)
            say(args, f"wrote {counts['chunks']} chunks (full-text index: "
                 f"{counts['fts_tokenizer']}), {counts['entities']} entities and "
                 f"{counts['skills']} skills to {args.db}")
            return EXIT_OK
        _ = workspace.index  # a missing or damaged build is reported before the model loads
        skill_graph = workspace.skill_graph(args.skill_graph)
        if args.command == "query":
            started = time.perf_counter()
            result, embedding = workspace.query(QueryRequest(
                args.text, args.mode, args.top_k, args.hops, args.bridge_model), skill_graph)
            if verbosity(args) > 0:
                total = time.perf_counter() - started
                print(f"ctxfst: query: model {workspace.model_spec}, embedding "
                      f"{embedding:.3f} s, search {total - embedding:.3f} s", file=sys.stderr)
            if args.format == "json":
                print(output_json(result.as_json()))
                return EXIT_OK
            if args.format in ("mermaid", "dot", "html"):
                from ..diagram import query_diagram

                root = config.root if config is not None else build_dir.parent
                index = workspace.index
                print(query_diagram(result.as_json(), index,
                                    index.artifacts.json("entity-graph.json"), args.format,
                                    root.as_uri() + "/"), end="")
                return EXIT_OK
            lines = [] if result.hits else ["no matching chunks"]
            for number, hit in enumerate(result.hits, 1):
                lines.append(f"{number}. {hit.chunk_id}  {hit.score:.3f}  {hit.source}")
                lines.append(f"   {hit.context}")
                lines.extend(f"   via {via}" for via in hit.via)
            if args.explain:
                lines.append("seeds: " + ", ".join(f"{s['name']} ({s['score']}, {s['by']})"
                                                   for s in result.seeds))
                lines.append("expanded: " + ", ".join(f"{e['name']} ({e['activation']})"
                                                      for e in result.expanded[:15]))
            print_data(None, "text", lines)  # ids and contexts from the KB: escaped
            return EXIT_OK
        try:
            queries = load_queries(yaml.safe_load(args.queries.read_text(encoding="utf-8")))
        except (OSError, yaml.YAMLError, RecursionError) as error:
            raise Usage(f"{args.queries}: {error}") from None
        report = evaluate(workspace.index, queries, args.modes, args.k, workspace.embed,
                          skill_graph=skill_graph,
                          bridge_for=lambda text: workspace.bridge_for(text, args.bridge_model),
                          half=args.half)
        print(output_json(report) if args.format == "json" else markdown(report),
              end="" if args.format == "markdown" else "\n")
        return EXIT_OK
    except RetrievalError as error:  # no usable build, model or input: fix it, run again
        print(f"ctxfst: error: {escape(error)}", file=sys.stderr)
        return EXIT_USAGE


def _export_graph(args: argparse.Namespace, build_dir: Path, config) -> int:
    from ..artifacts.io import write_atomic
    from ..config import typed_path
    from ..retrieval.graph_export import export_graph

    data = export_graph(build_dir, args.format, config.cache_dir if config else None)
    if args.out is None:
        sys.stdout.write(data.decode("utf-8"))
        return EXIT_OK
    target = typed_path(config, args.out, "--out")
    try:
        write_atomic(target, data)
    except OSError as error:  # a folder of that name, no such parent folder, read-only
        raise Usage(f"--out {args.out}: {error.strerror or error}") from None
    say(args, f"wrote the entity graph as {args.format} to {args.out}")
    return EXIT_OK
