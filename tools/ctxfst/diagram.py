"""Plans as diagrams to paste: Mermaid (Markdown) and Graphviz DOT.

Every id and label comes from a knowledge base (a stranger's, perhaps): node names in
the output are generated (n1, n2, ...), and labels are escaped for each language, so a
quote, a bracket or a newline in an id cannot break out of its label.
"""

from __future__ import annotations

from typing import Any

FORMATS = ("mermaid", "dot")


def plan_diagram(result: dict[str, Any], fmt: str) -> str:
    """The plan (`ctxfst plan --explain --format json`'s data) as a chain: each skill with
    its cost, the states it needs before it and the states it adds after it."""
    graph = _PlanGraph(result)
    return graph.mermaid() if fmt == "mermaid" else graph.dot()


class _PlanGraph:
    def __init__(self, result: dict[str, Any]) -> None:
        self.title = (f"plan for {result['goal']}: cost {result['cost']:g}" if result["solved"]
                      else f"no plan for {result['goal']}: {result['reason']}")
        self.nodes: dict[str, tuple[str, str]] = {}  # key -> (generated name, label)
        self.kinds: dict[str, str] = {}  # generated name -> skill | state | goal
        self.edges: list[tuple[str, str]] = []
        if not result["solved"]:
            self._node("state", result["goal"], "goal")
            return
        steps = result.get("explanation") or [
            {"step": n, "skill": name, "preconditions_met": [], "adds": [], "cost": None}
            for n, name in enumerate(result["steps"], 1)]
        previous = None
        for step in steps:
            cost = f" (cost {step['cost']:g})" if step.get("cost") is not None else ""
            skill = self._node(f"skill {step['step']}", f"{step['step']}. {step['skill']}{cost}",
                               "skill")
            needs = [self._node("state", fact, "goal" if fact == result["goal"] else "state")
                     for fact in step.get("preconditions_met", [])]
            for need in needs:
                self._edge(need, skill)
            if previous is not None and not needs:
                self._edge(previous, skill)  # (without --explain: the order alone)
            for fact in step.get("adds", []):
                self._edge(skill, self._node("state", fact,
                                             "goal" if fact == result["goal"] else "state"))
            previous = skill

    def _node(self, space: str, label: str, kind: str) -> str:
        key = f"{space}\0{label}"
        if key not in self.nodes:
            name = f"n{len(self.nodes) + 1}"
            self.nodes[key] = (name, label)
            self.kinds[name] = kind
        return self.nodes[key][0]

    def _edge(self, source: str, target: str) -> None:
        if (source, target) not in self.edges:
            self.edges.append((source, target))

    def mermaid(self) -> str:
        lines = ["flowchart LR", f"  %% {_mermaid_comment(self.title)}"]
        for name, label in self.nodes.values():
            text = _mermaid_label(label)
            shape = {"skill": f'["{text}"]', "goal": f'(["{text}"])'}.get(
                self.kinds[name], f'("{text}")')
            lines.append(f"  {name}{shape}")
        lines += [f"  {source} --> {target}" for source, target in self.edges]
        return "\n".join(lines) + "\n"

    def dot(self) -> str:
        lines = ["digraph plan {", "  rankdir=LR;", f"  label={_dot_string(self.title)};"]
        for name, label in self.nodes.values():
            shape = {"skill": "box", "goal": "doubleoctagon"}.get(self.kinds[name], "ellipse")
            lines.append(f"  {name} [label={_dot_string(label)}, shape={shape}];")
        lines += [f"  {source} -> {target};" for source, target in self.edges]
        return "\n".join(lines + ["}"]) + "\n"


def _mermaid_label(text: str) -> str:
    """Text inside a quoted Mermaid label: quotes and the characters Mermaid reads as
    markup become entity codes; line breaks and other control characters, spaces."""
    out = []
    for char in text:
        if char == '"':
            out.append("#quot;")
        elif char in "<>&#`":
            out.append(f"#{ord(char)};")
        elif char < " " or char == "\x7f":
            out.append(" ")
        else:
            out.append(char)
    return "".join(out)


def _mermaid_comment(text: str) -> str:
    return "".join(" " if char < " " or char == "\x7f" else char for char in text)


def _dot_string(text: str) -> str:
    """A DOT double-quoted string: backslashes and quotes escaped, line breaks as \\n."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + "".join("\\n" if char in "\r\n" else " " if char < " " or char == "\x7f"
                         else char for char in escaped) + '"'
