"""The `ctxfst` command line: argument parsing and output only; the work is in the library."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from .cli_args import (
    HelpFormatter,
    add_command,
    add_verbosity,
    format_option,
    named_path,
    verbosity,
)
from .completion import SHELLS
from .retrieval import MODES
from .version import __version__

# One policy for every command (docs/cli.md): 0 done (an answer, even an empty one),
# 1 findings or work that did not succeed, 2 it cannot run as asked (arguments, settings,
# a missing or damaged build or state file), 70 a bug.
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 70
EXIT_BROKEN_PIPE = 141  # as a process killed by SIGPIPE


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ctxfst", formatter_class=HelpFormatter,
        description="Compile, validate and lint CtxFST knowledge bases; retrieve from the "
                    "build; plan and run skills toward a goal.",
        epilog="examples:\n  ctxfst validate\n  ctxfst query \"Hono on Cloudflare Workers\"\n"
               "  ctxfst rule CTX205\n\n`ctxfst COMMAND --help` shows a command's options; "
               "docs/cli-reference.md lists them all.")
    parser.add_argument("--version", action="version", version=f"ctxfst {__version__}")
    add_verbosity(parser, top=True)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_check_options(add_command(
        commands, "validate", "check documents and skills; exit 1 on errors",
        ["ctxfst validate", "ctxfst validate content/guide.ctxfst.md --format json",
         "ctxfst validate --staged --strict"],
        description="Check documents, skills and extra edges: syntax, fields, references "
                    "across the knowledge base. Exit 1 on an error (with --strict, on a "
                    "warning too); docs/rules.md explains every code, as `ctxfst rule` does."))
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
    rule = add_command(commands, "rule", "explain a diagnostic code",
                       ["ctxfst rule CTX205", "ctxfst rule CTX5", "ctxfst rule --format json"],
                       description="Explain a diagnostic code: its severity, what it means and "
                                   "whether it can be silenced. A prefix (CTX5) or none lists "
                                   "codes.")
    from .diagnostics import RULES

    rule.add_argument("code", nargs="?", default=None, metavar="CODE",
                      help="a code such as CTX205, or a prefix such as CTX5 (default: all)"
                      ).completions = sorted(RULES)
    format_option(rule)
    build = add_command(commands, "build", "run the doit build without doit on the PATH",
                        ["ctxfst build", "ctxfst build --root kb", "ctxfst build list",
                         "ctxfst build clean"],
                        description="Run the build (what `doit` runs in the project): compile "
                                    "content/ and skills/ into build/, incrementally.")
    build.add_argument("--root", type=Path, default=Path("."),
                       help="the knowledge-base repository")
    build.add_argument("doit_args", nargs=argparse.REMAINDER, metavar="DOIT_ARGS",
                       help="passed to doit (for example: clean, list, embed)")
    init = add_command(commands, "init", "scaffold a new knowledge-base repository",
                       ["ctxfst init my-kb", "ctxfst init my-kb --model hash-256"],
                       description="Write a new knowledge-base repository: settings, a "
                                   "dodo.py, a pre-commit configuration, an example "
                                   "document and a skill in the Agent Skills form.")
    init.add_argument("directory", type=named_path, metavar="DIRECTORY",
                      help="a new or existing folder (nothing in it is overwritten)")
    init.add_argument("--model", default=None,
                      help="embedding model to configure (default: chosen by the notes "
                           "already in the folder: e5-small where a quarter or more is "
                           "CJK text and its extra is installed, else minilm)")
    mock = add_command(commands, "generate-mock", "write a mock knowledge base",
                       ["ctxfst generate-mock /tmp/kb --docs 1000",
                        "ctxfst generate-mock /tmp/career --career --seed 7"],
                       description="Write a generated knowledge base, for benchmarks and "
                                   "demos.")
    mock.add_argument("out", type=named_path, metavar="OUT", help="the folder to write")
    mock.add_argument("--docs", type=_mock_docs, default=200,
                      help=f"how many documents (1 to {MAX_MOCK_DOCS:,})")
    mock.add_argument("--seed", type=int, default=0, help="the random seed")
    mock.add_argument("--career", action="store_true",
                      help="add the course-style career articles (for retrieval demos)")
    skills = add_command(commands, "skills", "skill tools: migrate, to-prompt",
                         ["ctxfst skills migrate --check", "ctxfst skills to-prompt"],
                         leaf=False)
    skill_commands = skills.add_subparsers(dest="skills_command", required=True,
                                           metavar="SKILLS_COMMAND")
    migrate = add_command(
        skill_commands, "migrate", "rewrite v2-dialect SKILL.md files into the Agent Skills form",
        ["ctxfst skills migrate", "ctxfst skills migrate skills/analyze-gaps --check"],
        description="Rewrite v2-dialect SKILL.md files into the Agent Skills form (the "
                    "world-model fields under metadata); the body is kept byte for byte.")
    migrate.add_argument("paths", nargs="*", type=Path, metavar="PATH",
                         help="SKILL.md files or folders (default: the project's skills)")
    migrate.add_argument("--check", action="store_true",
                         help="change nothing; exit 1 if a file would change")
    migrate.add_argument("--drop-comments", action="store_true",
                         help="rewrite files whose frontmatter has YAML comments, which the "
                              "rewrite loses (without it such a file is refused, naming "
                              "the lines)")
    prompt = add_command(
        skill_commands, "to-prompt", "print the <available_skills> block for an agent's prompt",
        ["ctxfst skills to-prompt", "ctxfst skills to-prompt skills/analyze-gaps"])
    prompt.add_argument("paths", nargs="*", type=Path, metavar="PATH",
                        help="SKILL.md files or folders (default: the project's skills)")
    _add_runtime_commands(commands)
    from .authoring.cli import add_contextualize_parser
    from .authoring.cli import add_parser as add_chunk_parser
    from .facts.cli import add_parser as add_facts_parser

    add_facts_parser(commands)
    add_chunk_parser(commands)
    add_contextualize_parser(commands)
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
    query.add_argument("--top-k", type=_positive, default=5, help="how many chunks")
    query.add_argument("--hops", type=_at_least_zero, default=2,
                       help="how far graph mode walks from its seeds")
    query.add_argument("--explain", action="store_true", help="show seeds and expansion "
                       "(a diagram format implies it)")
    format_option(query, diagrams=True)
    _build_option(query)
    _bridge_option(query)
    _stale_option(query)
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
    _build_option(lance)
    _stale_option(lance)
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
    _build_option(graph)
    _stale_option(graph)
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
    _stale_option(report)
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
    evaluation.add_argument("--k", type=_positive, default=3, help="the cut-off rank")
    evaluation.add_argument("--format", choices=("markdown", "json"), default="markdown",
                            help="a Markdown table, or one JSON object")
    _build_option(evaluation)
    _bridge_option(evaluation)
    _stale_option(evaluation)
    serving = add_command(
        commands, "serve", "answer queries, facts, plans and the state over local HTTP",
        ["ctxfst serve", "ctxfst serve --port 9000 --stale-check 2"],
        description="A long-running server on 127.0.0.1 that loads the build's index and "
                    "model once and answers POST /query, /facts/ask, /plan and GET /state "
                    "and /health as JSON (docs/serve.md). It switches to a new build once "
                    "it is fully published and checked; SIGTERM stops it.")
    serving.add_argument("--port", type=_port, default=8765,  # = serve.DEFAULT_PORT
                         help="the TCP port on 127.0.0.1 (0: any free one, printed)")
    serving.add_argument("--workers", type=_positive, default=1,
                         help="processes answering (each loads the build; 2 or more use "
                              "more CPUs for concurrent clients)")
    _server_options(serving)
    mcp = add_command(
        commands, "mcp", "the same answers as MCP tools over stdio, for agent runtimes",
        ["ctxfst mcp", "ctxfst mcp --build build"],
        description="A Model Context Protocol server on standard input and output with the "
                    "tools query, facts_ask, plan and state_show (JSON schemas, the answers "
                    "of the matching --format json commands; docs/serve.md). Needs "
                    "`pip install 'ctxfst[mcp]'`.")
    _server_options(mcp)
    hook = add_command(commands, "install-hook",
                       "install a git pre-commit hook that validates staged files",
                       ["ctxfst install-hook", "ctxfst install-hook --force"])
    hook.add_argument("--force", action="store_true",
                      help="replace an existing pre-commit hook")
    completion = add_command(
        commands, "completion", "print a shell completion script",
        ["ctxfst completion bash > ~/.local/share/bash-completion/completions/ctxfst",
         "ctxfst completion zsh > \"${fpath[1]}/_ctxfst\"",
         "ctxfst completion fish > ~/.config/fish/completions/ctxfst.fish"],
        description="Print a completion script for bash, zsh or fish: commands, options and "
                    "their choices complete; paths complete as files.")
    completion.add_argument("shell", choices=SHELLS, metavar="SHELL",
                            help="bash, zsh or fish")
    return parser


def _codes(silenceable_only: bool):
    def parse(text: str) -> list[str]:
        from .rule_selection import RuleSettingError, check_prefixes

        try:
            return check_prefixes([c for c in text.split(",") if c.strip()],
                                  silenceable_only=silenceable_only)
        except RuleSettingError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
    return parse


def _positive(text: str) -> int:
    value = int(text) if text.strip().lstrip("-").isdigit() else 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return value


def _at_least_zero(text: str) -> int:
    if not text.strip().isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 0, got {text!r}")
    return int(text)


MAX_MOCK_DOCS = 1_000_000
MAX_TIMEOUT_S = 86_400.0  # a day; the OS cannot wait on much larger timeouts


def _mock_docs(text: str) -> int:
    value = _positive(text)
    if value > MAX_MOCK_DOCS:
        raise argparse.ArgumentTypeError(f"at most {MAX_MOCK_DOCS:,} documents, got {text!r}")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (0 to 65535)")
    return value


def _at_least_zero_seconds(text: str) -> float:
    try:
        if float(text) == 0:
            return 0.0
    except ValueError:
        pass  # (_seconds says what is wrong with it)
    return _seconds(text)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value <= MAX_TIMEOUT_S:  # also refuses nan
        raise argparse.ArgumentTypeError(f"expected seconds above 0 and at most "
                                         f"{MAX_TIMEOUT_S:g}, got {text!r}")
    return value


def _bridge_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bridge-model", default="use-multilingual",
                        help="multilingual model that seeds graph mode when the build's model "
                        "cannot read the query; none turns it off")


def _build_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--build", type=Path, default=None,
                        help="build folder (default: the project's)")


def _server_options(parser: argparse.ArgumentParser) -> None:
    """What `serve` and `mcp` share: how they watch the build, and which build. (The
    defaults are serve.POLL_SECONDS and STALE_CHECK_SECONDS, not imported: parsing stays
    light; a test holds them equal.)"""
    parser.add_argument("--poll", type=_seconds, default=0.5,
                        help="seconds between looks at the build's manifest")
    parser.add_argument("--stale-check", type=_at_least_zero_seconds, default=10.0,
                        help="seconds between comparisons of the sources with the build "
                             "(0: never)")
    _build_option(parser)
    parser.add_argument("--allow-stale", action="store_true",
                        help="answer even when the sources changed since the build")


def _stale_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--allow-stale", action="store_true",
                        help="read build/ even when sources changed since it was built")


def _add_runtime_commands(commands) -> None:
    def common(parser: argparse.ArgumentParser, diagrams: bool = False) -> None:
        parser.add_argument("--state", type=Path, default=None,
                            help="world-state file (default: .ctxfst/world-state.json)")
        format_option(parser, diagrams)

    goal = "goal:edge-api-learning-plan"
    state = add_command(commands, "state", "the world state: init, show, add, remove, ...",
                        [f"ctxfst state init --goal {goal}", "ctxfst state show"], leaf=False,
                        description="The world state the runner plans from: active states, "
                                    "completed skills and the goal, kept as an event log "
                                    "with a snapshot.")
    actions = state.add_subparsers(dest="state_command", required=True, metavar="ACTION")
    init = add_command(actions, "init", "start a world state",
                       [f"ctxfst state init --goal {goal}",
                        f"ctxfst state init --goal {goal} --seed state:has-resume --force"])
    init.add_argument("--goal", required=True, help="the goal entity to reach")
    init.add_argument("--seed", action="append", default=[],
                      help="a state that holds at the start (repeat for more)")
    init.add_argument("--force", action="store_true", help="replace an existing state")
    common(init)
    for name, text in (("show", "print the state"), ("history", "print the event log"),
                       ("replay", "rebuild the snapshot from the event log")):
        action = add_command(actions, name, text, [f"ctxfst state {name}",
                                                   f"ctxfst state {name} --format json"])
        if name == "replay":
            action.add_argument("--discard-outside", action="store_true",
                                help="rewrite a snapshot another tool changed from the log, "
                                     "dropping that change (by default it is adopted as "
                                     "an event first)")
        common(action)
    for name in ("add", "remove"):
        change = add_command(actions, name, f"{name} active states",
                             [f"ctxfst state {name} state:has-resume",
                              f"ctxfst state {name} state:has-resume state:has-portfolio"])
        change.add_argument("ids", nargs="+", metavar="ID", help="state entity ids")
        common(change)
    complete = add_command(actions, "complete", "record a skill's outcome",
                           ["ctxfst state complete analyze-gaps --result success",
                            "ctxfst state complete analyze-gaps --result failed "
                            "--summary \"no resume\""])
    complete.add_argument("skill", metavar="SKILL", help="the skill's name")
    complete.add_argument("--result", required=True, choices=("success", "failed", "partial"),
                          help="success applies its postconditions")
    complete.add_argument("--summary", default=None, help="a line on what happened")
    common(complete)
    subgraph = add_command(actions, "subgraph", "store the goal-relevant subgraph",
                           ["ctxfst state subgraph", "ctxfst state subgraph --depth 3"])
    subgraph.add_argument("--depth", type=_at_least_zero, default=2,
                          help="how many hops from the goal")
    common(subgraph)
    selecting = add_command(commands, "select", "rank the skills that can run now",
                            ["ctxfst select", "ctxfst select --explain --format json"])
    selecting.add_argument("--explain", action="store_true",
                           help="also list the skills that cannot run, and why")
    selecting.add_argument("--retries", type=_at_least_zero, default=2,
                           help="how often a failed skill may be retried")
    common(selecting)
    running = add_command(commands, "run", "the agent loop: plan, execute, record",
                          ["ctxfst run", "ctxfst run --executor command --timeout 120 --replan",
                           "ctxfst run --executor interactive"],
                          description="The agent loop: plan from the state to the goal, run "
                                      "each step with the executor, record its outcome, and "
                                      "repeat until the goal holds or nothing can run.")
    running.add_argument("--executor", choices=("dry-run", "command", "interactive"),
                         default="dry-run",
                         help="dry-run (apply postconditions), command (run each skill's "
                              "script), interactive (ask before each step)")
    running.add_argument("--max-steps", type=_positive, default=20,
                         help="stop after this many steps")
    running.add_argument("--replan", action="store_true",
                         help="after a failed step, plan again instead of stopping")
    running.add_argument("--timeout", type=_seconds, default=60.0,
                         help="seconds a skill script may run (command executor)")
    running.add_argument("--retries", type=_at_least_zero, default=2,
                         help="how often a failed skill may be retried")
    running.add_argument("--yes", action="store_true",
                         help="re-run an interrupted non-idempotent skill without asking")
    running.add_argument("--max-depth", type=_positive, default=None,
                         help="plan each step within this many steps to the goal")
    running.add_argument("--explain", action="store_true",
                         help="say each step's plan (on stderr with --format json)")
    running.add_argument("--output-format", choices=("ctxfst", "reference"), default="ctxfst",
                         help="the JSON's shape: ctxfst's, or the reference runtime's loop "
                              "result (iterations, goal_reached, terminated_reason, history; "
                              "JSON whatever --format says)")
    common(running)
    planning = add_command(commands, "plan", "plan skills from the state to the goal",
                           ["ctxfst plan", "ctxfst plan --explain --algorithm ucs",
                            "ctxfst plan --format mermaid",
                            f"ctxfst plan --goal {goal} --seed state:has-resume"])
    planning.add_argument("--explain", action="store_true",
                          help="say why each step is there, and the alternatives")
    planning.add_argument("--algorithm", choices=("astar", "ucs", "greedy"), default="astar",
                          help="astar and ucs find a cheapest plan; greedy finds one fast, not "
                          "always the cheapest")
    planning.add_argument("--goal", default=None,
                          help="plan for this goal instead (default: the state's)")
    planning.add_argument("--seed", action="append", default=None,
                          help="with --goal: a state that holds at the start (repeat for more)")
    planning.add_argument("--max-depth", type=_positive, default=None,
                          help="plans of at most this many steps (the cheapest of them)")
    common(planning, diagrams=True)


def _print(data, fmt: str, lines: list[str]) -> None:
    """JSON, or the text lines with control characters made visible in each (ids and
    summaries come from the knowledge base and its scripts: a newline in one must not
    forge a line)."""
    from .diagnostics import escape_lines, output_json

    if fmt == "json":
        print(output_json(data))
    else:
        print(escape_lines(lines))


def _state_text(state) -> list[str]:
    done = ", ".join(f"{c['skill']} ({c['result']})" for c in state.completed_skills) or "none"
    return [f"goal: {state.goal}{'  (reached)' if state.reached else ''}",
            f"active states: {', '.join(state.active_states) or 'none'}",
            f"completed skills: {done}", f"serial {state.serial}, lineage {state.lineage}"]


def _runtime(args: argparse.Namespace) -> int:
    from .diagnostics import escape
    from .runtime import commands as rt
    from .runtime.state import StateError, StateFileError

    config = rt.project()
    store = rt.store_for(config, args.state)
    try:
        if args.command == "plan":
            if args.seed and args.goal is None:
                raise _Usage("--seed needs --goal")
            diagram = args.format in ("mermaid", "dot", "html")
            result = rt.make_plan(config, store, args.goal, args.seed, args.algorithm,
                                  args.explain or diagram, max_depth=args.max_depth)
            if diagram:
                from .diagram import plan_diagram

                print(plan_diagram(result, args.format), end="")
            else:
                _print(result, args.format, _plan_text(result))
            return EXIT_OK if result["solved"] else EXIT_FAILED
        if args.command == "run":
            return _run_loop(args, config, store)
        if args.command == "select":
            result = rt.make_selection(config, store, args.retries)
            _print(result, args.format, _select_text(result, args.explain))
            return EXIT_OK if result["selected"] or result["goal_reached"] else EXIT_FAILED
        action = args.state_command
        if action == "init":
            state = rt.state_init(config, store, args.goal, args.seed, args.force)
        elif action in ("add", "remove"):
            state = rt.state_change(config, store, action, args.ids)
        elif action == "complete":
            state = rt.state_complete(store, rt.world_for(config).skills, args.skill,
                                      args.result, args.summary)
        elif action == "subgraph":
            subgraph = rt.world_for(config).subgraph(store.load().goal, args.depth)
            state = store.change("subgraph", subgraph=subgraph)
        elif action == "replay":
            state = store.rebuild(args.discard_outside)
        elif action == "history":
            events = store.history()
            _print({"events": events}, args.format, [
                f"{e['serial']:>4} {e['at']} {e['type']} "
                + " ".join(f"{k}={v}" for k, v in sorted(e.items())
                           if k not in ("serial", "at", "type", "lineage")) for e in events])
            return EXIT_OK
        else:
            state = store.load()
        for note in store.notes if verbosity(args) >= 0 else ():
            print(f"ctxfst: note: {escape(note)}", file=sys.stderr)
        _print(state.to_json(), args.format, _state_text(state))
        return EXIT_OK
    except StateError as error:  # a damaged or foreign state file is bad input (2)
        print(f"ctxfst: error: {escape(error)}", file=sys.stderr)
        return EXIT_USAGE if isinstance(error, StateFileError) else EXIT_FAILED


def _run_loop(args: argparse.Namespace, config, store) -> int:
    from .runtime import commands as rt
    from .runtime.loop import command_executor, dry_run, run

    world = rt.world_for(config)
    if args.executor == "command":
        executor = command_executor(config.root, args.timeout)
    else:
        executor = dry_run

    from .diagnostics import escape
    from .runtime.loop import Critique

    # Prompts go where they do not spoil the output: stderr when stdout is JSON.
    talk = sys.stderr if args.format == "json" else sys.stdout

    def say(text: str) -> None:
        print(escape(text), file=talk, flush=True)

    def answer(prompt: str) -> str | None:
        talk.write(prompt)
        talk.flush()
        line = sys.stdin.readline()
        return line.rstrip("\n") if line else None  # (None: end of input)

    def ask(question: str) -> bool:
        if args.yes:
            return True
        if not sys.stdin.isatty():
            return False
        reply = answer(f"{escape(question)} [y/N] ")
        return (reply or "").strip().lower() in ("y", "yes")

    # interactive: reviews each plan before its step, then applies the postconditions.
    result = run(world, store, executor, args.max_steps, replan=args.replan, confirm=ask,
                 retries=args.retries, edges_path=config.runtime_edges,
                 max_depth=args.max_depth,
                 critique=Critique(answer, say) if args.executor == "interactive" else None,
                 explain=say if args.explain else None)
    if args.output_format == "reference":
        from .diagnostics import json_text
        from .runtime.loop import reference_result

        print(json_text(reference_result(result)))  # (its fields only: no schema_version)
        return EXIT_OK if result.reason == "goal_reached" else EXIT_FAILED
    data = {"stop_reason": result.reason, "steps": result.steps,
            "state": result.state.to_json()}
    if result.pending is not None:
        data["pending_skill"] = result.pending
    lines = [f"{n}. {s['skill']}: {s['status']} {s['summary']}".rstrip()
             for n, s in enumerate(result.steps, 1)]
    lines.append(f"stopped: {result.reason} after {len(result.steps)} step(s)"
                 + (f" ({result.pending} was interrupted and is not idempotent: run again "
                    "with --yes, or record it with `ctxfst state complete`)"
                    if result.pending else ""))
    _print(data, args.format, lines)
    return EXIT_OK if result.reason == "goal_reached" else EXIT_FAILED


def _retrieval(args: argparse.Namespace) -> int:
    import yaml

    from .diagnostics import escape, output_json
    from .retrieval.evaluate import evaluate, load_queries, markdown
    from .retrieval.search import RetrievalError
    from .workspace import QueryRequest, Workspace

    try:
        workspace = Workspace.open(Path.cwd(), args.build)
    except RetrievalError as error:
        raise _Usage(str(error)) from None
    config, build_dir = workspace.config, workspace.build_dir
    try:
        if not args.allow_stale:
            workspace.check_fresh()
        if args.command == "export" and args.target == "graph":
            return _export_graph(args, build_dir, config)
        if args.command == "export":
            from .retrieval.export import export_lancedb, lancedb_folder

            counts = export_lancedb(build_dir, lancedb_folder(config, args.db),
                                    workspace.cache_dir, args.fts_tokenizer)
            _say(args, f"wrote {counts['chunks']} chunks (full-text index: "
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
                from .diagram import query_diagram

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
            _print(None, "text", lines)  # ids and contexts from the KB: escaped
            return EXIT_OK
        try:
            queries = load_queries(yaml.safe_load(args.queries.read_text(encoding="utf-8")))
        except (OSError, yaml.YAMLError, RecursionError) as error:
            raise _Usage(f"{args.queries}: {error}") from None
        report = evaluate(workspace.index, queries, args.modes, args.k, workspace.embed,
                          skill_graph=skill_graph,
                          bridge_for=lambda text: workspace.bridge_for(text, args.bridge_model))
        print(output_json(report) if args.format == "json" else markdown(report),
              end="" if args.format == "markdown" else "\n")
        return EXIT_OK
    except RetrievalError as error:  # no usable build, model or input: fix it, run again
        print(f"ctxfst: error: {escape(error)}", file=sys.stderr)
        return EXIT_USAGE


def _serve(args: argparse.Namespace) -> int:
    from .serve import Service, log_to_stderr, serve, share_cpus

    if args.command == "serve" and args.workers > 1:
        share_cpus(args.workers)  # (before anything imports numpy)
    from .retrieval.search import RetrievalError

    def make_service(prefix: str) -> Service:
        log = (lambda text: log_to_stderr(prefix + text)) if verbosity(args) >= 0 else None
        return Service(Path.cwd(), args.build, args.allow_stale, args.poll, args.stale_check,
                       log)

    try:
        service = make_service("")  # (a usage error, before any port is bound)
    except RetrievalError as error:
        raise _Usage(str(error)) from None
    if args.command == "mcp":
        try:
            import mcp.server.mcpserver  # noqa: F401 (the extra)
        except ImportError as error:
            raise _Usage(f"`ctxfst mcp` needs the MCP SDK ({error}): pip install "
                         "'ctxfst[mcp]'") from None
        from .mcp_server import run_stdio

        return run_stdio(service)

    def ready(address: tuple[str, int]) -> None:
        host, port = address
        print(f"ctxfst serve: listening on http://{host}:{port}", file=sys.stderr, flush=True)
        if args.workers == 1 and service.current is None:
            print(f"ctxfst serve: no build to serve yet ({service.load_error}); waiting for "
                  "one", file=sys.stderr, flush=True)

    try:
        return serve(lambda prefix: service if args.workers == 1 else make_service(prefix),
                     args.port, args.workers, ready)
    except OSError as error:  # the port is taken, or not ours to bind
        raise _Usage(f"--port {args.port}: {error.strerror or error}") from None


def _export_graph(args: argparse.Namespace, build_dir: Path, config) -> int:
    from .artifacts.io import write_atomic
    from .config import typed_path
    from .retrieval.graph_export import export_graph

    data = export_graph(build_dir, args.format, config.cache_dir if config else None)
    if args.out is None:
        sys.stdout.write(data.decode("utf-8"))
        return EXIT_OK
    target = typed_path(config, args.out, "--out")
    try:
        write_atomic(target, data)
    except OSError as error:  # a folder of that name, no such parent folder, read-only
        raise _Usage(f"--out {args.out}: {error.strerror or error}") from None
    _say(args, f"wrote the entity graph as {args.format} to {args.out}")
    return EXIT_OK


def _report(args: argparse.Namespace) -> int:
    from .artifacts.io import write_atomic
    from .config import check_inside, typed_path
    from .freshness import stale_reason
    from .report import DEFAULT_NAME, ReportError, make_report
    from .runtime.commands import RuntimeUsage, project

    try:
        config = project()
    except RuntimeUsage as error:
        raise _Usage(str(error)) from None
    out = typed_path(config, args.out, "--out") if args.out else check_inside(
        config.root, config.build_dir / DEFAULT_NAME, "the report")
    if not args.allow_stale:
        reason = stale_reason(config, config.build_dir)
        if reason:
            raise _Usage(f"{reason} (or pass --allow-stale)")
    try:
        page, _ = make_report(config, out, lint=not args.no_lint)
    except ReportError as error:
        raise _Usage(str(error)) from None
    try:
        write_atomic(out, page)
    except OSError as error:
        raise _Usage(f"--out {args.out or out}: {error.strerror or error}") from None
    _say(args, f"wrote {os.path.relpath(out, config.root)} ({len(page):,} bytes)")
    return EXIT_OK


def _plan_text(result: dict) -> list[str]:
    if not result["solved"]:
        return [f"no plan for {result['goal']}: {result['reason']}"]
    lines = [f"plan for {result['goal']} ({result['algorithm']}, cost {result['cost']:g}, "
             f"{len(result['steps'])} step(s), validated):"]
    for number, step in enumerate(result["steps"], 1):
        lines.append(f"  {number}. {step}")
    for item in result.get("explanation", []):
        lines.append(f"  step {item['step']} {item['skill']}: needs "
                     f"{', '.join(item['preconditions_met']) or 'nothing'}"
                     + (f", not {', '.join(item['must_not_hold'])}" if item["must_not_hold"]
                        else "")
                     + f"; adds {', '.join(item['adds']) or 'nothing'}"
                     + (" (the goal)" if item["reaches_goal"] else "")
                     + (f"; removes {', '.join(item['removes'])}" if item["removes"] else ""))
    for alternative in result.get("alternatives", []):
        lines.append(f"  alternative: {' -> '.join(alternative['steps'])} "
                     f"(cost {alternative['cost']:g}): {alternative['why_not']}")
    return lines


def _select_text(result: dict, explain: bool) -> list[str]:
    if result["goal_reached"]:
        head = f"goal {result['goal']} already reached"
    else:
        head = f"next skill: {result['selected'] or 'none applicable'}"
    lines = [head]
    for candidate in result["candidates"]:
        if explain or candidate["applicable"]:
            mark = "+" if candidate["applicable"] else "-"
            lines.append(f"  {mark} {candidate['skill']} (cost {candidate['cost']:g}): "
                         f"{candidate['reason']}")
    return lines


def _check(args: argparse.Namespace, lint: bool) -> int:
    from .diagnostics import RENDERERS
    from .validation import check_paths, check_staged

    started = time.perf_counter()
    if getattr(args, "fix", False) or getattr(args, "diff", False):
        if args.staged:
            raise _Usage("--fix and --diff take no --staged")
        from .authoring.fix import fix_paths
        from .diagnostics import text_line as _line

        done, refused = fix_paths(args.paths, write=args.fix and not args.diff)
        (sys.stderr if args.format == "json" else sys.stdout).write(done)
        for problem in refused:
            print(_line(problem), file=sys.stderr)
    if args.staged:
        if args.paths:
            raise _Usage("--staged takes no paths")
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


def _say(args: argparse.Namespace, text: str) -> None:
    """A progress or summary line: not with --quiet."""
    if verbosity(args) >= 0:
        print(text)


def _rule(args: argparse.Namespace) -> int:
    from .rule_docs import UnknownRule, explain, text_lines

    try:
        rules = explain(args.code)
    except UnknownRule as error:
        raise _Usage(str(error)) from None
    _print({"rules": rules}, args.format, text_lines(rules))
    return EXIT_OK


def _completion(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from .completion import script

    sys.stdout.write(script(parser, args.shell))
    return EXIT_OK


def _install_hook(args: argparse.Namespace) -> int:
    from .hook import install_hook

    path = install_hook(Path.cwd(), force=args.force)
    _say(args, f"installed {path}")
    return EXIT_OK


def _build(args: argparse.Namespace) -> int:
    from .pipeline.runner import run_build

    return run_build(args.root, args.doit_args, quiet=verbosity(args) < 0)


def _init(args: argparse.Namespace) -> int:
    from .diagnostics import escape
    from .scaffold import choose_model, init

    model, why = (args.model, "--model") if args.model else choose_model(args.directory)
    written = init(args.directory, model)
    for path in written:
        _say(args, f"created {escape(path)}")
    _say(args, f"embedding model: {escape(model)} ({escape(why)})")
    _say(args, f"next: cd {escape(args.directory)} && doit")
    return EXIT_OK


def _generate_mock(args: argparse.Namespace) -> int:
    from .diagnostics import escape
    from .mock import MockError, generate, generate_career, prepare_target

    try:
        prepare_target(args.out)
        written = (generate_career if args.career else generate)(args.out, args.docs,
                                                                  args.seed)
    except OSError as error:
        raise MockError(f"cannot write the mock knowledge base into {args.out}: "
                        f"{error.strerror or error}") from None
    _say(args, f"wrote {len(written)} documents under {escape(args.out / 'content')}")
    return EXIT_OK


def _skill_files(paths: list[Path]) -> list[Path]:
    from .config import find_project
    from .files import walk

    if not paths:
        config = find_project(Path.cwd())
        if config is None:
            raise _Usage("no ctxfst project here; name the skill files or folders")
        paths = [config.skills_dir]
    files: list[Path] = []
    for path in paths:
        if not path.exists():
            raise _Usage(f"{path}: no such file or directory")
        files.extend(p for p in (walk(path, follow_links=True) if path.is_dir() else [path])
                     if p.name == "SKILL.md")
    return files


def _skills(args: argparse.Namespace) -> int:
    files = _skill_files(args.paths)
    if args.skills_command == "migrate":
        from .artifacts.io import read_bytes_no_follow, write_atomic
        from .diagnostics import escape
        from .skills.migrate import MigrationError, migrate_text

        changed = failed = 0
        for path in files:
            try:
                if path.is_symlink():  # rewriting would replace the link with a copy
                    raise MigrationError("is a symbolic link; migrate the file it points to")
                # bytes decoded as they are: CRLF files stay CRLF (the body is kept byte
                # for byte); never through a link, never a FIFO
                text, differs = migrate_text(read_bytes_no_follow(path).decode("utf-8"),
                                             str(path), args.drop_comments)
                if differs and not args.check:
                    write_atomic(path, text.encode("utf-8"))  # keeps the file's mode
            except (MigrationError, UnicodeDecodeError, OSError) as error:
                reason = error.strerror or error if isinstance(error, OSError) else error
                print(f"{escape(path)}: error: {escape(reason)}", file=sys.stderr)
                failed += 1
                continue
            if differs:
                changed += 1
                print(f"{'would migrate' if args.check else 'migrated'} {escape(path)}")
        _say(args, f"{len(files)} skill file(s): {changed} "
             f"{'to migrate' if args.check else 'migrated'}, {failed} failed")
        return EXIT_FAILED if failed or (args.check and changed) else EXIT_OK
    from .document.kb import Input
    from .document.source import Source
    from .files import display_path
    from .kb import load_kb
    from .skills.index import build_index, to_prompt

    kb = load_kb(Path.cwd(), [Input(Source(display_path(p), p), True) for p in files])
    problems = [d for d in kb.parse_diagnostics() if d.severity.value == "error"]
    from .diagnostics import text_line

    for problem in problems:
        print(text_line(problem), file=sys.stderr)
    sys.stdout.write(to_prompt(build_index(kb.skills, Path.cwd())["skills"], Path.cwd()))
    return EXIT_FAILED if problems else EXIT_OK


class _Usage(Exception):
    pass


def _check_text_arguments(args: argparse.Namespace) -> None:
    """Text arguments must be text: bytes that are not UTF-8 reach Python as lone
    surrogates, which no output, JSON or model can carry (paths may hold any bytes)."""
    for name, value in vars(args).items():
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str) and any("\ud800" <= char <= "\udfff" for char in item):
                raise _Usage(f"the {name.replace('_', '-')} argument is not valid UTF-8 text")


def _usage_errors() -> tuple[type[Exception], ...]:
    """What a command raises when it cannot run as asked (exit 2). Imported only once an
    exception is being handled: a query must not load the validator to be able to fail."""
    from .config import ConfigError
    from .files import UnreadableFolder
    from .hook import HookError
    from .mock import MockError
    from .runtime.commands import RuntimeUsage
    from .runtime.world import WorldError
    from .scaffold import ScaffoldError
    from .validation import UsageError

    return (UsageError, ConfigError, HookError, ScaffoldError, MockError, RuntimeUsage,
            WorldError, UnreadableFolder, _Usage)


def _worker_died() -> type[Exception]:
    from .parallel import WorkerDied

    return WorkerDied


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from .diagnostics import escape

    try:
        _check_text_arguments(args)
        if args.command in ("validate", "lint"):
            return _check(args, lint=args.command == "lint")
        if args.command == "rule":
            return _rule(args)
        if args.command == "completion":
            return _completion(args, parser)
        if args.command == "install-hook":
            return _install_hook(args)
        if args.command == "build":
            return _build(args)
        if args.command == "init":
            return _init(args)
        if args.command == "generate-mock":
            return _generate_mock(args)
        if args.command == "skills":
            return _skills(args)
        if args.command in ("state", "select", "plan", "run"):
            return _runtime(args)
        if args.command in ("query", "eval", "export"):
            return _retrieval(args)
        if args.command in ("serve", "mcp"):
            return _serve(args)
        if args.command == "report":
            return _report(args)
        if args.command == "chunk":
            from .authoring.cli import run as run_chunk

            return run_chunk(args)
        if args.command == "contextualize":
            from .authoring.cli import run_contextualize

            return run_contextualize(args)
        if args.command == "facts":
            from .facts.cli import run as run_facts

            return run_facts(args)
    except KeyboardInterrupt:
        return 130
    except _usage_errors() as error:
        from .config import ConfigError

        text = error.render() if isinstance(error, ConfigError) else f"ctxfst: error: {error}"
        print(escape(text), file=sys.stderr)
        return EXIT_USAGE
    except _worker_died() as error:  # a parallel parse lost a worker (killed, out of memory)
        print(f"ctxfst: error: {escape(error)}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # the reader stopped early (`| head`): not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no flush error at exit
        return EXIT_BROKEN_PIPE
    except Exception as error:  # a bug: say so briefly; -v or CTXFST_DEBUG=1 shows the traceback
        if os.environ.get("CTXFST_DEBUG") or verbosity(args) > 0:
            raise
        print(f"ctxfst: internal error: {type(error).__name__}: {escape(error)} "
              "(set CTXFST_DEBUG=1 for details)", file=sys.stderr)
        return EXIT_INTERNAL
    parser.error(f"unknown command {args.command}")
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
