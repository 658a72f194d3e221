"""The commands, one module per family (as doit's doit/cmd/): each declares its parsers
(add_* functions, each binding its run function with set_defaults) and runs its
commands. Modules import only what parsing needs; each command imports its work when
it runs, so `ctxfst --help` stays light."""

from __future__ import annotations

import argparse

from . import authoring, check, facts, project, report, retrieval, rule, runtime, serve, skills


def add_all(commands, root: argparse.ArgumentParser) -> None:
    """Every command, in the order `ctxfst --help` lists them."""
    check.add_validate(commands)
    check.add_lint(commands)
    rule.add_rule(commands)
    project.add_build(commands)
    project.add_init(commands)
    project.add_generate_mock(commands)
    skills.add_skills(commands)
    runtime.add_runtime(commands)
    facts.add_facts(commands)
    authoring.add_chunk(commands)
    authoring.add_contextualize(commands)
    retrieval.add_query(commands)
    retrieval.add_export(commands)
    report.add_report(commands)
    retrieval.add_eval(commands)
    serve.add_serve(commands)
    serve.add_mcp(commands)
    project.add_install_hook(commands)
    project.add_completion(commands, root)
