"""`ctxfst report`: one self-contained HTML page of the build (graph, world model, build
statistics, findings), deterministic, safe with hostile names, and checked in a real
headless Chromium (skipped, saying why, where there is none)."""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest

from ctxfst.pipeline.runner import run_build
from ctxfst.report.layout import force_layout

from .browser import Chromium, chromium_path, file_url
from .conftest import copy_example, make_project, write

CHROMIUM = chromium_path()
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="no Chromium here (Debian's chromium package; .ci/run installs it)")


def page_data(path) -> dict:
    text = path.read_text(encoding="utf-8")
    found = re.search(r'<script type="application/json" id="ctxfst-data">(.*?)</script>',
                      text, re.S)
    assert found, "the page carries its data"
    return json.loads(found.group(1))


def _graph(root) -> dict:
    return json.loads((root / "build" / "entity-graph.json").read_text())


def test_the_report_is_one_self_contained_page_of_the_build(built_example, cli):
    result = cli("report", cwd=built_example)
    assert result.code == 0, result.err
    assert "build/report.html" in result.out
    page = built_example / "build" / "report.html"
    text = page.read_text(encoding="utf-8")
    # nothing is fetched when it opens: no external script, style, image or frame
    assert not re.search(r"<(link|img|iframe)\b|\ssrc=", text)
    assert "default-src 'none'" in text and text.count("<script") == 2
    data = page_data(page)
    graph = _graph(built_example)
    assert data["nodes"]["id"] == [node["id"] for node in graph["nodes"]]
    assert len(data["edges"]["s"]) == len(graph["edges"])
    assert set(data["relations"]) == {edge["relation"] for edge in graph["edges"]}
    assert all(-1000 <= v <= 1000 for v in data["nodes"]["x"] + data["nodes"]["y"])
    hono = data["nodes"]["id"].index("entity:hono")
    detail = data["details"][hono]
    assert detail["contexts"] and detail["chunks"]
    chunk = detail["chunks"][0]
    assert data["sources"][data["chunks"]["src"][chunk]].startswith("content/")
    assert data["source_root"] == "../"  # build/report.html -> the project root
    # the build: every stage with its time, every artifact with its size and rows
    recorded = json.loads((built_example / "build" / "run_results.json").read_text())
    assert [(s["stage"], s["seconds"]) for s in data["build"]["stages"]] == [
        (s["stage"], s["seconds"]) for s in recorded["stages"]]
    embed = next(s for s in data["build"]["stages"] if s["stage"] == "embed")
    assert "cache_hits" in embed["counts"]
    assert {a["path"] for a in data["build"]["artifacts"]} >= {"chunks.parquet",
                                                                "entity-graph.json"}
    assert all(a["bytes"] > 0 for a in data["build"]["artifacts"])
    world = data["world"]
    assert {s["name"] for s in world["skills"]} == {"analyze-gaps", "ask-career-coach",
                                                     "draft-learning-plan", "inventory-skills"}
    resume = next(s for s in world["states"] if s["id"] == "state:has-resume")
    assert resume["flags"] == ["input: no skill produces it"] and resume["reachable"]
    assert data["findings"]["total"] == sum(data["findings"]["counts"].values())


def test_the_same_build_gives_the_same_report_bytes(built_example, cli):
    assert cli("report", cwd=built_example).code == 0
    first = (built_example / "build" / "report.html").read_bytes()
    assert cli("report", "--out", "again.html", cwd=built_example).code == 0
    again = (built_example / "again.html").read_bytes()
    # the only difference: links to sources start from the report's own folder
    assert again.replace(b'"source_root":"./"', b'"source_root":"../"') == first
    shutil.rmtree(built_example / "build")
    assert run_build(built_example, [], quiet=True) == 0
    assert cli("report", cwd=built_example).code == 0
    # a new build of the same sources: the same page, but for its own run (stage
    # timings, cache hits)
    rebuilt = page_data(built_example / "build" / "report.html")
    before = page_data(built_example / "again.html")
    before["source_root"] = "../"
    assert [s["stage"] for s in rebuilt["build"].pop("stages")] == [
        s["stage"] for s in before["build"].pop("stages")]
    assert rebuilt == before


