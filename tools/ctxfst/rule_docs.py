"""`ctxfst rule CODE`: what a diagnostic code means, from docs/rules.md.

docs/rules.md is the one place a code is explained; an installed ctxfst has no docs/, so
its tables and section notes are kept as package data (rule_docs.json), regenerated with
`python -m ctxfst.rule_docs --write` (a test fails when the two drift apart)."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from .diagnostics import RULES, Severity

DATA_FILE = Path(__file__).with_name("rule_docs.json")
DOCS_FILE = Path(__file__).resolve().parents[2] / "docs" / "rules.md"
_ROW = re.compile(r"^\| (CTX\d{3}) \| (\w+) \| (.*) \|$")


def parse(markdown: str) -> dict[str, dict]:
    """{code: {severity, meaning, group, notes}} from the rules tables; a group's notes
    are the paragraphs of its section outside the table (what its codes share)."""
    found: dict[str, dict] = {}
    group, notes, codes = "", [], []

    def close_section() -> None:
        text = "\n\n".join(" ".join(p.split()) for p in "\n".join(notes).split("\n\n")
                           if p.strip())
        for code in codes:
            found[code]["notes"] = text

    for line in markdown.splitlines():
        if line.startswith("## "):
            close_section()
            group, notes, codes = line[3:].strip(), [], []
            continue
        row = _ROW.match(line)
        if row:
            code, severity, meaning = row.groups()
            meaning = meaning.replace("\\|", "|").strip()
            found[code] = {"severity": severity, "meaning": meaning, "group": group,
                           "notes": ""}
            codes.append(code)
        elif group and not line.startswith("|"):
            notes.append(line)
    close_section()
    return found


def render(markdown: str) -> str:
    return json.dumps(parse(markdown), ensure_ascii=False, indent=1, sort_keys=True) + "\n"


def load() -> dict[str, dict]:
    return json.loads(DATA_FILE.read_text(encoding="utf-8"))


class UnknownRule(Exception):
    pass


def explain(code: str | None) -> list[dict]:
    """The rules a code or a prefix names (all of them for None), in code order; an
    unknown one raises UnknownRule with a did-you-mean."""
    from .rule_selection import did_you_mean

    wanted = (code or "").strip().upper()
    docs = load()
    matched = sorted(c for c in RULES if c.startswith(wanted))
    if not matched:
        raise UnknownRule(f"no diagnostic code {code!r}{did_you_mean(wanted, RULES)}")
    return [{"code": c, "severity": RULES[c].severity.value, "title": RULES[c].title,
             "silenceable": RULES[c].severity is not Severity.ERROR,
             "reported_by": "lint" if c.startswith("CTX5") else "validate",
             **{key: docs.get(c, {}).get(key, "") for key in ("meaning", "group", "notes")}}
            for c in matched]


def text_lines(rules: list[dict], width: int = 88) -> list[str]:
    import textwrap

    if len(rules) > 1:
        return [f"{r['code']}  {r['severity']:<7}  {r['title']}" for r in rules]
    rule = rules[0]
    code = rule["code"]
    if rule["silenceable"]:
        silence = (f"silence it with [lint] ignore = [\"{code}\"], --ignore {code}, or "
                   f"`# ctxfst: noqa {code}` in the chunk or entity entry")
    else:
        silence = "an error: it cannot be silenced, only fixed"
    by = "ctxfst lint" if rule["reported_by"] == "lint" else "ctxfst validate, lint and build"
    lines = [f"{code} ({rule['severity']}): {rule['title']}", ""]
    lines += textwrap.wrap(rule["meaning"], width)
    if rule["notes"]:
        lines += ["", f"{rule['group']}:"]
        for paragraph in rule["notes"].split("\n\n"):
            lines += textwrap.wrap(paragraph, width, initial_indent="  ",
                                   subsequent_indent="  ")
    lines += ["", f"reported by: {by}", f"{silence}.", "more: docs/rules.md"]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write or check rule_docs.json.")
    parser.add_argument("--write", action="store_true", help="rewrite the file")
    args = parser.parse_args(argv)
    text = render(DOCS_FILE.read_text(encoding="utf-8"))
    if args.write:
        DATA_FILE.write_text(text, encoding="utf-8")
        return 0
    if DATA_FILE.read_text(encoding="utf-8") != text:
        print(f"out of date: {DATA_FILE} (python -m ctxfst.rule_docs --write)",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
