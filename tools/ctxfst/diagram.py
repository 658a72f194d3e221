"""Plans as diagrams to paste: Mermaid (Markdown) and Graphviz DOT.

Every id and label comes from a knowledge base (a stranger's, perhaps): node names in
the output are generated (n1, n2, ...), and labels are escaped for each language, so a
quote, a bracket or a newline in an id cannot break out of its label.
"""

from __future__ import annotations

from typing import Any

FORMATS = ("mermaid", "dot", "html")
EXPANDED_SHOWN = 20  # spread entities drawn, besides those that lead to a result


def plan_diagram(result: dict[str, Any], fmt: str) -> str:
    """The plan (`ctxfst plan --explain --format json`'s data) as a chain: each skill with
    its cost, the states it needs before it and the states it adds after it."""
    return _PlanGraph(result).render(fmt, "plan")


def query_diagram(result: dict[str, Any], index, graph: dict[str, Any], fmt: str,
                  source_root: str = "") -> str:
    """A query's explanation (`ctxfst query --explain --format json`'s data) as a
    subgraph: its seeds, the entities the spread reached, and the chunks chosen, joined by
    the entity graph's edges among them and by which entities each chunk mentions.
    index: the retrieval Index the query ran on; graph: its entity-graph.json; source_root:
    the project as a link prefix, for the chunks' source links in HTML."""
    return _QueryGraph(result, index, graph).render(fmt, "query", source_root)


