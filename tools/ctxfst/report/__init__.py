"""`ctxfst report`: the entity graph, the world model, the build and its findings as one
self-contained HTML file (data.py gathers, layout.py places, page.py writes)."""

from __future__ import annotations

from pathlib import Path

from .data import ReportError, report_data
from .page import render_page

DEFAULT_NAME = "report.html"


def make_report(config, out: Path, lint: bool = True, with_world_state: bool = True
                ) -> tuple[bytes, dict[str, int]]:
    """The report's bytes for the project's published build (the same build gives the
    same bytes), and what it holds (entities, edges, findings); `out`: where it will be
    written (source links are relative to it). with_world_state: the world model starts
    from .ctxfst/world-state.json when there is one (else from the states no skill
    produces)."""
    data = report_data(config, out, lint, with_world_state)
    nodes, edges = len(data["nodes"]["id"]), len(data["edges"]["s"])
    world = data["world"]
    summary = (f"{nodes:,} entities, {edges:,} edges; {world['unreachable_states']} "
               f"unreachable state(s), {world['unreachable_skills']} skill(s) that never run")
    findings = data["findings"]["total"] if data["findings"] is not None else 0
    if data["findings"] is not None:
        summary += f"; {findings:,} finding(s)"
    return render_page(data, summary), {"entities": nodes, "edges": edges,
                                        "findings": findings}


__all__ = ["DEFAULT_NAME", "ReportError", "make_report"]