def test_the_world_model_flags_what_no_skill_sequence_reaches(tmp_path, cli):
    make_project(tmp_path)
    write(tmp_path, "content/world.ctxfst.md", """\
        ---
        title: World
        entities:
          - {id: "state:has-a", name: Has A, type: state}
          - {id: "state:has-b", name: Has B, type: state}
          - {id: "state:orphan", name: Orphan, type: state}
        chunks:
          - {id: "w:one", context: The world, entities: ["state:has-a", "state:has-b"]}
        ---
        <Chunk id="w:one">Has A and Has B.</Chunk>
        """)
    write(tmp_path, "skills/make-b/SKILL.md", """\
        ---
        name: make-b
        description: Makes B from B
        preconditions: ["state:has-b"]
        postconditions: ["state:has-b", "state:has-a"]
        ---
        Needs what it makes.
        """)
    assert run_build(tmp_path, [], quiet=True) == 0
    result = cli("report", "--no-lint", cwd=tmp_path)
    assert result.code == 0, result.err
    data = page_data(tmp_path / "build" / "report.html")
    states = {s["id"]: s for s in data["world"]["states"]}
    assert states["state:has-b"]["flags"] == ["unreachable"]
    assert states["state:has-a"]["produced_by"] == ["make-b"]
    assert "unreachable" in states["state:has-a"]["flags"]
    assert states["state:orphan"]["flags"] == ["input: no skill produces it"]
    (skill,) = data["world"]["skills"]
    assert not skill["reachable"] and skill["missing"] == ["state:has-b"]
    assert data["findings"] is None


def test_a_report_needs_a_fresh_build_and_writes_where_it_is_asked(built_example, cli):
    outside = built_example.parent / "outside.html"
    result = cli("report", "--out", str(outside), "--no-lint", cwd=built_example)
    assert result.code == 0 and outside.read_text().startswith("<!DOCTYPE html>"), result.err
    result = cli("report", "--out", "content/page.html", cwd=built_example)
    assert result.code == 2 and "CTX810" in result.err
    assert not (built_example / "content" / "page.html").exists()
    doc = built_example / "content" / "backend-frameworks.ctxfst.md"
    doc.write_text(doc.read_text(encoding="utf-8") + "\n", encoding="utf-8")
    result = cli("report", cwd=built_example)
    assert result.code == 2 and "--allow-stale" in result.err
    assert not (built_example / "build" / "report.html").exists()
    assert cli("report", "--allow-stale", cwd=built_example).code == 0
    shutil.rmtree(built_example / "build")
    result = cli("report", cwd=built_example)
    assert result.code == 2 and "Traceback" not in result.err


def test_a_tampered_artifact_is_refused(built_example, cli):
    graph_file = built_example / "build" / "entity-graph.json"
    graph_file.write_text(graph_file.read_text().replace("Hono", "H0no"))
    result = cli("report", cwd=built_example)
    assert result.code == 2 and "entity-graph.json" in result.err
    assert not (built_example / "build" / "report.html").exists()


HOSTILE = '</script><script>window.pwned=1</script><img src=x onerror="window.pwned=2">'


def _hostile_kb(root):
    make_project(root)
    write(root, "ctxfst.toml", 'content_dir = "content"\nskills_dir = "skills"\n'
          'embedding_model = "hash-64"\n')
    write(root, "content/evil.ctxfst.md", f"""\
        ---
        title: Evil
        entities:
          - id: "entity:evil"
            name: {json.dumps(HOSTILE)}
            type: concept
            aliases: ["\\u2028<!--", "&amp;"]
          - {{id: "entity:plain", name: Plain, type: concept}}
        chunks:
          - id: "e:one"
            context: {json.dumps(HOSTILE)}
            entities: ["entity:evil", "entity:plain"]
        ---
        <Chunk id="e:one">{HOSTILE.replace("<", "&lt;")} text</Chunk>
        """)
    assert run_build(root, [], quiet=True) == 0