class Diagram:
    """Nodes (generated names n1, n2, ... and labels), their kinds, and labelled edges."""

    SHAPES = {"mermaid": {"skill": '["{}"]', "goal": '(["{}"])', "chunk": '[/"{}"/]',
                          "seed": '(("{}"))'},
              "dot": {"skill": "box", "goal": "doubleoctagon", "chunk": "note",
                      "seed": "doublecircle"}}

    def __init__(self, title: str) -> None:
        self.title = title
        self.nodes: dict[str, tuple[str, str]] = {}  # key -> (generated name, label)
        self.kinds: dict[str, str] = {}  # generated name -> its kind
        self.ids: dict[str, str] = {}  # generated name -> the id it stands for
        self.notes: dict[str, list[str]] = {}  # generated name -> lines for its panel
        # (source, target, label shown in Mermaid and DOT, relation styled in HTML)
        self.edges: list[tuple[str, str, str, str]] = []
        self.undirected: set[str] = set()  # relations drawn without a direction
        self.columns: dict[str, int] = {}  # generated name -> column, when fixed
        self.scores: dict[int, float] = {}  # edge number -> its score (hover, in HTML)
        # chunks shown (HTML: their source links), and which node shows which
        self.sources: list[str] = []
        self.chunk_table: dict[str, list] = {"id": [], "src": [], "line": [], "context": []}
        self.chunk_refs: dict[str, list[int]] = {}

    def _node(self, space: str, label: str, kind: str, node_id: str | None = None) -> str:
        key = f"{space}\0{label}"
        if key not in self.nodes:
            name = f"n{len(self.nodes) + 1}"
            self.nodes[key] = (name, label)
            self.kinds[name] = kind
            self.ids[name] = node_id or label
        return self.nodes[key][0]

    def _edge(self, source: str, target: str, label: str = "", relation: str = "") -> None:
        edge = (source, target, label, relation or label.split(" ")[0])
        if edge not in self.edges:
            self.edges.append(edge)

    def render(self, fmt: str, kind: str, source_root: str = "") -> str:
        if fmt == "mermaid":
            return self.mermaid()
        if fmt == "dot":
            return self.dot()
        return self.html(kind, source_root)

    def mermaid(self) -> str:
        lines = ["flowchart LR", f"  %% {_mermaid_comment(self.title)}"]
        for name, label in self.nodes.values():
            shape = self.SHAPES["mermaid"].get(self.kinds[name], '("{}")')
            lines.append(f"  {name}{shape.format(_mermaid_label(label))}")
        for source, target, label, relation in self.edges:
            arrow = "---" if relation in self.undirected else "-->"
            lines.append(f'  {source} {arrow}|"{_mermaid_label(label)}"| {target}' if label
                         else f"  {source} {arrow} {target}")
        return "\n".join(lines) + "\n"

    def dot(self) -> str:
        lines = ["digraph plan {", "  rankdir=LR;", f"  label={_dot_string(self.title)};"]
        for name, label in self.nodes.values():
            shape = self.SHAPES["dot"].get(self.kinds[name], "ellipse")
            lines.append(f"  {name} [label={_dot_string(label)}, shape={shape}];")
        for source, target, label, relation in self.edges:
            attributes = ([f"label={_dot_string(label)}"] if label else []) + (
                ["dir=none"] if relation in self.undirected else [])
            lines.append(f"  {source} -> {target}"
                         + (f" [{', '.join(attributes)}]" if attributes else "") + ";")
        return "\n".join(lines + ["}"]) + "\n"

    def html(self, kind: str, source_root: str = "") -> str:
        """The diagram as a page of its own (the report's renderer), laid out in columns:
        fixed ones when given, else each node right of everything that leads to it."""
        from .report.layout import column_layout
        from .report.page import render_page

        names = [name for name, _ in self.nodes.values()]
        labels = [label for _, label in self.nodes.values()]
        columns = self.columns or _layers(names, self.edges)
        stacks: list[list[int]] = [[] for _ in range(max(columns.values(), default=0) + 1)]
        for number, name in enumerate(names):
            stacks[columns[name]].append(number)
        # a plan reads top to bottom (its labels side by side would overlap); a query's
        # seeds, spread and chunks stand in three columns
        placed = column_layout(stacks, 320.0, 34.0) if self.columns else \
            column_layout(stacks, 300.0, 80.0, rows=True)
        kinds = sorted(set(self.kinds.values()))
        relations = sorted({relation for _, _, _, relation in self.edges})
        at = {name: number for number, name in enumerate(names)}
        data = {
            "kind": kind, "title": self.title, "source_root": source_root,
            "types": kinds, "relations": relations,
            "undirected": sorted(self.undirected & set(relations)),
            "nodes": {"id": [self.ids[name] for name in names], "name": labels,
                      "type": [kinds.index(self.kinds[name]) for name in names],
                      "aliases": [[] for _ in names], "mentions": [0 for _ in names],
                      "x": [placed[n][0] for n in range(len(names))],
                      "y": [placed[n][1] for n in range(len(names))]},
            "edges": {"s": [at[s] for s, _, _, _ in self.edges],
                      "t": [at[t] for _, t, _, _ in self.edges],
                      "r": [relations.index(relation) for _, _, _, relation in self.edges],
                      "w": [self.scores.get(n) for n in range(len(self.edges))]},
            "details": [{"notes": self.notes.get(name, []),
                         "chunks": self.chunk_refs.get(name, []),
                         "chunk_count": len(self.chunk_refs.get(name, []))}
                        for name in names],
            "chunks": self.chunk_table, "sources": self.sources,
        }
        return render_page(data, self.title).decode("utf-8")


def _layers(names: list[str], edges: list[tuple[str, str, str, str]]) -> dict[str, int]:
    """Each node's column: one right of the furthest node with an edge into it (edges
    that close a cycle are left out, in the order the nodes were made)."""
    incoming: dict[str, list[str]] = {name: [] for name in names}
    for source, target, _, _ in edges:
        incoming[target].append(source)
    column: dict[str, int] = {}
    remaining = list(names)
    while remaining:
        ready = [name for name in remaining if all(p in column for p in incoming[name])]
        for name in ready or remaining[:1]:  # (a cycle: take the first made)
            column[name] = max((column[p] + 1 for p in incoming[name] if p in column),
                               default=0)
            remaining.remove(name)
    return column


