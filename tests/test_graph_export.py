"""The entity graph for graph tools: its meta says which relations are undirected, every
edge has a score, and `ctxfst export graph` writes GraphML and GEXF that networkx reads."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import networkx as nx
import pytest

from ctxfst.pipeline.runner import run_build
from ctxfst.retrieval.graph_export import gexf, graphml

from .conftest import copy_example, reseal


@pytest.fixture
def built(tmp_path, capsys):
    copy_example(tmp_path, "hash-64")
    assert run_build(tmp_path, []) == 0
    capsys.readouterr()
    return tmp_path


def _graph(root):
    return json.loads((root / "build" / "entity-graph.json").read_text())


def test_the_graph_says_which_relations_are_undirected_and_every_edge_has_a_score(built):
    graph = _graph(built)
    assert graph["meta"]["undirected_relations"] == ["SIMILAR"]
    relations = {edge["relation"] for edge in graph["edges"]}
    assert {"SIMILAR", "LEADS_TO", "REQUIRES", "IMPLIES"} <= relations
    for edge in graph["edges"]:
        assert isinstance(edge["score"], float)
        if edge["relation"] == "SIMILAR":
            assert edge["source"] < edge["target"] and 0 < edge["score"] <= 1
        else:
            assert edge["score"] == 1.0


def test_graphml_opens_in_networkx_with_every_node_and_edge(built, cli):
    graph = _graph(built)
    result = cli("export", "graph", "--format", "graphml", "--out", "graph.graphml", cwd=built)
    assert result.code == 0, result.err
    assert "graph.graphml" in result.out
    loaded = nx.read_graphml(built / "graph.graphml")
    assert loaded.is_directed() and loaded.number_of_nodes() == len(graph["nodes"])
    assert loaded.number_of_edges() == len(graph["edges"])
    node = graph["nodes"][0]
    assert loaded.nodes[node["id"]]["name"] == node["name"]
    assert json.loads(loaded.nodes[node["id"]]["chunk_ids"]) == node["chunk_ids"]
    assert loaded.nodes[node["id"]]["mention_count"] == node["mention_count"]
    exported = sorted((source, target, data["relation"], data["score"],
                       json.loads(data["properties"]))
                      for source, target, data in loaded.edges(data=True))
    assert exported == sorted((e["source"], e["target"], e["relation"], e["score"],
                               e["properties"]) for e in graph["edges"])
    assert all(data["undirected"] is (data["relation"] == "SIMILAR")
               for _, _, data in loaded.edges(data=True))


def test_gexf_opens_in_networkx_with_weights_and_mutual_similar_edges(built, cli):
    graph = _graph(built)
    result = cli("export", "graph", "--format", "gexf", cwd=built)  # to standard output
    assert result.code == 0, result.err
    path = built / "graph.gexf"
    path.write_text(result.out, encoding="utf-8")
    loaded = nx.read_gexf(path)
    assert loaded.number_of_nodes() == len(graph["nodes"])
    # networkx reads a mutual edge as one edge each way
    expected = [(e["source"], e["target"], e["relation"], e["score"]) for e in graph["edges"]]
    expected += [(e["target"], e["source"], e["relation"], e["score"])
                 for e in graph["edges"] if e["relation"] == "SIMILAR"]
    assert sorted((source, target, data["label"], data["weight"])
                  for source, target, data in loaded.edges(data=True)) == sorted(expected)
    node = graph["nodes"][0]
    assert loaded.nodes[node["id"]]["label"] == node["name"]
    assert result.out.count('type="mutual"') == sum(e["relation"] == "SIMILAR"
                                                    for e in graph["edges"])


def test_the_export_is_deterministic(built, cli):
    first = cli("export", "graph", "--format", "graphml", cwd=built).out
    assert first and cli("export", "graph", "--format", "graphml", cwd=built).out == first


def test_text_xml_cannot_hold_is_replaced_not_written_raw():
    graph = {"meta": {}, "nodes": [{"id": "entity:a\x01", "name": "bell\x07 <&> 名",
                                    "aliases": ["x\x00"]}, {"id": "entity:b", "name": "b"}],
             "edges": [{"source": "entity:a\x01", "target": "entity:b", "relation": "SIMILAR",
                        "score": 0.5, "properties": {"note": "\x1b"}}]}
    for data in (graphml(graph), gexf(graph)):
        text = data.decode("utf-8")
        assert not any(char in text for char in "\x00\x01\x07\x1b")
        parsed = ET.fromstring(data)  # well-formed XML
        values = [element.text for element in parsed.iter() if element.text] + \
            [value for element in parsed.iter() for value in element.attrib.values()]
        assert "bell\ufffd <&> 名" in values and "entity:a\ufffd" in values


def test_bad_exports_are_clear_errors(built, cli, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    (built / "linked-out").symlink_to(elsewhere)  # inside by its words, out by a link
    result = cli("export", "graph", "--format", "graphml", "--out", "linked-out/graph.graphml",
                 cwd=built)
    assert result.code == 2 and "outside it (through a link)" in result.err
    assert not (elsewhere / "graph.graphml").exists()
    (built / "a-folder").mkdir()
    result = cli("export", "graph", "--format", "gexf", "--out", "a-folder", cwd=built)
    assert result.code == 2 and "--out a-folder" in result.err and "Traceback" not in result.err
    result = cli("export", "graph", "--format", "dot", cwd=built)
    assert result.code == 2
    graph = built / "build" / "entity-graph.json"
    graph.write_text(json.dumps({"meta": {}, "nodes": [{"name": "no id"}], "edges": []}))
    result = cli("export", "graph", "--format", "graphml", "--allow-stale", cwd=built)
    assert result.code == 2 and "manifest" in result.err and "Traceback" not in result.err
    reseal(built / "build", "entity-graph.json")  # the manifest agrees: the shape is checked
    result = cli("export", "graph", "--format", "graphml", "--allow-stale", cwd=built)
    assert result.code == 2 and "not an entity graph" in result.err