def test_hostile_names_stay_text(tmp_path, cli):
    _hostile_kb(tmp_path)
    assert cli("report", cwd=tmp_path).code == 0
    text = (tmp_path / "build" / "report.html").read_text(encoding="utf-8")
    assert text.count("<script") == 2 and text.count("</script>") == 2
    assert "<img" not in text and "\u2028" not in text
    data = page_data(tmp_path / "build" / "report.html")
    assert HOSTILE in data["nodes"]["name"]


def test_layouts_are_seeded_spread_and_fast_enough_for_large_graphs():
    rng = np.random.default_rng(3)
    count = 4000
    clusters = rng.integers(0, 40, count)
    edges = [(int(a), int(b), 1.0) for a, b in rng.integers(0, count, (count * 3, 2))
             if a != b and clusters[a] == clusters[b]]
    start = rng.standard_normal((count, 2)) * 0.01 + clusters[:, None] * 0.0
    start[::5] = np.nan  # nodes with no embedding (skills)
    first = force_layout(count, edges, start)
    assert first == force_layout(count, edges, start)
    points = np.array(first)
    assert np.isfinite(points).all() and np.abs(points).max() <= 1000
    # spread out: few nodes sit on top of one another
    cells = {(round(x / 5), round(y / 5)) for x, y in first}
    assert len(cells) > 0.9 * count
    small = force_layout(3, [(0, 1, 1.0), (1, 2, 1.0)])
    assert len(set(small)) == 3 and force_layout(0, []) == []


def test_components_are_laid_out_apart_each_at_a_readable_scale():
    # a loose chain of 20 and a dense clique of 8 (the world model's shape), 5 loners
    chain = [(i, i + 1, 0.4) for i in range(19)]
    clique = [(20 + a, 20 + b, 1.0) for a in range(8) for b in range(a + 1, 8)]
    points = np.array(force_layout(33, chain + clique))
    boxes = [(points[idx].min(axis=0), points[idx].max(axis=0))
             for idx in (np.arange(20), np.arange(20, 28), np.arange(28, 33))]
    for i in range(3):
        for j in range(i + 1, 3):
            (low_a, high_a), (low_b, high_b) = boxes[i], boxes[j]
            assert (high_a < low_b).any() or (high_b < low_a).any()  # no overlap

    def spacing(idx):
        delta = points[idx][:, None] - points[idx][None]
        distance = np.sqrt((delta ** 2).sum(axis=2)) + np.eye(len(idx)) * 1e9
        return np.median(distance.min(axis=1))

    assert spacing(np.arange(20, 28)) > 0.5 * spacing(np.arange(20))


# ---- in a real browser


def _opened(browser, page_path, hash_part=""):
    page = browser.open(file_url(page_path) + hash_part)
    page.wait_for("window.ctxfstReport && window.ctxfstReport.ready "
                  "&& window.ctxfstReport.openMs !== null")
    return page


