"""The docs describe what the code does: every rule code, the README's two commands."""

from __future__ import annotations

import re

from ctxfst.diagnostics import RULES

from .conftest import REPO


def test_every_rule_code_is_documented_with_its_severity():
    text = (REPO / "docs" / "rules.md").read_text()
    for code, rule in RULES.items():
        row = re.search(rf"^\| {code} \| (\w+) \|", text, re.MULTILINE)
        assert row, f"{code} is not documented in docs/rules.md"
        assert row.group(1) == rule.severity.value, code


def test_readme_shows_the_two_commands_and_ci_runs_the_test_one():
    readme = (REPO / "README.md").read_text()
    assert "./scripts/build.sh" in readme and "./scripts/test.sh" in readme
    assert "scripts/test.sh" in (REPO / ".ci" / "run").read_text()