class _PlanGraph(Diagram):
    def __init__(self, result: dict[str, Any]) -> None:
        super().__init__(f"plan for {result['goal']}: cost {result['cost']:g}" if result["solved"]
                         else f"no plan for {result['goal']}: {result['reason']}")
        if not result["solved"]:
            self.notes[self._node("state", result["goal"], "goal")] = [result["reason"]]
            return
        steps = result.get("explanation") or [
            {"step": n, "skill": name, "preconditions_met": [], "adds": [], "cost": None}
            for n, name in enumerate(result["steps"], 1)]
        previous = None
        for step in steps:
            cost = f" (cost {step['cost']:g})" if step.get("cost") is not None else ""
            skill = self._node(f"skill {step['step']}", f"{step['step']}. {step['skill']}{cost}",
                               "skill", step["skill"])
            self.notes[skill] = [f"step {step['step']}: {step['skill']}{cost}"] + [
                f"removes {fact}" for fact in step.get("removes", [])]
            needs = [self._node("state", fact, "goal" if fact == result["goal"] else "state")
                     for fact in step.get("preconditions_met", [])]
            for need in needs:
                self._edge(need, skill, relation="NEEDS")
            if previous is not None and not needs:
                self._edge(previous, skill, relation="THEN")  # (without --explain: the order)
            for fact in step.get("adds", []):
                self._edge(skill, self._node("state", fact,
                                             "goal" if fact == result["goal"] else "state"),
                           relation="ADDS")
            previous = skill


class _QueryGraph(Diagram):
    def __init__(self, result: dict[str, Any], index, graph: dict[str, Any]) -> None:
        super().__init__(f"query: {result['query']} ({result['mode']})")
        hits = result["results"]
        rows = {chunk_id: row for row, chunk_id in enumerate(index.chunk_ids)}
        mentioned = {hit["chunk_id"]: index.chunk_entities(rows[hit["chunk_id"]])
                     for hit in hits if hit["chunk_id"] in rows}
        leading = {entity for entities in mentioned.values() for entity in entities}
        entities: dict[str, str] = {}  # id -> generated name
        for seed in result.get("seeds", []):
            name = self._node("entity", seed["name"], "seed", seed["entity"])
            entities[seed["entity"]] = name
            self.notes[name] = [f"seed {seed['score']} (by {seed['by']})"]
            self.columns[name] = 0
        for number, spread in enumerate(result.get("expanded", [])):
            if number >= EXPANDED_SHOWN and spread["entity"] not in leading:
                continue
            name = self._node("entity", spread["name"], "entity", spread["entity"])
            entities[spread["entity"]] = name
            self.notes[name] = [f"reached by the spread: activation {spread['activation']}"]
            self.columns[name] = 1
        undirected = set(graph.get("meta", {}).get("undirected_relations", ["SIMILAR"]))
        for edge in graph["edges"]:  # the graph's edges among them, in the graph's order
            source, target = entities.get(edge["source"]), entities.get(edge["target"])
            if source is None or target is None or source == target:
                continue
            relation, score = edge["relation"], edge.get("score")
            scored = relation == "SIMILAR" and isinstance(score, (int, float))
            self._edge(source, target, f"{relation} {score:.2f}" if scored else relation)
            if relation in undirected:
                self.undirected.add(relation)
            if scored:
                self.scores[len(self.edges) - 1] = round(float(score), 4)
        self.sources = sorted({hit["source"] for hit in hits})
        for rank, hit in enumerate(hits, 1):
            name = self._node("chunk", f"{rank}. {hit['chunk_id']}", "chunk", hit["chunk_id"])
            self.columns[name] = 2
            self.notes[name] = [f"result {rank}: score {hit['score']}", hit["context"]] + [
                f"via {via}" for via in hit["via"]]
            for key, value in (("id", hit["chunk_id"]),
                               ("src", self.sources.index(hit["source"])),
                               ("line", hit["line_start"]), ("context", hit["context"])):
                self.chunk_table[key].append(value)
            self.chunk_refs[name] = [rank - 1]
            for entity in mentioned.get(hit["chunk_id"], []):
                if entity in entities:
                    self._edge(entities[entity], name, "MENTIONS")


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