def _png_pixels(png: bytes) -> np.ndarray:
    """The RGB(A) pixels of an 8-bit, non-interlaced PNG (what Chromium writes), as rows x
    columns x channels: read with zlib and the PNG row filters, no imaging library."""
    import struct
    import zlib

    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    at, header, compressed = 8, None, b""
    while at < len(png):
        length, kind = struct.unpack(">I4s", png[at:at + 8])
        body = png[at + 8:at + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            compressed += body
        at += 12 + length
    width, height, depth, colour, _, _, interlace = header
    assert depth == 8 and colour in (2, 6) and interlace == 0, header
    channels = 3 if colour == 2 else 4
    raw = zlib.decompress(compressed)
    stride = width * channels
    rows, previous = [], bytearray(stride)
    for y in range(height):
        begin = y * (stride + 1)
        kind, line = raw[begin], bytearray(raw[begin + 1:begin + 1 + stride])
        for x in range(stride):
            left = line[x - channels] if x >= channels else 0
            up = previous[x]
            if kind == 1:
                line[x] = (line[x] + left) & 255
            elif kind == 2:
                line[x] = (line[x] + up) & 255
            elif kind == 3:
                line[x] = (line[x] + (left + up) // 2) & 255
            elif kind == 4:
                corner = previous[x - channels] if x >= channels else 0
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[x] = (line[x] + (left if pa <= pb and pa <= pc else up if pb <= pc
                                      else corner)) & 255
        rows.append(bytes(line))
        previous = line
    return np.frombuffer(b"".join(rows), np.uint8).reshape(height, width, channels)


def _not_blank(png: bytes) -> tuple[int, float]:
    """(distinct colours, share of pixels that are not white) of a screenshot."""
    pixels = _png_pixels(png)[:, :, :3].reshape(-1, 3)
    white = np.all(pixels == 255, axis=1)
    return len(np.unique(pixels, axis=0)), 1.0 - float(white.mean())


@needs_chromium
def test_the_report_draws_every_node_and_edge_in_chromium(built_example, cli, tmp_path):
    assert cli("report", cwd=built_example).code == 0
    graph = _graph(built_example)
    with Chromium(CHROMIUM) as browser:
        page = _opened(browser, built_example / "build" / "report.html")
        state = page.evaluate("({nodes: ctxfstReport.nodes, edges: ctxfstReport.edges, "
                              "drawnNodes: ctxfstReport.drawnNodes, "
                              "drawnEdges: ctxfstReport.drawnEdges})")
        assert state == {"nodes": len(graph["nodes"]), "edges": len(graph["edges"]),
                         "drawnNodes": len(graph["nodes"]), "drawnEdges": len(graph["edges"])}
        # search by name and by alias; a found entity opens its profile with its chunks
        assert page.evaluate("ctxfstReport.search('hono')")[0] == "entity:hono"
        assert page.evaluate("ctxfstReport.search('HONO.JS')") == ["entity:hono"]
        assert page.evaluate("ctxfstReport.search('no such entity anywhere')") == []
        assert page.evaluate("ctxfstReport.select('entity:hono')") >= 0
        profile = page.evaluate("ctxfstReport.profileText()")
        assert "Hono" in profile and "content/backend-frameworks.ctxfst.md:" in profile
        # the other tabs fill from the same data
        tables = page.evaluate("[...document.querySelectorAll('#world-tab tr, #build-tab tr')]"
                               ".length")
        assert tables > 10
        shot = page.screenshot()
        (tmp_path / "report.png").write_bytes(shot)
        colours, inked = _not_blank(shot)
        assert colours > 20 and inked > 0.02, (colours, inked)
        assert page.console_errors() == []
        # a link can open the page on a search
        page = _opened(browser, built_example / "build" / "report.html", "#q=Kubernetes")
        assert page.evaluate("document.querySelector('#matches li').textContent") \
            .startswith("Kubernetes")
        assert page.console_errors() == []


@needs_chromium
def test_source_links_stay_relative_when_a_folder_looks_like_a_scheme(tmp_path, cli):
    write(tmp_path, "ctxfst.toml", 'content_dir = "javascript:alert(1)"\n'
          'embedding_model = "hash-32"\n')
    write(tmp_path, "javascript:alert(1)/a.ctxfst.md", """\
        ---
        entities:
          - {id: entity:hono, name: Hono, type: framework}
        chunks:
          - {id: a:one, context: "About Hono, for the link test", entities: [entity:hono]}
        ---
        <Chunk id="a:one">
        Hono.
        </Chunk>
        """)
    assert cli("build", "--root", tmp_path).code == 0
    assert cli("report", "--out", "report.html", cwd=tmp_path).code == 0  # at the root
    with Chromium(CHROMIUM) as browser:
        page = _opened(browser, tmp_path / "report.html")
        assert page.evaluate("ctxfstReport.select('entity:hono')") >= 0
        hrefs = page.evaluate("[...document.querySelectorAll('#profile a[href]')]"
                              ".map(a => a.getAttribute('href'))")
        assert hrefs and all(h.startswith(("./", "../")) for h in hrefs), hrefs
        assert not [h for h in page.evaluate("[...document.querySelectorAll('a')]"
                                             ".map(a => a.protocol)") if h == "javascript:"]


@needs_chromium
def test_hostile_names_neither_run_nor_break_the_page_in_chromium(tmp_path, cli):
    _hostile_kb(tmp_path)
    assert cli("report", cwd=tmp_path).code == 0
    with Chromium(CHROMIUM) as browser:
        page = _opened(browser, tmp_path / "build" / "report.html")
        assert page.evaluate("window.pwned === undefined")
        assert page.evaluate("ctxfstReport.search('onerror')") == ["entity:evil"]
        page.evaluate("ctxfstReport.select('entity:evil')")
        assert HOSTILE in page.evaluate("ctxfstReport.profileText()")
        assert page.evaluate("document.querySelectorAll('img, script').length") == 2
        assert page.evaluate("window.pwned === undefined")
        assert page.console_errors() == []


def test_a_resealed_artifact_of_the_wrong_shape_is_refused_without_a_traceback(
        built_example, cli):
    from .conftest import reseal

    graph_file = built_example / "build" / "entity-graph.json"
    graph = json.loads(graph_file.read_text())
    graph["nodes"][0]["aliases"] = 5
    graph_file.write_text(json.dumps(graph))
    reseal(built_example / "build", "entity-graph.json")
    result = cli("report", cwd=built_example)
    assert result.code == 2 and "unusable build artifacts" in result.err
    assert "Traceback" not in result.err
    assert not (built_example / "build" / "report.html").exists()


def test_the_build_writes_the_report_only_when_asked(tmp_path, capsys, cli):
    copy_example(tmp_path)
    assert run_build(tmp_path, [], quiet=True) == 0
    assert not (tmp_path / "build" / "report.html").exists()
    with open(tmp_path / "ctxfst.toml", "a", encoding="utf-8") as settings:
        settings.write("report = true\n")
    capsys.readouterr()
    assert run_build(tmp_path, []) == 0
    out = capsys.readouterr().out
    assert re.search(r"   report: [\d,]+ bytes, 30 entities, 0 finding\(s\)", out), out
    made = (tmp_path / "build" / "report.html").read_bytes()
    # the page `ctxfst report` writes (no world state here: both start from the inputs)
    assert cli("report", "--out", "by-hand.html", cwd=tmp_path).code == 0
    by_hand = (tmp_path / "by-hand.html").read_bytes()
    assert by_hand.replace(b'"source_root":"./"', b'"source_root":"../"') == made
    capsys.readouterr()
    assert run_build(tmp_path, []) == 0  # nothing changed: the report is not made again
    assert "report:" not in capsys.readouterr().out
    (tmp_path / "build" / "report.html").unlink()
    assert run_build(tmp_path, []) == 0
    assert "   report: " in capsys.readouterr().out
    assert (tmp_path / "build" / "report.html").read_bytes() == made
    assert run_build(tmp_path, ["clean"], quiet=True) == 0
    assert not (tmp_path / "build" / "report.html").exists()


def test_the_report_setting_must_be_true_or_false(tmp_path, capsys):
    from ctxfst.config import ConfigError

    copy_example(tmp_path, extra='report = "yes"\n')
    with pytest.raises(ConfigError) as caught:
        run_build(tmp_path, [])
    assert caught.value.code == "CTX803" and "'report' must be true or false" in str(caught.value)


QUESTION = "what should I learn next"


def test_a_query_as_mermaid_dot_and_html(built_example, cli):
    from .test_runtime import _dot_statements

    explained = cli("query", QUESTION, "--format", "json", cwd=built_example).json()
    seeds = {seed["name"] for seed in explained["seeds"]}
    assert seeds and explained["results"]
    dot = cli("query", QUESTION, "--format", "dot", cwd=built_example)
    assert dot.code == 0, dot.err
    labels, edges = _dot_statements(dot.out)
    named = {label: name for name, label in labels.items()}
    assert seeds <= set(named)
    chunks = [f"{rank}. {hit['chunk_id']}" for rank, hit in enumerate(explained["results"], 1)]
    assert all(chunk in named for chunk in chunks)
    assert f'{named[chunks[0]]} [label="{chunks[0]}", shape=note];' in dot.out
    # each chunk is joined to the shown entities it mentions (one the graph reached, with a
    # via, to one at least; graph mode also ranks what the model or BM25 found alone)
    chunk_rows = json.loads((built_example / "build" / "chunks.json").read_text())
    mentions = {c["id"]: set(c.get("entities", [])) for c in chunk_rows["chunks"]}
    graph = _graph(built_example)
    ids_by_name = {node["name"]: node["id"] for node in graph["nodes"]}
    for chunk, hit in zip(chunks, explained["results"], strict=True):
        into = {labels[a] for a, b in edges if b == named[chunk]}
        assert into or not hit["via"]
        assert all(ids_by_name[name] in mentions[hit["chunk_id"]] for name in into)
    assert "SIMILAR" in dot.out and "dir=none" in dot.out  # undirected edges, drawn so
    mermaid = cli("query", QUESTION, "--format", "mermaid", cwd=built_example)
    assert mermaid.code == 0 and mermaid.out.startswith("flowchart LR\n")
    assert mermaid.out.count("\n  n") == len(labels) + len(edges)
    page = cli("query", QUESTION, "--format", "html", cwd=built_example)
    assert page.code == 0 and page.out.count("<script") == 2
    (built_example / "query.html").write_text(page.out, encoding="utf-8")
    data = page_data(built_example / "query.html")
    assert data["kind"] == "query" and data["nodes"]["name"] == list(labels.values())
    assert data["source_root"] == built_example.resolve().as_uri() + "/"
    first = data["nodes"]["name"].index(chunks[0])
    (row,) = data["details"][first]["chunks"]
    assert data["chunks"]["id"][row] == explained["results"][0]["chunk_id"]
    assert cli("query", QUESTION, "--format", "html", cwd=built_example).out == page.out


@needs_chromium
def test_query_and_plan_pages_draw_in_chromium(built_example, cli):
    page = cli("query", QUESTION, "--format", "html", cwd=built_example)
    (built_example / "query.html").write_text(page.out, encoding="utf-8")
    cli("state", "init", "--goal", "goal:edge-api-learning-plan", "--seed",
        "state:has-resume", cwd=built_example)
    plan = cli("plan", "--format", "html", cwd=built_example)
    (built_example / "plan.html").write_text(plan.out, encoding="utf-8")
    with Chromium(CHROMIUM) as browser:
        for name in ("query.html", "plan.html"):
            data = page_data(built_example / name)
            opened = _opened(browser, built_example / name)
            drawn = opened.evaluate("[ctxfstReport.drawnNodes, ctxfstReport.drawnEdges]")
            assert drawn == [len(data["nodes"]["id"]), len(data["edges"]["s"])], name
            assert opened.evaluate("ctxfstReport.kind") == data["kind"]
            assert opened.console_errors() == []
        assert opened.evaluate("ctxfstReport.search('inventory')") != []
