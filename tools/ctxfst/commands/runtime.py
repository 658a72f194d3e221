"""The world-state runner's commands: `state`, `select`, `run`, `plan`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..cli_args import add_command, format_option, verbosity
from .common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    Usage,
    at_least_zero,
    positive,
    print_data,
    seconds,
)


def add_runtime(commands) -> None:
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
    subgraph.add_argument("--depth", type=at_least_zero, default=2,
                          help="how many hops from the goal")
    common(subgraph)
    selecting = add_command(commands, "select", "rank the skills that can run now",
                            ["ctxfst select", "ctxfst select --explain --format json"])
    selecting.add_argument("--explain", action="store_true",
                           help="also list the skills that cannot run, and why")
    selecting.add_argument("--retries", type=at_least_zero, default=2,
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
    running.add_argument("--max-steps", type=positive, default=20,
                         help="stop after this many steps")
    running.add_argument("--replan", action="store_true",
                         help="after a failed step, plan again instead of stopping")
    running.add_argument("--timeout", type=seconds, default=60.0,
                         help="seconds a skill script may run (command executor)")
    running.add_argument("--retries", type=at_least_zero, default=2,
                         help="how often a failed skill may be retried")
    running.add_argument("--yes", action="store_true",
                         help="re-run an interrupted non-idempotent skill without asking")
    running.add_argument("--max-depth", type=positive, default=None,
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
    planning.add_argument("--max-depth", type=positive, default=None,
                          help="plans of at most this many steps (the cheapest of them)")
    common(planning, diagrams=True)
    for command in (state, selecting, running, planning):
        command.set_defaults(run=_runtime)


def _state_text(state) -> list[str]:
    done = ", ".join(f"{c['skill']} ({c['result']})" for c in state.completed_skills) or "none"
    return [f"goal: {state.goal}{'  (reached)' if state.reached else ''}",
            f"active states: {', '.join(state.active_states) or 'none'}",
            f"completed skills: {done}", f"serial {state.serial}, lineage {state.lineage}"]


def _runtime(args: argparse.Namespace) -> int:
    from ..diagnostics import escape
    from ..runtime import commands as rt
    from ..runtime.state import StateError, StateFileError

    config = rt.project()
    store = rt.store_for(config, args.state)
    try:
        if args.command == "plan":
            if args.seed and args.goal is None:
                raise Usage("--seed needs --goal")
            diagram = args.format in ("mermaid", "dot", "html")
            result = rt.make_plan(config, store, args.goal, args.seed, args.algorithm,
                                  args.explain or diagram, max_depth=args.max_depth)
            if diagram:
                from ..diagram import plan_diagram

                print(plan_diagram(result, args.format), end="")
            else:
                print_data(result, args.format, _plan_text(result))
            return EXIT_OK if result["solved"] else EXIT_FAILED
        if args.command == "run":
            return _run_loop(args, config, store)
        if args.command == "select":
            result = rt.make_selection(config, store, args.retries)
            print_data(result, args.format, _select_text(result, args.explain))
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
            print_data({"events": events}, args.format, [
                f"{e['serial']:>4} {e['at']} {e['type']} "
                + " ".join(f"{k}={v}" for k, v in sorted(e.items())
                           if k not in ("serial", "at", "type", "lineage")) for e in events])
            return EXIT_OK
        else:
            state = store.load()
        for note in store.notes if verbosity(args) >= 0 else ():
            print(f"ctxfst: note: {escape(note)}", file=sys.stderr)
        print_data(state.to_json(), args.format, _state_text(state))
        return EXIT_OK
    except StateError as error:  # a damaged or foreign state file is bad input (2)
        print(f"ctxfst: error: {escape(error)}", file=sys.stderr)
        return EXIT_USAGE if isinstance(error, StateFileError) else EXIT_FAILED


def _run_loop(args: argparse.Namespace, config, store) -> int:
    from ..runtime import commands as rt
    from ..runtime.loop import command_executor, dry_run, run

    world = rt.world_for(config)
    if args.executor == "command":
        executor = command_executor(config.root, args.timeout)
    else:
        executor = dry_run

    from ..diagnostics import escape
    from ..runtime.loop import Critique

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
        from ..diagnostics import json_text
        from ..runtime.loop import reference_result

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
    print_data(data, args.format, lines)
    return EXIT_OK if result.reason == "goal_reached" else EXIT_FAILED


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
