"""One self-contained HTML file: the page's data as JSON in a script block that is never
run, the renderer and its styles inlined (report.js, report.css beside this module).

A Content-Security-Policy admits only those two inline blocks (by their digests) and
no network at all, so text from a knowledge base can neither run nor fetch anything,
even if an escape below were wrong; the renderer puts it in the page as text only.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
from functools import cache
from pathlib import Path
from typing import Any

ON = ' class="on"'
ASSETS = Path(__file__).with_name("assets")
TABS = {"report": (("graph", "Graph"), ("world", "World model"), ("build", "Build"),
                   ("findings", "Findings")),
        "query": (("graph", "Query"),), "plan": (("graph", "Plan"),)}


@cache
def _asset(name: str) -> str:
    return (ASSETS / name).read_text(encoding="utf-8")


def _digest(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode()


def script_json(data: Any) -> str:
    """JSON that is safe inside a <script> element: no "</script>", "<!--" or other markup
    can appear, and U+2028/9 are escaped (both are JSON, and JavaScript, either way)."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def render_page(data: dict[str, Any], summary: str = "") -> bytes:
    """The page for a view: data["kind"] is report, query or plan."""
    script, style = _asset("report.js"), _asset("report.css")
    policy = (f"default-src 'none'; script-src '{_digest(script)}'; "
              f"style-src '{_digest(style)}'; img-src data:; base-uri 'none'; "
              "form-action 'none'")
    tabs = TABS[data["kind"]]
    buttons = "".join(f'<button data-tab="{name}"{ON if n == 0 else ""}>{label}</button>'
                      for n, (name, label) in enumerate(tabs))
    sections = "".join(f'<section class="tab" id="{name}-tab"></section>'
                       for name, _ in tabs[1:])
    title = html.escape(data["title"])
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{policy}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="ctxfst">
<title>{title}</title>
<style>{style}</style>
</head>
<body>
<header><h1>{title}</h1><nav>{buttons}</nav></header>
<main>
<section class="tab on" id="graph-tab">
<div id="canvas-wrap"><canvas id="graph"></canvas><div id="tooltip"></div></div>
<aside>
<p class="muted">{html.escape(summary)}</p>
<input id="search" type="search" placeholder="Search by name, alias or id" autocomplete="off">
<ul id="matches"></ul>
<h3>Types</h3><div class="legend" id="types"></div>
<h3>Relations</h3><div class="legend" id="relations"></div>
<div id="profile"></div>
</aside>
</section>{sections}
</main>
<script type="application/json" id="ctxfst-data">{script_json(data)}</script>
<script>{script}</script>
</body>
</html>
""".encode()
