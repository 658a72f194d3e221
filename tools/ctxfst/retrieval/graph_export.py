"""`ctxfst export graph`: the entity graph as GraphML or GEXF, the files networkx, Gephi
and Cytoscape open.

Nodes keep every field of entity-graph.json; an edge its relation, score, shared chunk
count and properties. A list or object value (aliases, chunk ids, an edge's
properties) becomes its JSON text, since neither format has lists. The graph is
directed; SIMILAR edges are not (stored once, source < target): each edge says so in
an `undirected` attribute, and GEXF types them `mutual` (networkx refuses an undirected
edge in a directed graph, in either format).
Characters XML 1.0 cannot hold (control characters) are written as U+FFFD.
"""

from __future__ import annotations

import json
import math
import re
import xml.etree.ElementTree as ET
from typing import Any

from ..compile.graph import UNDIRECTED_RELATIONS
from .search import RetrievalError

_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, dict)):
        value = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return _NOT_XML.sub("\ufffd", str(value))


def _kind(values: list[Any]) -> str:
    """The one attribute type that holds every value of a field: boolean, long, double,
    else string."""
    if all(isinstance(v, bool) for v in values):
        return "boolean"
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return "long"
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
           for v in values):
        return "double"
    return "string"


def _fields(items: list[dict[str, Any]], skip: tuple[str, ...]) -> list[tuple[str, str]]:
    """(name, type) of every field the items carry, in sorted order."""
    found: dict[str, list[Any]] = {}
    for item in items:
        for name, value in item.items():
            if name not in skip and value is not None:
                found.setdefault(name, []).append(value)
    return [(name, _kind(found[name])) for name in sorted(found)]


def _checked(graph: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The graph's nodes, and its edges each with its `undirected` flag."""
    from .search import graph_problem

    problem = graph_problem(graph)
    if problem:
        raise RetrievalError(f"entity-graph.json is not an entity graph ({problem}): "
                             "run `doit`")
    return graph["nodes"], [{**edge, "undirected": edge["relation"] in UNDIRECTED_RELATIONS}
                            for edge in graph["edges"]]


def graphml(graph: Any) -> bytes:
    nodes, edges = _checked(graph)
    root = ET.Element("graphml", xmlns="http://graphml.graphdrawing.org/xmlns")
    node_fields = _fields(nodes, ("id",))
    edge_fields = _fields(edges, ("source", "target"))
    keys: dict[tuple[str, str], str] = {}
    for scope, fields in (("node", node_fields), ("edge", edge_fields)):
        for name, kind in fields:
            key = keys[(scope, name)] = f"{scope[0]}_{name}"
            ET.SubElement(root, "key", {"id": key, "for": scope, "attr.name": name,
                                        "attr.type": kind})
    body = ET.SubElement(root, "graph", id="ctxfst", edgedefault="directed")
    for node in nodes:
        element = ET.SubElement(body, "node", id=_text(node["id"]))
        for name, _ in node_fields:
            if node.get(name) is not None:
                ET.SubElement(element, "data", key=keys[("node", name)]).text = \
                    _text(node[name])
    for number, edge in enumerate(edges):
        element = ET.SubElement(body, "edge", {"id": f"e{number}",
                                               "source": _text(edge["source"]),
                                               "target": _text(edge["target"])})
        for name, _ in edge_fields:
            if edge.get(name) is not None:
                ET.SubElement(element, "data", key=keys[("edge", name)]).text = \
                    _text(edge[name])
    return _document(root)


def gexf(graph: Any) -> bytes:
    nodes, edges = _checked(graph)
    root = ET.Element("gexf", {"xmlns": "http://gexf.net/1.3", "version": "1.3"})
    body = ET.SubElement(root, "graph", defaultedgetype="directed", mode="static")
    node_fields = _fields(nodes, ("id", "name"))
    edge_fields = _fields(edges, ("source", "target", "score"))
    for scope, fields in (("node", node_fields), ("edge", edge_fields)):
        declared = ET.SubElement(body, "attributes", {"class": scope})
        for number, (name, kind) in enumerate(fields):
            ET.SubElement(declared, "attribute", id=str(number), title=name,
                          type=kind)
    listed = ET.SubElement(body, "nodes")
    for node in nodes:
        element = ET.SubElement(listed, "node", id=_text(node["id"]),
                                label=_text(node.get("name", node["id"])))
        _attvalues(element, node, node_fields)
    listed = ET.SubElement(body, "edges")
    for number, edge in enumerate(edges):
        attributes = {"id": str(number), "source": _text(edge["source"]),
                      "target": _text(edge["target"]), "label": _text(edge["relation"])}
        if edge["undirected"]:
            attributes["type"] = "mutual"
        score = edge.get("score")
        if isinstance(score, (int, float)) and not isinstance(score, bool) \
                and math.isfinite(score):
            attributes["weight"] = repr(float(score))
        _attvalues(ET.SubElement(listed, "edge", attributes), edge, edge_fields)
    return _document(root)


def _attvalues(element: ET.Element, item: dict[str, Any],
               fields: list[tuple[str, str]]) -> None:
    values = ET.SubElement(element, "attvalues")
    for number, (name, _) in enumerate(fields):
        if item.get(name) is not None:
            ET.SubElement(values, "attvalue", {"for": str(number), "value": _text(item[name])})


def _document(root: ET.Element) -> bytes:
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"


WRITERS = {"graphml": graphml, "gexf": gexf}


def export_graph(build_dir, file_format: str, cache_dir=None) -> bytes:
    """build/entity-graph.json, checked against the build's manifest, in file_format."""
    from ..artifacts.reader import ArtifactError, BuildArtifacts

    try:
        graph = BuildArtifacts(build_dir, ["entity-graph.json"], cache_dir).json(
            "entity-graph.json")
    except ArtifactError as error:
        raise RetrievalError(str(error)) from None
    return WRITERS[file_format](graph)
