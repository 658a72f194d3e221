"""The compiler: real doit runs, real Parquet, incremental == full, determinism, safety."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ctxfst.artifacts.layout import JOURNAL, VERSION_ID_HEX
from ctxfst.config import find_project
from ctxfst.files import file_stamp
from ctxfst.mock import generate
from ctxfst.pipeline.publish import recover
from ctxfst.pipeline.run import BuildRun
from ctxfst.pipeline.runner import run_build
from ctxfst.pipeline.table import ARTIFACTS

from .conftest import CH22, REPO, UPSTREAM, copy_example, counted_sha256, write

SCHEMAS = REPO / "schemas"
PUBLISHED = [*ARTIFACTS, "manifest.json"]


def project(root: Path, model: str = "hash-64", **settings) -> Path:
    lines = ['content_dir = "content"', 'skills_dir = "skills"', f'embedding_model = "{model}"']
    lines += [f"{key} = {json.dumps(value)}" for key, value in settings.items()]
    write(root, "ctxfst.toml", "\n".join(lines) + "\n")
    (root / "content").mkdir(exist_ok=True)
    (root / "skills").mkdir(exist_ok=True)
    return root


def example(root: Path, model: str = "hash-64", **settings) -> Path:
    copy_example(root, model)
    return project(root, model, **settings)


def build(root: Path, capsys, *args: str) -> tuple[int, str]:
    code = run_build(root, list(args))
    out = capsys.readouterr()
    return code, out.out + out.err


def ran(output: str) -> set[str]:
    """Stages doit executed (". name"), not the up-to-date ones ("-- name")."""
    return {line.split()[-1] for line in output.splitlines() if line.startswith(".  ")}


def artifact_bytes(root: Path) -> dict[str, bytes]:
    return {name: (root / "build" / name).read_bytes() for name in PUBLISHED}


def stage(root: Path, name: str) -> dict:
    results = json.loads((root / "build" / "run_results.json").read_text())
    return next(s for s in results["stages"] if s["stage"] == name)


def assert_consistent(root: Path) -> None:
    """The manifest vouches for what build/ holds: each artifact's sha256, and its rows
    (counted here; stages record them, and unchanged artifacts keep the last count). The
    published folder is named by the manifest's sha256."""
    text = (root / "build" / "manifest.json").read_bytes()
    assert (root / "build/current").resolve().name == \
        hashlib.sha256(text).hexdigest()[:VERSION_ID_HEX]
    manifest = json.loads(text)
    for artifact in manifest["artifacts"]:
        path = root / "build" / artifact["path"]
        data = path.read_bytes()
        assert hashlib.sha256(data).hexdigest() == artifact["sha256"], artifact["path"]
        assert artifact["rows"] == rows_in(path), artifact["path"]


def assert_equals_a_clean_build(root: Path, clean: Path, capsys, names: tuple[str, ...],
                                 settings: bool = False) -> None:
    """A build of root's sources alone in clean (no caches, no earlier build; its own
    settings, or root's with settings) gives these artifacts byte for byte as root's."""
    shutil.copytree(root / "content", clean / "content")
    shutil.copytree(root / "skills", clean / "skills")
    if settings:
        shutil.copy(root / "ctxfst.toml", clean / "ctxfst.toml")
    else:
        project(clean)
    code, out = build(clean, capsys)
    assert code == 0, out
    for name in names:
        assert (root / "build" / name).read_bytes() == (clean / "build" / name).read_bytes(), \
            (clean.name, name)


def rows_in(path: Path) -> int:
    if path.suffix == ".parquet":
        return pq.ParquetFile(path).metadata.num_rows
    data = json.loads(path.read_text())
    if isinstance(data, dict) and "counts" in data:
        return sum(data["counts"].values())  # the facts delta: the facts it changes
    if isinstance(data, dict):
        return next((len(data[key]) for key in ("chunks", "entities", "nodes")
                     if isinstance(data.get(key), list)), 1)
    return len(data)


def schema(name: str) -> dict:
    return json.loads((SCHEMAS / f"{name}.schema.json").read_text())


def test_inputs_that_had_just_changed_are_compared_by_content(tmp_path):
    """The validate task's state is one digest of its inputs' identities; a file changed
    within a clock tick of the state could change again and keep its identity, so its
    sha256 is kept and compared next time (git's racily clean entries)."""
    from ctxfst.pipeline.doit_state import inputs_state as state_of
    from ctxfst.pipeline.doit_state import settled_state, states_match

    def inputs_state(paths: list[str], refused: list[str]) -> str:
        return state_of(BuildRun(find_project(REPO)), paths, refused)

    doc = tmp_path / "a.md"
    doc.write_text("one")
    saved = inputs_state([str(doc)], [])
    assert list(json.loads(saved)["racy"]) == [str(doc)]  # just written
    settled = json.dumps({**json.loads(saved), "racy": {}})  # same identities, later
    assert states_match(saved, settled)
    doc.write_text("two")  # the same size: within one tick, the same identity
    assert not states_match(saved, settled)
    assert not states_match(settled, saved)  # racy now and not then: looked at again
    assert not states_match(settled, inputs_state([str(doc)], ["CTX001 content/x"]))
    assert states_match("v1", "v1") and not states_match("v1", "v2")  # plain states
    assert not states_match(None, settled)
    # Once the stage has run, a state that only drops the marks is saved; one in which a
    # file changed meanwhile is not (the state it started from is kept, and not found)
    doc.write_text("one")
    loaded = inputs_state([str(doc)], [])
    assert settled_state(loaded, json.dumps({**json.loads(loaded), "racy": {}})) != loaded
    doc.write_text("two")  # while the stage ran
    assert settled_state(loaded, inputs_state([str(doc)], [])) == loaded
    # ... even within one clock tick (the same identities), and settled by the save
    assert settled_state(loaded, json.dumps({**json.loads(loaded), "racy": {}})) == loaded
    assert settled_state(loaded, "not json") == loaded
    deep = "[" * 200_000  # a doit state from a stranger's checkout: no, not a traceback
    assert not states_match(deep, settled) and settled_state(deep, settled) == deep


def test_an_inputs_state_changes_with_its_size_mtime_ctime_or_inode(tmp_path):
    """Each input's identity in the validate task's state is git's index's: a change to
    its size, mtime, ctime (a chmod, a utime put back) or inode (a copy renamed over it)
    changes the state; another lstat of the same file does not."""
    from ctxfst.pipeline.doit_state import inputs_state

    doc, other = tmp_path / "a.md", tmp_path / "b.md"
    doc.write_text("one")
    other.write_text("two")

    def state() -> str:
        return json.loads(inputs_state(BuildRun(find_project(REPO)), [str(doc), str(other)],
                                       []))["inputs"]

    def changed(change) -> bool:
        before = state()
        time.sleep(0.02)  # (past the clock's tick: a new ctime)
        change()
        return state() != before

    mtime = doc.stat().st_mtime_ns
    assert not changed(lambda: None)
    assert changed(lambda: doc.chmod(0o600))  # ctime alone
    assert changed(lambda: os.utime(doc, ns=(mtime, mtime + 1)))  # mtime
    assert changed(lambda: doc.write_text("one!"))  # size
    copy = tmp_path / "copy.md"

    def replaced() -> None:
        shutil.copy2(doc, copy)
        os.replace(copy, doc)  # the same bytes and times, another inode

    assert changed(replaced)


def test_the_stamps_taken_with_the_inputs_state_are_those_units_keep(tmp_path):
    """The validate task's state stats every input once, and keeps with each stat the
    stamp a document's unit is compared with (the look of an edit takes it from there):
    the same text unit_stamp makes of that stat, and none for a file that changed within
    a clock tick (its unit's stamp is then never taken for its bytes)."""
    from ctxfst.files import RACY_NS
    from ctxfst.pipeline.doit_state import inputs_state
    from ctxfst.pipeline.incremental import unit_stamp

    settled, fresh = tmp_path / "settled.md", tmp_path / "fresh.md"
    settled.write_text("one")
    os.utime(settled, ns=(1, 10**18))  # (mtime and ctime apart: each in its place)
    time.sleep(RACY_NS / 1e9 * 1.5)  # (its ctime ages past a clock tick)
    fresh.write_text("two")
    ahead = time.time_ns() + 60 * 10**9  # (changed "now" however slow the machine is)
    os.utime(fresh, ns=(ahead, ahead))
    run = BuildRun(find_project(REPO))
    inputs_state(run, [str(settled), str(fresh)], [])
    info = run.loaded_stats[str(settled)]
    assert run.loaded_stamps[str(settled)] == unit_stamp(info, time.time_ns()) is not None
    assert str(fresh) in run.loaded_stats and run.loaded_stamps[str(fresh)] is None
    run.begin()  # the run's stats and stamps are the ones doit's state was taken with
    assert run.stats[str(settled)] is info and run.stamps == {
        str(settled): unit_stamp(info, time.time_ns()), str(fresh): None}


def test_full_build_then_noop(tmp_path, capsys):
    root = example(tmp_path)
    code, out = build(root, capsys)
    assert code == 0, out
    assert ran(out) == {"validate", "compile", "skills", "profiles", "embed", "graph",
                        "facts", "manifest"}
    for name, schema_name in (("chunks.json", "chunks-export"),
                              ("entity-profiles.json", "entity-profiles"),
                              ("entity-graph.json", "entity-graph"),
                              ("manifest.json", "manifest"),
                              ("run_results.json", "run-results"),
                              ("skill-index.json", "skill-index")):
        jsonschema.Draft202012Validator.check_schema(schema(schema_name))
        jsonschema.validate(json.loads((root / "build" / name).read_text()), schema(schema_name))
    jsonschema.validate(json.loads((root / "build/entity-graph.json").read_text()),
                        json.loads((UPSTREAM / "entity-graph-schema.json").read_text()))
    assert_consistent(root)
    code, out = build(root, capsys)
    assert code == 0 and ran(out) == set()


def test_the_build_is_made_from_the_stage_table(tmp_path, capsys):
    """doit's tasks, `doit list`, each stage's progress line, the manifest's artifacts
    and lineage, run_results.json and the docs table all come from the one table."""
    from ctxfst.pipeline.table import BEGIN, BY_NAME, END, STAGE_TABLE, STAGES, markdown_table

    root = example(tmp_path)
    with open(root / "ctxfst.toml", "a", encoding="utf-8") as settings:
        settings.write("report = true\n")  # (the one opt-in stage: every stage runs)
    code, out = build(root, capsys)
    assert code == 0, out
    documents = len(list((root / "content").rglob("*.ctxfst.md")))
    assert f"   compile: {documents} of {documents} documents recompiled, " in out
    for stage in STAGE_TABLE:
        said = [line for line in out.splitlines() if line.startswith(f"   {stage.name}: ")]
        # (a beside stage says first that it started, then what it did when waited for)
        assert len(said) == (2 if stage.beside else 1), said
        assert re.fullmatch(rf"   {stage.name}: [^?]+, \d+\.\d\d s", said[-1]), said
        for name in stage.outputs:
            assert (root / "build/.staging" / name).is_file(), name
    assert out.splitlines()[-1].startswith(f"build: {len(STAGES)} of {len(STAGES)} stages ran")
    listing = build(root, capsys, "list")[1]
    said = dict(line.split(maxsplit=1) for line in listing.splitlines() if line.strip())
    assert said == {stage.name: stage.doc for stage in STAGE_TABLE}
    manifest = json.loads((root / "build/manifest.json").read_text())
    assert [(a["path"], a["stage"], a["schema_version"]) for a in manifest["artifacts"]] == [
        (name, stage, version) for name, (stage, version) in ARTIFACTS.items()]
    lineage = {a["path"]: a["inputs"] for a in manifest["artifacts"]}
    assert lineage["entities.parquet"] == ["chunks.parquet"]
    assert lineage["semantic_facts.parquet"][-1] == "ledger:.ctxfst/facts"
    assert "content/backend-frameworks.ctxfst.md" in lineage["chunks.json"]
    results = json.loads((root / "build/run_results.json").read_text())
    # (a view written after publishing is not in the run it views)
    assert [s["stage"] for s in results["stages"]] == [
        name for name in STAGES if not BY_NAME[name].opt_in]
    assert (root / "build/report.html").is_file()
    docs = (REPO / "docs/compiler.md").read_text(encoding="utf-8")
    assert f"{BEGIN}\n{markdown_table()}{END}" in docs, \
        "run: python -m ctxfst.pipeline.table --update docs/compiler.md"


def test_published_artifacts_are_links_and_one_edited_in_place_is_caught(tmp_path, capsys):
    """build/ holds hard links to the staged artifacts (nothing is copied); the facts
    ledger holds copies (it is the only record of the facts' history). A published file
    rewritten in place rewrites its staged twin too: the next build says so and publishes
    nothing, instead of publishing a manifest that vouches for the edited bytes."""
    root = example(tmp_path)
    assert build(root, capsys)[0] == 0
    for name in PUBLISHED:
        assert (root / "build" / name).samefile(root / "build/.staging" / name), name
    ledger = root / ".ctxfst/facts/semantic_facts.parquet"
    assert not ledger.samefile(root / "build/semantic_facts.parquet")
    assert ledger.read_bytes() == (root / "build/semantic_facts.parquet").read_bytes()
    results = json.loads((root / "build/run_results.json").read_text())
    assert all("outputs" not in record for record in results["stages"])
    graph = root / "build/entity-graph.json"
    before = artifact_bytes(root)
    with open(graph, "r+b") as handle:  # as `jq ... > build/entity-graph.json` would
        data = handle.read()
        handle.seek(0)
        handle.write(data.replace(b'"nodes"', b'"nodez"'))
    code, out = build(root, capsys)
    assert code != 0
    assert re.search(r"build stopped: manifest: .*entity-graph\.json changed after the graph "
                     r"stage wrote it .*run `doit clean`, then `doit`", out), out
    after = artifact_bytes(root)
    assert {name for name in PUBLISHED if after[name] != before[name]} == {"entity-graph.json"}
    assert build(root, capsys, "clean")[0] == 0
    assert build(root, capsys)[0] == 0
    assert_consistent(root)
    assert b'"nodes"' in graph.read_bytes()


def test_the_facts_ledger_is_the_facts_stages_copy_and_one_not_as_written_is_not_linked(
        tmp_path, capsys):
    """The facts stage copies its files for the ledger beside the later stages, and
    publishing links those copies; a copy that is not the file the stage wrote (replaced
    since) is not linked: the ledger gets a copy of the published artifact instead."""
    root = example(tmp_path)
    assert build(root, capsys)[0] == 0
    names = ("semantic_facts.parquet", "semantic_fact_extraction_runs.parquet",
             "semantic_facts_delta.json")
    for name in names:
        ledger = root / ".ctxfst/facts" / name
        assert ledger.samefile(root / "build/.staging/ledger" / name), name
        assert not ledger.samefile(root / "build" / name), name
        assert ledger.read_bytes() == (root / "build" / name).read_bytes(), name
    copy = root / "build/.staging/ledger/semantic_facts.parquet"
    copy.unlink()  # (the ledger keeps its file)
    copy.write_bytes(b"not the facts")
    code, out = build(root, capsys)
    assert code == 0, out
    ledger = root / ".ctxfst/facts/semantic_facts.parquet"
    assert ledger.read_bytes() == (root / "build/semantic_facts.parquet").read_bytes()
    assert not ledger.samefile(copy) and copy.read_bytes() == b"not the facts"
    assert_consistent(root)


def test_artifact_contents(tmp_path, capsys):
    root = example(tmp_path)
    assert build(root, capsys)[0] == 0
    chunks = pq.read_table(root / "build/chunks.parquet")
    assert chunks.num_rows == 13
    row = chunks.filter(pq.read_table(root / "build/chunks.parquet").column("chunk_id")
                        .to_numpy(zero_copy_only=False) == "reference:gap-example").to_pylist()[0]
    assert row["content"].startswith("## Gap analysis") and row["source"].endswith(
        "career-world-model.ctxfst.md")
    vectors = pq.read_table(root / "build/chunk_vectors.parquet")
    meta = vectors.schema.metadata
    assert meta[b"ctxfst.model_id"] == b"hash-64" and meta[b"ctxfst.dim"] == b"64"
    vector_type = vectors.schema.field("vector").type
    assert pa.types.is_fixed_size_list(vector_type) and vector_type.list_size == 64
    assert vector_type.value_type == pa.float32()
    matrix = np.array(vectors.column("vector").to_pylist(), dtype=np.float32)
    assert np.allclose(np.linalg.norm(matrix, axis=1), 1.0, atol=1e-5)
    graph = json.loads((root / "build/entity-graph.json").read_text())
    inferred = {(e["source"], e["relation"], e["target"], e["properties"]["inferred_via"])
                for e in graph["edges"] if e["relation"] in ("LEADS_TO", "REQUIRES")}
    assert ("action:inventory-skills", "LEADS_TO", "action:analyze-gaps",
            "state:has-skill-inventory") in inferred
    assert ("action:analyze-gaps", "REQUIRES", "action:inventory-skills",
            "state:has-skill-inventory") in inferred
    profiles = json.loads((root / "build/entity-profiles.json").read_text())["entities"]
    hono = next(p for p in profiles if p["id"] == "entity:hono")
    assert hono["mention_count"] == 3 and hono["representation"].startswith("name: Hono")
    manifest = json.loads((root / "build/manifest.json").read_text())
    assert {i["path"] for i in manifest["inputs"]} >= {"ctxfst.toml",
                                                      "content/passages/gap-example.md"} - {
        "content/passages/gap-example.md"}
    graph_lineage = next(a for a in manifest["artifacts"] if a["path"] == "entity-graph.json")
    assert graph_lineage["inputs"][:2] == ["entities.parquet", "entity_vectors.parquet"]


def test_incremental_build_equals_full_rebuild(tmp_path, capsys):
    incremental = example(tmp_path / "a")
    assert build(incremental, capsys)[0] == 0
    edited = incremental / "content/backend-frameworks.ctxfst.md"
    edited.write_text(edited.read_text().replace("Goroutines made", "Goroutines kept"))
    (incremental / "content/deployment.zh-TW.ctxfst.md").unlink()
    (incremental / "content/backend-frameworks.ctxfst.md").write_text(
        edited.read_text().replace(
            "    dependencies: [skill:fastapi-services, reference:hono-on-workers]\n", ""))
    code, out = build(incremental, capsys)
    assert code == 0, out
    full = tmp_path / "b"
    shutil.copytree(incremental / "content", full / "content")
    shutil.copytree(incremental / "skills", full / "skills")
    project(full)
    assert build(full, capsys)[0] == 0
    # The facts artifacts keep history (the deleted document's facts stay, inactive), so
    # they differ by design; their active facts and every other artifact are equal.
    stateful = {name for name, (stage, _) in ARTIFACTS.items() if stage == "facts"}
    for name in PUBLISHED:
        if name not in stateful and name != "manifest.json":
            assert (incremental / "build" / name).read_bytes() == (
                full / "build" / name).read_bytes(), name

    def active(root: Path) -> list:
        rows = pq.read_table(root / "build/semantic_facts.parquet").to_pylist()
        return sorted((r["fact_id"], r["fact_value_text"], r["evidence_start"],
                       r["evidence_excerpt"]) for r in rows if r["is_active"])

    assert active(incremental) == active(full)
    manifests = [json.loads((root / "build/manifest.json").read_text())
                 for root in (incremental, full)]
    for manifest in manifests:
        manifest["artifacts"] = [a for a in manifest["artifacts"] if a["path"] not in stateful]
    assert manifests[0] == manifests[1]


def test_a_deleted_link_to_a_document_leaves_the_documents_kept_rows(tmp_path, capsys):
    """A link inside content/ to a document is an input of its own that shares the
    document's kept rows (one project-relative path, one sha256): deleting the link
    keeps them, so a build without the previous chunks.json compiles nothing again."""
    root = example(tmp_path)
    write(root, "content/glossary.ctxfst.md", "---\nentities:\n  - id: entity:glossary-term\n"
          "    name: Glossary term\n    type: concept\n---\n\n# Glossary\n")
    (root / "content/alias.ctxfst.md").symlink_to(root / "content/glossary.ctxfst.md")
    code, out = build(root, capsys)
    assert code == 0, out

    def from_kept_rows() -> int:
        """A build without the previous chunks.json: the documents compiled again."""
        assert build(root, capsys, "clean")[0] == 0
        shutil.rmtree(root / "build/.staging", ignore_errors=True)
        code, out = build(root, capsys)
        assert code == 0, out
        return stage(root, "compile")["documents_recompiled"]

    volatile = from_kept_rows()  # (a document with a content_path passage, always)
    (root / "content/alias.ctxfst.md").unlink()
    assert build(root, capsys)[0] == 0
    assert from_kept_rows() == volatile


def test_a_compile_made_again_after_its_documents_were_let_go_loads_them(
        tmp_path, capsys, monkeypatch):
    """A first build's compile forgets each typed document once its rows are made; when
    the compile is made again (kept rows it cannot use), it loads them again: the same
    artifacts as a build that never stopped."""
    import ctxfst.pipeline.chunk_rows as chunk_rows
    from ctxfst.pipeline.incremental import Checked

    real, real_let_go, calls, let_go = chunk_rows._ChunkRows, Checked.let_go, [], []

    def fails_once(*args, **kwargs):
        calls.append(len(let_go))  # (the documents let go by then)
        if len(calls) == 1:
            raise ValueError("kept rows this toolchain did not write")
        return real(*args, **kwargs)

    def counted(checked, path):
        let_go.append(path)
        real_let_go(checked, path)

    root = example(tmp_path / "stops")
    monkeypatch.setattr(chunk_rows, "_ChunkRows", fails_once)
    monkeypatch.setattr(Checked, "let_go", counted)
    code, out = build(root, capsys)
    assert code == 0, out
    assert calls == [4, 8]  # each document let go once its rows were made, both times
    compiled = stage(root, "compile")
    assert compiled["documents_recompiled"] == compiled["documents"] == 4
    monkeypatch.setattr(chunk_rows, "_ChunkRows", real)
    assert_equals_a_clean_build(root, tmp_path / "clean", capsys,
                                ("chunks.json", "chunks.parquet", "entities.parquet"),
                                settings=True)


def test_more_documents_than_a_build_holds_at_once_are_typed_in_parts(
        tmp_path, capsys, monkeypatch):
    """A validation that types more documents than it holds at once (TYPED_AT_ONCE)
    types and checks them that many at a time and keeps none; the compile and the facts
    load them again as many at a time. The artifacts are those of a build that held them
    all: after a first build, after an edit of every document, and the diagnostics of a
    knowledge base with errors are the same."""
    import weakref

    import ctxfst.compile.chunks as compile_chunks
    import ctxfst.document.kb as document_kb
    import ctxfst.document.rules as document_rules
    import ctxfst.pipeline.incremental as incremental
    from ctxfst.parallel import worker_count

    def sources(root: Path) -> Path:
        example(root)  # (a document with a content_path passage, skills)
        generate(root, 10, seed=4)
        return root

    held, parts = sources(tmp_path / "held"), sources(tmp_path / "parts")
    alive: dict[int, weakref.ref] = {}  # the typed documents not let go, by id
    most = {"checked": 0, "compiled": 0}  # of them at once, when checked and compiled

    def typed(doc):
        key = id(doc)
        alive[key] = weakref.ref(doc, lambda _: alive.pop(key, None))
        return real_type(doc)

    # (the documents not held are checked in forked workers: each says what it held)
    checked_at_once = tmp_path / "checked-at-once"

    def counted(name, real):
        def call(doc, *args, **kwargs):
            most[name] = max(most[name], len(alive))
            if name == "checked":
                with open(checked_at_once, "a") as said:
                    said.write(f"{os.getpid()} {len(alive)}\n")
            return real(doc, *args, **kwargs)
        return call

    real_type = document_kb.type_document
    monkeypatch.setattr(document_kb, "type_document", typed)
    monkeypatch.setattr(document_rules, "check_document",
                        counted("checked", document_rules.check_document))
    monkeypatch.setattr(compile_chunks, "document_rows",
                        counted("compiled", compile_chunks.document_rows))

    def built(root: Path) -> tuple[int, str]:
        """A build, holding 3 typed documents at once in `parts` (as it counts them)."""
        monkeypatch.setattr(incremental, "TYPED_AT_ONCE", 3 if root == parts else 20_000)
        most.update(checked=0, compiled=0)
        checked_at_once.write_text("")
        code, out = build(root, capsys)
        calls = [line.split() for line in checked_at_once.read_text().splitlines()]
        most["checked"] = max((int(held) for _, held in calls), default=0)
        if root == parts and code == 0:
            assert 0 < most["checked"] <= 3 and 0 < most["compiled"] <= 3, most
            if worker_count() >= 2:  # checked in forked workers, 3 documents a batch
                assert str(os.getpid()) not in {pid for pid, _ in calls}, calls
            validated = stage(parts, "validate")
            assert validated["documents_typed"] == validated["documents_checked"] == 14
        return code, out

    for root in (held, parts):
        code, out = built(root)
        assert code == 0, out
    assert most["checked"] <= 3
    assert artifact_bytes(parts) == artifact_bytes(held)

    for root in (held, parts):  # every document edited: each validation types 14
        for path in sorted((root / "content").rglob("*.ctxfst.md")):
            text = path.read_text()
            path.write_text(text.replace("</Chunk>", "Edited.\n</Chunk>", 1))
        code, out = built(root)
        assert code == 0, out
    assert artifact_bytes(parts) == artifact_bytes(held)

    said = []  # (a document copied: its chunk ids used twice, where the link step says;
    # one that does not parse)
    for root in (held, parts):
        for number in (1, 5, 9):
            path = root / f"content/000/notes-{number:05d}.ctxfst.md"
            path.write_text(path.read_text().replace("entities: [", "entities: [entity:nope, ",
                                                     1))
        shutil.copy(path, root / "content/000/notes-copy.ctxfst.md")
        write(root, "content/000/broken.ctxfst.md", "---\nentities: [\n---\nBroken.\n")
        code, out = built(root)
        assert code != 0 and "Traceback" not in out
        said.append([line for line in out.splitlines() if " CTX" in line])
    assert any("CTX203" in line for line in said[0])
    assert any("broken.ctxfst.md" in line for line in said[0])
    assert len(said[0]) >= 5 and said[0] == said[1]


def test_a_document_edited_while_workers_check_it_stops_the_build(tmp_path, capsys,
                                                                  monkeypatch):
    """Documents too many to hold are typed again and checked in forked workers: one
    edited since validation hashed it stops the build with a clear message (from the
    worker), publishes nothing, and the next build checks what the file now says."""
    import ctxfst.parallel as parallel
    import ctxfst.pipeline.incremental as incremental
    from ctxfst.parallel import worker_count

    if worker_count() < 2:
        pytest.skip("forked_map checks in this process on one core")
    root = tmp_path / "kb"
    generate(root, 12, seed=5)
    monkeypatch.setattr(incremental, "TYPED_AT_ONCE", 3)
    target = root / "content/000/notes-00007.ctxfst.md"
    verified = incremental._Reader._verified

    def edited_in_a_worker(self, paths, check):  # (forked_map's job: set in its workers)
        if check and parallel._job is not None and target.as_posix().endswith(
                tuple(f"/{path}" for path in paths)):
            target.write_text(target.read_text().replace("</Chunk>", "Late.\n</Chunk>", 1))
        return verified(self, paths, check)

    monkeypatch.setattr(incremental._Reader, "_verified", edited_in_a_worker)
    code, out = build(root, capsys)
    assert code != 0 and "Traceback" not in out, out
    assert "content/000/notes-00007.ctxfst.md changed during the build" in out, out
    assert not (root / "build/manifest.json").exists()
    monkeypatch.setattr(incremental._Reader, "_verified", verified)
    code, out = build(root, capsys)
    assert code == 0, out
    assert "Late." in (root / "build/chunks.json").read_text()


def test_rows_a_stopped_compile_kept_are_forgotten_by_the_next(tmp_path, capsys,
                                                                monkeypatch):
    """A compile that stops after keeping the rows of the documents it compiled, before
    its record (the chunk files could not be written), leaves rows no document has once
    they change again; the next compile forgets them: the cache keeps one document's
    rows once, whatever stopped in between."""
    import sqlite3

    from ctxfst.pipeline import chunk_rows

    root = tmp_path / "kb"
    generate(root, 6, seed=9)
    assert build(root, capsys)[0] == 0
    documents = sorted((root / "content").rglob("*.ctxfst.md"))

    def kept_rows() -> int:
        with sqlite3.connect(root / ".ctxfst/cache/units.sqlite") as db:
            return db.execute("SELECT count(*) FROM units WHERE key >= 'rows:' "
                              "AND key < 'rows;'").fetchone()[0]

    assert kept_rows() == len(documents)

    def full_disk(self, *args):
        self.close()
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(chunk_rows.Compiled, "write", full_disk)
    documents[0].write_text(documents[0].read_text().replace("</Chunk>", "One.\n</Chunk>", 1))
    code, out = build(root, capsys)
    assert code != 0 and "Traceback" not in out, out
    assert "compile: [Errno 28] No space left on device, build/ unchanged" in out, out
    assert kept_rows() == len(documents)  # (the edited document's new rows kept, not
    # its old ones: the next compile must know that these new ones are no one's)
    monkeypatch.undo()
    documents[0].write_text(documents[0].read_text().replace("One.", "Two."))
    assert build(root, capsys)[0] == 0
    assert kept_rows() == len(documents)


def _edit_chunk(root: Path, chunk_id: str, word: str) -> None:
    """A word added to one chunk's passage, in the document that holds it."""
    rows = json.loads((root / "build/chunks.json").read_text())["chunks"]
    path = root / next(row["source"] for row in rows if row["id"] == chunk_id)
    text = path.read_text()
    opening = text.index(f'<Chunk id="{chunk_id}">')
    line_end = text.index("\n", opening)
    path.write_text(text[:line_end + 1] + f"{word} " + text[line_end + 1:])


def test_profiles_are_kept_while_what_they_are_made_from_is(tmp_path, capsys):
    """The profiles are kept while the catalog, every chunk's mention columns and the
    text of the row groups they quote are as they were: an edit of a passage in a group
    no profile reads keeps the staged files; one in a group some profile quotes makes
    those profiles again, the others' rows copied; each build equals a clean build."""
    root = tmp_path / "kb"
    generate(root, 300, seed=3)
    project(root)

    def same_as_clean(name: str) -> None:
        assert_equals_a_clean_build(root, tmp_path / f"clean-{name}", capsys, (
            "entity-profiles.json", "entities.parquet", "entity_vectors.parquet",
            "entity-graph.json", "chunks.parquet"))

    assert build(root, capsys)[0] == 0
    made = stage(root, "profiles")
    assert made["entities_profiled"] == made["entities"] > 0
    chunks = pq.ParquetFile(root / "build/chunks.parquet")
    groups = [chunks.read_row_group(group, columns=["chunk_id"]).column(0).to_pylist()
              for group in range(chunks.num_row_groups)]
    assert len(groups) > 2
    profiles = root / "build/entity-profiles.json"
    kept, remade = [], []
    for number, ids in enumerate(groups):  # a passage of each row group, edited
        before = profiles.stat().st_ino, profiles.read_bytes()
        _edit_chunk(root, ids[0], f"Edited{number}")
        code, out = build(root, capsys)
        assert code == 0, out
        profiled = stage(root, "profiles")["entities_profiled"]
        if profiled == 0:
            kept.append(number)
            assert (profiles.stat().st_ino, profiles.read_bytes()) == before  # not written
            if len(kept) == 1:
                same_as_clean(f"kept-{number}")
        elif profiled < made["entities"]:  # those quoting the edited group alone
            remade.append(number)
            if len(remade) == 1:
                same_as_clean(f"remade-{number}")
    # The profiles quote the chunks they rank first, which lie in some groups only.
    assert kept and remade
    same_as_clean("last")
    # A staged file edited in place is written again: entity-profiles.json from the
    # kept entities.parquet, which is made again whole when it is the one edited.
    for name, profiled in (("entity-profiles.json", range(made["entities"])),
                           ("entities.parquet", [made["entities"]])):
        edited = root / "build/.staging" / name
        edited.write_bytes(edited.read_bytes().replace(b"name", b"nome", 1))
        _edit_chunk(root, groups[kept[0]][0], f"Again-{name}")
        assert build(root, capsys)[0] == 0
        assert stage(root, "profiles")["entities_profiled"] in profiled
        same_as_clean(f"edited-in-place-{name}")


def test_an_added_or_deleted_document_makes_only_the_profiles_it_touches(tmp_path, capsys,
                                                                          monkeypatch):
    """A document added, edited or deleted makes again the profiles of the entities its
    changed chunks name, and copies the others' rows (entities.parquet's row groups of
    the others: only the touched entities' rows are encoded again); a renamed entity
    makes every profile again (its name shows in its neighbours')."""
    from ctxfst.artifacts import parquet
    from ctxfst.pipeline import stages

    monkeypatch.setattr(stages, "HEAVY_MENTIONS", 1)  # each mentioned entity a group
    encoded: list[int] = []  # entities.parquet's rows encoded
    encode = parquet.parquet_groups_bytes

    def counted(schema, groups, dictionary=True):
        groups = list(groups)
        if "mention_count" in schema.names:
            encoded.extend(group.num_rows for group in groups)
        return encode(schema, groups, dictionary)

    monkeypatch.setattr(parquet, "parquet_groups_bytes", counted)
    root = tmp_path / "kb"
    generate(root, 120, seed=5)
    project(root)
    assert build(root, capsys)[0] == 0
    entities = stage(root, "profiles")["entities"]
    assert sum(encoded) == entities  # (a first build: every row)
    source = next((root / "content").rglob("notes-00042.ctxfst.md"))
    added = source.with_name("notes-added.ctxfst.md")
    text = source.read_text()
    copy = text.replace("n00042", "nadded")
    assert "priority: medium" in copy
    steps = [("add", lambda: added.write_text(copy)),
             ("priority", lambda: added.write_text(copy.replace("priority: medium",
                                                                "priority: low", 1))),
             ("delete", added.unlink)]
    for name, step in steps:
        step()
        encoded.clear()
        code, out = build(root, capsys)
        assert code == 0, out
        assert 0 < stage(root, "profiles")["entities_profiled"] < entities, name
        assert 0 < sum(encoded) < entities, (name, encoded)
        assert_equals_a_clean_build(root, tmp_path / f"clean-{name}", capsys, (
            "entity-profiles.json", "entities.parquet", "entity-graph.json"))
    for path in (root / "content").rglob("*.ctxfst.md"):  # every declaration of Rust
        path.write_text(path.read_text().replace("name: Rust\n", "name: Rust Renamed\n"))
    code, out = build(root, capsys)
    assert code == 0, out
    assert stage(root, "profiles")["entities_profiled"] == entities
    assert_equals_a_clean_build(root, tmp_path / "clean-renamed", capsys, (
        "entity-profiles.json", "entities.parquet", "entity-graph.json"))


def test_an_edit_embeds_only_the_changed_texts(tmp_path, capsys):
    root = example(tmp_path)
    assert build(root, capsys)[0] == 0
    assert stage(root, "embed")["embedded"] == 13 + 26 + 4  # chunks, entities, skills
    doc = root / "content/deployment.zh-TW.ctxfst.md"
    doc.write_text(doc.read_text().replace("一分鐘內", "兩分鐘內"))
    code, out = build(root, capsys)
    assert code == 0
    # Only the edited document is parsed again; it and the one with a content_path
    # passage (another file, so always checked) are typed; the others keep their units.
    validated = stage(root, "validate")
    assert validated["documents_parsed"] == 1 and validated["documents_from_cache"] == 1
    assert validated["documents_typed"] == 2 and validated["documents_checked"] == 2
    assert stage(root, "compile")["documents_recompiled"] == 2
    assert "skills" not in ran(out)  # it reads SKILL.md files only
    embed = stage(root, "embed")
    # The edited chunk, and the profiles of the two entities it mentions, are embedded;
    # the other chunks of its row group keep their vectors from the previous file, not
    # looked up, and the other profiles' and the skills' come from the cache.
    chunks = pq.read_metadata(root / "build/chunks.parquet").num_rows
    profiles = pq.read_metadata(root / "build/entities.parquet").num_rows
    skills = pq.read_metadata(root / "build/skills.parquet").num_rows
    assert embed["embedded"] == 3 and embed["cache_hits"] == profiles - 2 + skills
    assert embed["unchanged"] == chunks - 1 and embed["texts"] == chunks + profiles + skills
    # A clean build reuses every cached vector: the cache outlives `doit clean`.
    assert build(root, capsys, "clean")[0] == 0
    assert not (root / "build/chunks.json").exists()
    assert build(root, capsys)[0] == 0
    assert stage(root, "embed")["embedded"] == 0 and not stage(root, "embed")["model_loaded"]


def test_an_edit_copies_the_other_documents_chunk_rows_and_a_bad_layout_is_not_used(
        tmp_path, capsys):
    """compile reads the edited document's rows only and copies the others' texts from
    the previous chunks.json by the layout it recorded; a layout that does not fit that
    file (damaged, or another file's) is not used, and the file comes out the same."""
    from ctxfst.pipeline.chunk_rows import load_compiled, save_compiled
    from ctxfst.pipeline.units import UnitStore

    root = example(tmp_path)
    assert build(root, capsys)[0] == 0
    total = stage(root, "compile")["chunks"]
    assert stage(root, "compile")["chunks_copied"] == 0  # nothing to copy from
    doc = root / "content/deployment.zh-TW.ctxfst.md"
    doc.write_text(doc.read_text().replace("一分鐘內", "兩分鐘內"))
    assert build(root, capsys)[0] == 0
    compiled = stage(root, "compile")
    own = len(re.findall(r'<Chunk id="', doc.read_text()))
    # (the document with a content_path passage is always read again: another file)
    assert total - own - 8 <= compiled["chunks_copied"] < total - own
    config = find_project(root)
    # A staged chunks.json replaced by a copy of itself (another identity, the same
    # bytes) is hashed and still used.
    staged_json = root / "build/.staging/chunks.json"
    shutil.copy(staged_json, tmp_path / "copy.json")
    os.replace(tmp_path / "copy.json", staged_json)
    doc.write_text(doc.read_text() + "\n")
    assert build(root, capsys)[0] == 0
    assert stage(root, "compile")["chunks_copied"] == compiled["chunks_copied"]
    damages = {"head": {"head": lambda layout: layout["head"] + 1},
               "lengths": {"lengths": lambda layout: layout["lengths"][:-8]},
               "ids": {"ids": lambda layout: layout["ids"].replace("\n", "\n\n", 1)},
               # the record of another file
               "sha256": {"sha256": lambda layout: "0" * 64,
                          "identity": lambda layout: [1, 2, 3]}}
    for number, (damage, damaged) in enumerate(damages.items()):
        store = UnitStore(config.unit_store)
        record, _ = load_compiled(store)
        record["json"].update({key: change(record["json"]) for key, change in damaged.items()})
        save_compiled(store, record, {})
        store.save()
        store.close()
        doc.write_text(doc.read_text() + "\n")  # (the stage runs again)
        assert build(root, capsys)[0] == 0
        assert stage(root, "compile")["chunks_copied"] == 0, damage
        clean = tmp_path / f"clean-{number}"
        for folder in ("content", "skills"):
            shutil.copytree(root / folder, clean / folder)
        shutil.copy(root / "ctxfst.toml", clean / "ctxfst.toml")
        assert build(clean, capsys)[0] == 0
        assert (root / "build/chunks.json").read_bytes() == \
            (clean / "build/chunks.json").read_bytes(), damage


def test_row_group_starts_taken_from_the_previous_layout_equal_those_of_every_id(tmp_path):
    """An edit's compile finds the rows that start a chunks.parquet row group by their
    CRC only for the rows it reads; for the rows it copies it takes them from the
    layout the last compile recorded. Over random rounds of added, changed and removed
    documents (ids that sort before the old first row among them), they are the ones a
    CRC of every id gives."""
    import random

    from ctxfst.artifacts.io import Span
    from ctxfst.artifacts.parquet_splice import natural_starts
    from ctxfst.compile.chunks import chunks_json
    from ctxfst.pipeline.chunk_rows import _ChunkRows, _unpacked

    target = 4

    def compiled(docs: dict, before, keep: set, read: set):
        rows = _ChunkRows({path: [(chunk_id, json.dumps(
            {"id": chunk_id, "v": version}, ensure_ascii=False, separators=(",", ":")
        ).encode()) for chunk_id, version in docs[path]] for path in read}, before, keep)
        assert rows.natural_starts(target) == natural_starts(rows.ids, target)
        pieces = chunks_json(b"[]", rows.texts())
        data = b"".join(bytes(p.data) if isinstance(p, Span) else p for p in pieces)
        return data, rows.layout(pieces)

    def previous(data: bytes, layout: dict, number: int):
        path = tmp_path / f"chunks-{number}.json"
        path.write_bytes(data)
        handle = os.open(path, os.O_RDONLY)
        opened.append(handle)
        return data, {**layout, "ids": layout["ids"].split("\n") if layout["ids"] else [],
                      "docs": _unpacked(layout["docs"]),
                      "lengths": _unpacked(layout["lengths"]),
                      "natural": _unpacked(layout.get("natural"))}, handle, ()

    opened: list[int] = []
    try:
        for seed in range(400):
            rng = random.Random(seed)

            def new_ids(count: int, used: set) -> list[str]:
                ids = {"".join(rng.choice("abcdé") for _ in range(rng.randint(1, 4)))  # noqa: B023 (called in this iteration)
                       for _ in range(count)}
                return sorted(ids - used)

            docs: dict[str, list] = {}
            for number in range(rng.randint(1, 6)):
                used = {chunk_id for rows in docs.values() for chunk_id, _ in rows}
                docs[f"d{number}"] = [(i, 0) for i in new_ids(rng.randint(0, 5), used)]
            data, layout = compiled(docs, None, set(), set(docs))
            for step in range(1, 6):
                before = previous(data, layout, seed * 10 + step)
                changed = set()
                for path in list(docs):
                    draw = rng.random()
                    used = {c for other, rows in docs.items() if other != path
                            for c, _ in rows}
                    if draw < 0.15:
                        del docs[path]
                        changed.add(path)
                    elif draw < 0.35:
                        docs[path] = [(i, step) for i in new_ids(rng.randint(0, 5), used)]
                        changed.add(path)
                if rng.random() < 0.5:
                    used = {c for rows in docs.values() for c, _ in rows}
                    docs[f"n{step}"] = [(i, step) for i in new_ids(rng.randint(1, 4), used)]
                    changed.add(f"n{step}")
                data, layout = compiled(docs, before, set(docs) - changed,
                                        changed & set(docs))
    finally:
        for handle in opened:
            os.close(handle)


def test_a_published_chunks_json_edited_in_place_is_not_copied_from(tmp_path, capsys):
    """build/chunks.json is its staged twin: an edit in place that keeps its size and
    puts its mtime back (rsync --inplace -t, cp -p onto it) must not reach the next
    build, which copies unchanged rows from the previous file."""
    root = example(tmp_path / "kb")
    assert build(root, capsys)[0] == 0
    published = root / "build/chunks.json"
    info = os.stat(published)
    data = published.read_bytes()
    at = data.index(b"Hono is", data.index(b'"chunks":['))  # in a row of another document
    with open(published, "r+b") as handle:
        handle.seek(at)
        handle.write(b"HONO")
    os.utime(published, ns=(info.st_atime_ns, info.st_mtime_ns))
    doc = root / "content/deployment.zh-TW.ctxfst.md"
    doc.write_text(doc.read_text().replace("一分鐘內", "兩分鐘內"))
    assert build(root, capsys)[0] == 0
    clean = tmp_path / "clean"
    for folder in ("content", "skills"):
        shutil.copytree(root / folder, clean / folder)
    shutil.copy(root / "ctxfst.toml", clean / "ctxfst.toml")
    assert build(clean, capsys)[0] == 0
    assert published.read_bytes() == (clean / "build/chunks.json").read_bytes()
    assert_consistent(root)


def test_the_previous_chunk_files_are_not_hashed_again_while_they_are_as_published(
        tmp_path, capsys, monkeypatch):
    """The last publication recorded each staged file's stamp (size, mtime, ctime,
    inode) with its sha256: compile reads the previous chunks.json and chunks.parquet
    without hashing them while they keep it."""
    from ctxfst.pipeline import chunk_rows

    root = example(tmp_path)
    assert build(root, capsys)[0] == 0
    sizes = {(root / "build/.staging" / name).stat().st_size
             for name in ("chunks.json", "chunks.parquet")}
    hashed = counted_sha256(monkeypatch, chunk_rows)  # (where they are read)
    doc = root / "content/deployment.zh-TW.ctxfst.md"
    doc.write_text(doc.read_text().replace("一分鐘內", "兩分鐘內"))
    assert build(root, capsys)[0] == 0
    assert stage(root, "compile")["chunks_copied"] > 0
    assert not sizes & set(hashed), (sizes, hashed)
    assert_consistent(root)


def test_doit_does_not_hash_again_the_staged_files_a_build_wrote(tmp_path, capsys,
                                                                  monkeypatch):
    """doit's check of a stage's inputs compares a staged file whose identity moved by
    its content; a file this build wrote (the facts stage's, in the process it forks,
    too) has its sha256 known already: doit's check takes it, and reads nothing."""
    from ctxfst.pipeline import doit_state

    root = example(tmp_path)
    assert build(root, capsys)[0] == 0
    hashed: list[str] = []
    real = doit_state._content_hash

    def counted(path, sha256):
        hashed.append(str(path))
        return real(path, sha256)

    monkeypatch.setattr(doit_state, "_content_hash", counted)
    doc = root / "content/deployment.zh-TW.ctxfst.md"
    doc.write_text(doc.read_text().replace("一分鐘內", "兩分鐘內"))
    code, output = build(root, capsys)
    assert code == 0 and {"compile", "profiles", "facts", "manifest"} <= ran(output)
    assert not [path for path in hashed if "/.staging/" in path], hashed
    assert_consistent(root)


def test_an_edit_copies_the_kept_chunk_row_groups_in_the_kernel(tmp_path, capsys,
                                                               monkeypatch):
    """After an edit, the unchanged row groups of chunks.parquet and chunk_vectors.parquet
    (as chunks.json's unchanged rows) are copied by the kernel from the previous staged
    files; where the kernel copies nothing (another file system) they are written from
    memory: either way the bytes of a clean build."""
    from ctxfst.artifacts import io
    from ctxfst.pipeline import chunk_rows

    monkeypatch.setattr(chunk_rows, "CHUNK_GROUP_ROWS", 2)  # (row groups for an edit to keep)
    root = example(tmp_path / "kb")
    assert build(root, capsys)[0] == 0
    copied_from: list[str] = []
    real = io._copy_span

    def copy_span(span, into):
        copied_from.append(os.path.basename(os.readlink(f"/proc/self/fd/{span.fd}")))
        real(span, into)

    monkeypatch.setattr(io, "_copy_span", copy_span)
    doc = root / "content/deployment.zh-TW.ctxfst.md"
    doc.write_text(doc.read_text().replace("一分鐘內", "兩分鐘內"))
    assert build(root, capsys)[0] == 0
    assert {"chunks.json", "chunks.parquet", "chunk_vectors.parquet"} <= set(copied_from), \
        copied_from
    monkeypatch.setattr(io, "_kernel_copy", lambda source, offset, size, into: 0)
    doc.write_text(doc.read_text().replace("兩分鐘內", "三分鐘內"))
    assert build(root, capsys)[0] == 0
    clean = example(tmp_path / "clean")
    shutil.copyfile(doc, clean / "content/deployment.zh-TW.ctxfst.md")
    assert build(clean, capsys)[0] == 0
    for name in ("chunks.json", "chunks.parquet", "chunk_vectors.parquet"):
        assert (root / "build" / name).read_bytes() == (clean / "build" / name).read_bytes()
    assert_consistent(root)


def test_an_edit_copies_the_vectors_of_unchanged_row_groups(tmp_path, capsys, monkeypatch):
    """chunk_vectors.parquet has one row group per chunks.parquet group: after an edit
    the groups of unchanged chunks are copied, not read, looked up or encoded, and the
    file is the one a clean build writes."""
    from ctxfst.pipeline import chunk_rows

    monkeypatch.setattr(chunk_rows, "CHUNK_GROUP_ROWS", 2)
    root = example(tmp_path / "kb")
    assert build(root, capsys)[0] == 0
    groups = pq.ParquetFile(root / "build/chunks.parquet").metadata.num_row_groups
    assert groups >= 3
    assert pq.ParquetFile(root / "build/chunk_vectors.parquet").metadata.num_row_groups == groups
    doc = root / "content/deployment.zh-TW.ctxfst.md"
    doc.write_text(doc.read_text().replace("一分鐘內", "兩分鐘內"))
    assert build(root, capsys)[0] == 0
    embed = stage(root, "embed")
    chunks = pq.read_metadata(root / "build/chunks.parquet").num_rows
    assert 0 < embed["unchanged"] < chunks and embed["embedded"] == 3
    assert embed["texts"] == chunks + len(json.loads(
        (root / "build/entity-profiles.json").read_text())["entities"]) + len(json.loads(
            (root / "build/skill-index.json").read_text())["skills"])
    clean = example(tmp_path / "clean")
    shutil.copyfile(doc, clean / "content/deployment.zh-TW.ctxfst.md")
    assert build(clean, capsys)[0] == 0
    for name in ("chunks.parquet", "chunk_vectors.parquet"):
        assert (root / "build" / name).read_bytes() == (clean / "build" / name).read_bytes()


def test_chunk_vectors_are_embedded_a_part_at_a_time_above_the_bound(tmp_path, capsys,
                                                                       monkeypatch):
    """Above VECTORS_AT_ONCE rows, chunks are embedded and their row groups encoded a part
    at a time (each part's texts and vectors let go): the file is the one embedding them
    at once makes, after a first build and after an edit."""
    from ctxfst.compile import embed as embed_module
    from ctxfst.pipeline import chunk_rows, stages

    monkeypatch.setattr(chunk_rows, "CHUNK_GROUP_ROWS", 2)
    held = example(tmp_path / "held")
    assert build(held, capsys)[0] == 0
    monkeypatch.setattr(stages, "VECTORS_AT_ONCE", 3)
    sizes: list[int] = []
    real = embed_module.embed_texts

    def embed_texts(texts, *args, **kwargs):
        sizes.append(len(texts))
        return real(texts, *args, **kwargs)

    monkeypatch.setattr(embed_module, "embed_texts", embed_texts)
    parts = example(tmp_path / "parts")
    assert build(parts, capsys)[0] == 0
    chunks = pq.read_metadata(parts / "build/chunks.parquet").num_rows
    groups = pq.read_metadata(parts / "build/chunks.parquet").num_row_groups
    # (the profiles' and skills' texts come in one call of their own)
    chunk_calls = sizes[:-1]
    assert len(chunk_calls) >= 3 and sum(chunk_calls) == chunks
    assert max(chunk_calls) <= 8 * 2, chunk_calls  # (a group, up to 8x 2 rows, may be alone)
    assert (parts / "build/chunk_vectors.parquet").read_bytes() == \
        (held / "build/chunk_vectors.parquet").read_bytes()
    assert pq.read_metadata(parts / "build/chunk_vectors.parquet").num_row_groups == groups
    for root in (held, parts):
        doc = root / "content/deployment.zh-TW.ctxfst.md"
        doc.write_text(doc.read_text().replace("一分鐘內", "兩分鐘內"))
    assert build(parts, capsys)[0] == 0
    monkeypatch.setattr(stages, "VECTORS_AT_ONCE", 100_000)
    assert build(held, capsys)[0] == 0
    assert (parts / "build/chunk_vectors.parquet").read_bytes() == \
        (held / "build/chunk_vectors.parquet").read_bytes()
    assert_consistent(parts)


def test_an_edited_row_groups_other_vectors_come_from_the_previous_file(tmp_path, capsys):
    """The chunks of an edited row group that kept their texts keep their vectors from
    the previous file, by the text keys the unit store holds for the group it replaced;
    keys that do not fit that group (damaged, or missing) are not used: the vectors then
    come from the cache, and the file is the one a clean build writes either way."""
    from ctxfst.pipeline.units import UnitStore

    root = example(tmp_path / "kb")
    assert build(root, capsys)[0] == 0
    chunks = pq.read_metadata(root / "build/chunks.parquet").num_rows
    doc = root / "content/deployment.zh-TW.ctxfst.md"
    config = find_project(root)
    damages = {"none": None, "short": lambda blob: blob[:-1],
               "another group's": lambda blob: blob + blob[:32], "missing": lambda blob: None}
    for number, (name, damage) in enumerate(damages.items()):
        if damage is not None:
            store = UnitStore(config.unit_store)
            for key in store.keys("vector-texts:"):
                changed = damage(store.blobs([key])[key])
                if changed is None:
                    store.remove(key)
                else:
                    store.put_blob(key, changed)
            store.save()
            store.close()
        doc.write_text(doc.read_text().replace("分鐘內", f"{number}分鐘內", 1))
        assert build(root, capsys)[0] == 0
        embed = stage(root, "embed")
        assert embed["embedded"] >= 1, name
        reused = embed["unchanged"]
        assert reused == (chunks - 1 if damage is None else 0), name
        clean = example(tmp_path / f"clean-{number}")
        shutil.copyfile(doc, clean / "content/deployment.zh-TW.ctxfst.md")
        assert build(clean, capsys)[0] == 0
        assert (root / "build/chunk_vectors.parquet").read_bytes() == (
            clean / "build/chunk_vectors.parquet").read_bytes(), name


def test_embed_keys_its_groups_by_compiles_record_while_the_file_is_the_one_it_wrote(
        tmp_path, capsys, monkeypatch):
    """embed takes chunks.parquet's row groups (their sha256 and rows) from compile's
    record while the staged file is the one compile wrote (it reads and hashes none of
    it then); a staged file that is not (a copy, the same bytes) is read and its groups
    hashed. The vectors are a clean build's either way."""
    from ctxfst.artifacts import parquet_splice
    from ctxfst.pipeline import chunk_rows

    monkeypatch.setattr(chunk_rows, "CHUNK_GROUP_ROWS", 2)
    root = example(tmp_path / "kb")
    assert build(root, capsys)[0] == 0
    real = parquet_splice.group_spans
    walked: list[int] = []

    def counted(data):
        walked.append(len(data))
        return real(data)

    monkeypatch.setattr(parquet_splice, "group_spans", counted)
    doc = root / "content/deployment.zh-TW.ctxfst.md"
    doc.write_text(doc.read_text().replace("一分鐘內", "兩分鐘內"))
    code, out = build(root, capsys)
    assert code == 0 and "embed" in ran(out)
    assert walked == [] and stage(root, "embed")["embedded"] >= 1
    clean = example(tmp_path / "clean")
    shutil.copyfile(doc, clean / "content/deployment.zh-TW.ctxfst.md")
    assert build(clean, capsys)[0] == 0
    assert (root / "build/chunk_vectors.parquet").read_bytes() == (
        clean / "build/chunk_vectors.parquet").read_bytes()
    staged = root / "build/.staging/chunks.parquet"
    shutil.copy(staged, tmp_path / "copy.parquet")
    os.replace(tmp_path / "copy.parquet", staged)
    assert build(root, capsys, "forget", "embed")[0] == 0
    code, out = build(root, capsys)
    assert code == 0 and "embed" in ran(out)
    assert walked == [staged.stat().st_size]
    assert (root / "build/chunk_vectors.parquet").read_bytes() == (
        clean / "build/chunk_vectors.parquet").read_bytes()


def test_staged_vectors_planted_in_the_build_folder_are_not_reused(tmp_path, capsys,
                                                                    monkeypatch):
    """What the staged vectors were made from is recorded in the unit store (bound to
    its own file), not in build/: vectors planted there are embedded again."""
    from ctxfst.artifacts.parquet import parquet_bytes
    from ctxfst.artifacts.vectors import read_vectors, vectors_table
    from ctxfst.pipeline import chunk_rows

    monkeypatch.setattr(chunk_rows, "CHUNK_GROUP_ROWS", 2)
    root = example(tmp_path / "kb")
    assert build(root, capsys)[0] == 0
    staged = root / "build/.staging/chunk_vectors.parquet"
    ids, matrix, model_id = read_vectors(staged)
    planted = np.zeros_like(matrix)
    planted[:, 0] = 1.0
    starts = [0]
    for group in range(pq.ParquetFile(staged).metadata.num_row_groups - 1):
        starts.append(starts[-1] + pq.ParquetFile(staged).metadata.row_group(group).num_rows)
    staged.unlink()  # (the published file is a link to it: keep that one as it was)
    staged.write_bytes(parquet_bytes(vectors_table(ids, planted, model_id, "chunk_vectors"),
                                     dictionary=False, group_starts=starts))
    doc = root / "content/deployment.zh-TW.ctxfst.md"
    doc.write_text(doc.read_text().replace("一分鐘內", "兩分鐘內"))
    assert build(root, capsys)[0] == 0
    assert stage(root, "embed")["unchanged"] == 0
    clean = example(tmp_path / "clean")
    shutil.copyfile(doc, clean / "content/deployment.zh-TW.ctxfst.md")
    assert build(clean, capsys)[0] == 0
    assert (root / "build/chunk_vectors.parquet").read_bytes() == (
        clean / "build/chunk_vectors.parquet").read_bytes()


def test_a_setting_change_rebuilds_exactly_its_dependents(tmp_path, capsys):
    root = example(tmp_path)
    assert build(root, capsys)[0] == 0
    project(root, similar_top_k=2)
    code, out = build(root, capsys)
    assert code == 0 and ran(out) == {"validate", "graph", "manifest"}
    graph = json.loads((root / "build/entity-graph.json").read_text())
    assert graph["meta"]["top_k"] == 2
    project(root, "hash-32", similar_top_k=2)
    code, out = build(root, capsys)
    assert ran(out) == {"validate", "embed", "graph", "manifest"}


def test_validation_error_stops_the_build_and_keeps_artifacts(tmp_path, capsys):
    root = example(tmp_path)
    assert build(root, capsys)[0] == 0
    before = artifact_bytes(root)
    write(root, "content/broken.md", "---\nchunks:\n  - id: note:x\n    entities: [entity:nope]\n"
          '    context: "x"\n---\n<Chunk id="note:x">\nx\n</Chunk>\n')
    code, out = build(root, capsys)
    assert code != 0
    assert "content/broken.md:4:16: error CTX204" in out
    assert "Traceback" not in out
    assert artifact_bytes(root) == before
    assert_consistent(root)


def test_the_manifest_lists_every_input_and_a_settings_change_reruns_only_what_reads_it(
        tmp_path, capsys):
    """The manifest's inputs (the validate stage encodes them, the manifest stage puts
    them in unparsed): every input file with its sha256 and size in path order, the
    settings file among them; each artifact's lineage names them, as JSON's own indented
    text. A settings change the chunk and facts stages do not read re-runs neither."""
    root = example(tmp_path)
    write(root, "content/ops.edges.yaml", "- {source: entity:fastapi, target: entity:hono, "
                                          "relation: IMPLIES}\n")
    assert build(root, capsys)[0] == 0
    text = (root / "build/manifest.json").read_text(encoding="utf-8")
    manifest = json.loads(text)
    assert text == json.dumps(manifest, ensure_ascii=False, indent=2) + "\n"
    files = sorted(path.relative_to(root).as_posix() for path in root.rglob("*")
                   if path.is_file() and path.parts[len(root.parts)] in ("content", "skills")
                   or path.name == "ctxfst.toml")
    assert manifest["inputs"] == [
        {"path": name, "sha256": hashlib.sha256((root / name).read_bytes()).hexdigest(),
         "bytes": (root / name).stat().st_size} for name in files]
    lineage = {a["path"]: a["inputs"] for a in manifest["artifacts"]}
    assert lineage["chunks.parquet"] == files
    assert lineage["semantic_facts.parquet"] == [*files, "ledger:.ctxfst/facts"]
    assert lineage["skills.parquet"] == [name for name in files if name.endswith("/SKILL.md")]
    assert lineage["edges.parquet"][-1] == "content/ops.edges.yaml"
    write(root, "ctxfst.toml", (root / "ctxfst.toml").read_text() + "similar_top_k = 3\n")
    code, out = build(root, capsys)
    assert code == 0, out
    assert ran(out) & {"compile", "facts"} == set() and {"validate", "graph"} <= ran(out)
    inputs = json.loads((root / "build/manifest.json").read_text())["inputs"]
    settings = next(item for item in inputs if item["path"] == "ctxfst.toml")
    assert settings["sha256"] == hashlib.sha256((root / "ctxfst.toml").read_bytes()).hexdigest()
    assert [item for item in inputs if item is not settings] == [
        item for item in manifest["inputs"] if item["path"] != "ctxfst.toml"]


def test_extra_edges_merge_and_bad_ones_are_located(tmp_path, capsys):
    root = example(tmp_path)
    write(root, "content/ops.edges.yaml", """
        - source: entity:fastapi
          target: entity:hono
          relation: IMPLIES
          properties: {confidence: 0.8, status: active}
        - {source: entity:fastapi, target: entity:hono, relation: IMPLIES}
        """)
    code, out = build(root, capsys)
    assert code == 0, out
    graph = json.loads((root / "build/entity-graph.json").read_text())
    implied = [e for e in graph["edges"] if e["relation"] == "IMPLIES"
               and e["source"].startswith("entity:")]
    assert implied == [{"source": "entity:fastapi", "target": "entity:hono",
                        "relation": "IMPLIES", "score": 1.0,
                        "properties": {"confidence": 0.8, "status": "active"}}]
    assert graph["meta"]["extra_edge_count"] == 1
    write(root, "content/bad.edges.json", json.dumps([
        {"source": "entity:fastapi", "target": "entity:missing", "relation": "IMPLIES"},
        {"source": "entity:fastapi", "target": "entity:hono", "relation": "LIKES"},
        {"source": "entity:fastapi", "relation": "IMPLIES"},
        {"source": "entity:go", "target": "entity:grpc", "relation": "EVIDENCE",
         "properties": {"confidence": 3}},
    ], indent=1))
    code, out = build(root, capsys)
    assert code != 0
    for expected in ("content/bad.edges.json:4:13: error CTX604",
                     "content/bad.edges.json:10:15: error CTX103",
                     "content/bad.edges.json:12:2: error CTX101",
                     "content/bad.edges.json:20:17: error CTX105",
                     "content/ops.edges.yaml:5:3: warning CTX605"):
        assert expected in out, out


def test_a_corrupt_cache_is_rebuilt(tmp_path, capsys):
    root = example(tmp_path)
    assert build(root, capsys)[0] == 0
    for name in ("parse.sqlite", "embeddings.sqlite"):
        (root / ".ctxfst/cache" / name).write_bytes(b"not a database at all" * 100)
    assert build(root, capsys, "clean")[0] == 0
    code, out = build(root, capsys)
    assert code == 0, out
    assert stage(root, "embed")["embedded"] == 13 + 26 + 4  # chunks, entities, skills


def test_a_staged_entities_table_without_a_column_the_graph_reads_stops_the_build(
        tmp_path, capsys):
    """The graph stage reads entities.parquet's columns by name; one that lacks a column
    it needs is refused with the column named, and nothing is published."""
    root = example(tmp_path)
    assert build(root, capsys)[0] == 0
    before = artifact_bytes(root)
    staged = root / "build/.staging/entities.parquet"
    table = pq.read_table(staged)
    staged.unlink()  # (the published file is a link to it: keep that one as it was)
    pq.write_table(table.drop_columns(["mentioned_chunks"]), staged)
    code, out = build(root, capsys, "graph")
    assert code != 0
    assert "not an entities table (no column mentioned_chunks); run the profiles stage again" \
        in out
    assert "Traceback" not in out
    assert artifact_bytes(root) == before


def _build_process(root: Path, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "ctxfst", "build", "--root", str(root)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, **(env or {})})


def test_builds_are_byte_identical_across_hash_seeds(tmp_path):
    roots = []
    for seed in ("1", "987654"):
        root = example(tmp_path / seed)
        assert _build_process(root, {"PYTHONHASHSEED": seed}).wait() == 0
        roots.append(root)
    assert artifact_bytes(roots[0]) == artifact_bytes(roots[1])


def test_a_killed_build_leaves_the_previous_artifacts_consistent(tmp_path):
    root = project(tmp_path)
    generate(root, 150, seed=3)
    assert _build_process(root).wait() == 0
    previous = artifact_bytes(root)
    for attempt, delay in enumerate((0.3, 0.8, 1.3, 1.8, 2.4, 3.0)):
        target = next((root / "content").rglob(f"notes-{attempt:05d}.ctxfst.md"))
        target.write_text(target.read_text().replace("version: 1", "version: 3", 1))
        process = _build_process(root)
        time.sleep(delay)
        process.send_signal(signal.SIGKILL)
        process.wait()
        if (root / "build" / JOURNAL).exists():
            # Killed while publishing: the next build (or any ctxfst build) finishes it.
            assert recover(find_project(root))
        assert_consistent(root)
        # The facts ledger (the next build's prior state) is published with build/.
        for name in ("semantic_facts.parquet", "semantic_fact_extraction_runs.parquet"):
            assert (root / ".ctxfst/facts" / name).read_bytes() == (
                root / "build" / name).read_bytes()
        now = artifact_bytes(root)
        assert now == previous or all(now[n] != previous[n] for n in ("chunks.json",
                                                                       "manifest.json"))
        previous = now
    assert _build_process(root).wait() == 0
    assert_consistent(root)


@pytest.mark.model
def test_real_model_builds_upstream_fixtures_and_ch22(tmp_path, capsys):
    """End to end with the bundled all-MiniLM-L6-v2, offline."""
    root = project(tmp_path / "upstream", model="minilm")
    for path in UPSTREAM.glob("*.md"):
        if path.name != "SOURCE.md":
            shutil.copy(path, root / "content" / path.name)
    shutil.copytree(UPSTREAM / "skills", root / "skills", dirs_exist_ok=True)
    shutil.copy(CH22, root / "content" / CH22.name)
    # ch22 and the world-model example declare docker/kubernetes differently, so each
    # is its own knowledge base, as upstream builds them.
    ch22 = project(tmp_path / "ch22", model="minilm", embedding_device="cpu")
    (root / "content" / CH22.name).rename(ch22 / "content" / CH22.name)
    for kb in (root, ch22):
        code, out = build(kb, capsys)
        assert code == 0, out
        assert_consistent(kb)
    export = json.loads((root / "build/chunks.json").read_text())
    jsonschema.validate(export, json.loads((UPSTREAM / "schema.json").read_text()))
    graph = json.loads((ch22 / "build/entity-graph.json").read_text())
    assert graph["meta"]["vectorizer"] == "embedding-cosine:sentence-transformers/all-MiniLM-L6-v2"
    similar = [e for e in graph["edges"] if e["relation"] == "SIMILAR"]
    assert len(similar) >= 10
    pairs = {(e["source"], e["target"]) for e in similar}
    assert ("entity:docker", "entity:kubernetes") in pairs
    vectors = pq.read_table(ch22 / "build/entity_vectors.parquet")
    assert vectors.schema.metadata[b"ctxfst.dim"] == b"384"
    # the model ran where each project's embedding_device put it (auto: a GPU if any)
    import torch

    from ctxfst.compile.embed import get_embedder, torch_device

    assert get_embedder("minilm", "cpu")._load().device.type == "cpu"
    auto = get_embedder("minilm", "auto")._load().device.type
    assert auto == torch_device("auto") == ("cuda" if torch.cuda.is_available() else auto)


@pytest.mark.model
def test_real_model_incremental_build_equals_a_clean_one_byte_for_byte(tmp_path, capsys):
    """A text's vector must not depend on what else is embedded with it: after edits,
    the few new texts are embedded alone, where a clean build embeds them all."""
    root = example(tmp_path / "kb", model="minilm", embedding_device="cpu")
    code, out = build(root, capsys)
    assert code == 0, out
    for name in ("backend-frameworks.ctxfst.md", "career-world-model.ctxfst.md",
                 "deployment.zh-TW.ctxfst.md"):
        path = root / "content" / name
        text = path.read_text()
        end = text.index("</Chunk>")
        path.write_text(text[:end] + "An added sentence about rollouts.\n" + text[end:])
    code, out = build(root, capsys)
    assert code == 0, out
    # (the facts artifacts remember the facts the edits invalidated: they agree on the
    # active facts, tested elsewhere; the manifest names their bytes)
    assert_equals_a_clean_build(root, tmp_path / "clean", capsys, (
        "chunk_vectors.parquet", "entity_vectors.parquet", "skill_vectors.parquet",
        "entity-graph.json", "chunks.parquet", "entity-profiles.json"), settings=True)


def test_yaml_dates_in_extra_fields_build(tmp_path, capsys):
    root = project(tmp_path)
    write(root, "content/a.md", "---\nentities:\n  - id: entity:a\n    name: A\n"
          "    type: concept\n    since: 2024-01-01\nchunks:\n  - id: note:a\n"
          "    context: \"about A\"\n    entities: [entity:a]\n    reviewed: 2025-02-03\n"
          "---\n<Chunk id=\"note:a\">\nA.\n</Chunk>\n")
    code, out = build(root, capsys)
    assert code == 0, out
    export = json.loads((root / "build/chunks.json").read_text())
    assert export["entities"][0]["since"] == "2024-01-01"
    assert export["chunks"][0]["reviewed"] == "2025-02-03"


def test_a_journal_without_staged_files_is_dropped(tmp_path, capsys):
    root = example(tmp_path)
    assert build(root, capsys)[0] == 0
    (root / "build" / JOURNAL).write_text('{"files": ["chunks.json"]}')
    shutil.rmtree(root / "build/.staging")
    code, out = build(root, capsys)
    assert code == 0, out
    assert not (root / "build" / JOURNAL).exists()
    assert_consistent(root)


def test_one_build_run_validates_the_kb_once_and_again_after_an_edit(tmp_path, capsys,
                                                                      monkeypatch):
    """validate, compile and facts of one doit run share the KB validate validated;
    outside a run, an input edited between stages is loaded and validated again."""
    import ctxfst.pipeline.incremental as incremental
    from ctxfst.pipeline import stages

    calls = []
    real = incremental.check_incrementally
    monkeypatch.setattr(incremental, "check_incrementally",
                        lambda *args, **kwargs: calls.append(1) or real(*args, **kwargs))
    root = example(tmp_path)
    assert build(root, capsys)[0] == 0
    assert len(calls) == 1
    run = BuildRun(find_project(root))
    stages.stage_validate(run)
    doc = root / "content" / "backend-frameworks.ctxfst.md"
    doc.write_text(doc.read_text(encoding="utf-8").replace("Hono is a tiny web framework",
                                                           "Hono is a very small framework"))
    stages.stage_compile(run)
    chunks = json.loads((root / "build" / ".staging" / "chunks.json").read_text())
    assert any("Hono is a very small framework" in c["content"] for c in chunks["chunks"])
    assert len(calls) == 3


def test_a_later_run_in_the_same_process_does_not_take_an_earlier_runs_snapshot(
        tmp_path, capsys):
    """Each doit run has its own snapshot: an edit validated by another process between
    two runs of this one (so this run's validate is up to date) is compiled, not the
    snapshot the first run left in memory."""
    root = example(tmp_path)
    assert build(root, capsys)[0] == 0
    doc = root / "content" / "backend-frameworks.ctxfst.md"
    doc.write_text(doc.read_text(encoding="utf-8").replace("Hono is a tiny web framework",
                                                           "Hono is a very small framework"))
    other = subprocess.run([sys.executable, "-m", "ctxfst", "build", "--root", str(root),
                            "validate"], capture_output=True, text=True)
    assert other.returncode == 0, other.stdout + other.stderr
    code, out = build(root, capsys)
    assert code == 0 and "-- validate" in out and ".  compile" in out, out
    chunks = (root / "build/chunks.json").read_text(encoding="utf-8")
    assert "Hono is a very small framework" in chunks


def test_an_input_edited_after_doit_loaded_the_tasks_is_built_by_the_next_build(
        tmp_path, capsys, monkeypatch):
    """A run looks at its inputs through the stat results doit's state was made from
    (not asking the OS again for every file): a file edited after doit took them is not
    lost, the next build sees it and builds it."""
    root = example(tmp_path)
    assert build(root, capsys)[0] == 0
    edited = root / "content" / "backend-frameworks.ctxfst.md"
    edited.write_text(edited.read_text().replace("Goroutines made", "Goroutines kept"))
    late = root / "content" / "deployment.zh-TW.ctxfst.md"
    # (edited now too: no digest is kept for its identity, so validate hashes it)
    late.write_text(late.read_text().replace("一分鐘內", "一分鐘之內"))
    real = BuildRun.begin

    def begin_then_edit(self) -> None:
        real(self)
        late.write_text(late.read_text().replace("一分鐘之內", "兩分鐘以內之內"))  # new size

    monkeypatch.setattr(BuildRun, "begin", begin_then_edit)
    code, out = build(root, capsys)
    assert code == 0, out
    assert "Goroutines kept" in (root / "build/chunks.json").read_text()
    for entry in json.loads((root / "build/manifest.json").read_text())["inputs"]:
        data = (root / entry["path"]).read_bytes()
        if hashlib.sha256(data).hexdigest() == entry["sha256"]:
            assert entry["bytes"] == len(data), entry  # (its size, not an earlier one's)
    monkeypatch.setattr(BuildRun, "begin", real)
    code, out = build(root, capsys)
    assert code == 0 and ".  validate" in out, out
    chunks = (root / "build/chunks.json").read_text()
    assert "兩分鐘以內之內" in chunks and "Goroutines kept" in chunks
    assert_consistent(root)


def test_project_relative_in_bulk_gives_the_exact_answers(tmp_path, monkeypatch):
    """ProjectRelative (each folder resolved once) answers as project_relative does, for
    plain files, links inside and out of the project, `..` parts and relative paths."""
    from ctxfst.files import ProjectRelative, project_relative

    root = tmp_path / "kb"
    write(root, "content/a/doc.md", "x")
    write(root, "content/b/other.md", "x")
    write(tmp_path, "outside/far.md", "x")
    (root / "content/linked").symlink_to(root / "content/b")
    (root / "content/a/to-other.md").symlink_to(root / "content/b/other.md")
    (root / "content/a/to-far.md").symlink_to(tmp_path / "outside/far.md")
    (root / "content/out").symlink_to(tmp_path / "outside")
    monkeypatch.chdir(root)
    paths = [root / "content/a/doc.md", "content/a/doc.md", root / "content/linked/other.md",
             root / "content/a/to-other.md", root / "content/a/to-far.md",
             root / "content/out/far.md", root / "content/a/../b/other.md",
             root / "content/linked/../a/doc.md", tmp_path / "outside/far.md"]
    bulk = ProjectRelative(root)
    for path in paths:
        assert bulk(path) == project_relative(root, path), path
        assert bulk(path, "given") == project_relative(root, path, "given"), path


def test_the_walk_lists_files_in_the_order_of_their_paths_parts(tmp_path):
    """The walk's order (files.path_order, a string key) is Path's order, by parts: a
    folder's files before those of a folder whose name it begins ("a/b" before "a.b/c",
    where plain string order puts "a.b/c" first)."""
    from ctxfst.files import path_order, walk

    names = ["a/b.md", "a.b/c.md", "a-b/c.md", "a/a/z.md", "a/ab.md", "ab.md", "a b/c.md",
             "é/x.md", "z/a.md", "A/x.md", "a0/x.md"]
    for name in names:
        write(tmp_path, name, "x")
    assert walk(tmp_path) == sorted(tmp_path / name for name in names)
    strings = [str(tmp_path / name) for name in names]
    assert sorted(strings, key=path_order) == [str(p) for p in sorted(map(Path, strings))]
    assert sorted(strings) != sorted(strings, key=path_order)  # (the case it is for)


def test_extra_edge_names_at_any_depth_are_what_pathlib_globs(tmp_path):
    """The names of "**/<name>" patterns are matched together, in one listing: each
    file that any of them matches, as pathlib's glob finds it (hidden folders too)."""
    from ctxfst.files import _remembered_names

    folder = tmp_path / "content"
    for name in ("a.edges.json", "deep/b.edges.json", ".hidden/c.edges.json",
                 "links-1.yaml", "x/links-22.yaml", "a.yml", "b/bb.yml", "c.yml",
                 "doc.md", "x/edges.json", "x/a.edges.json.bak"):
        write(folder, name, "{}")
    names = ("*.edges.json", "links-?.yaml", "[ab]*.yml")
    found, refused = _remembered_names(folder, names, tmp_path, None)
    assert not refused
    expected = {path for name in names for path in folder.glob("**/" + name)}
    assert set(found) == expected and len(found) == len(expected) == 6


def test_source_digests_are_remembered_by_identity_but_not_while_racy(tmp_path):
    """The build hashes a source again only when its identity changed; a file changed a
    moment ago is hashed again next time (it could change again within one clock tick)."""
    from ctxfst.artifacts.reader import DigestCache
    from ctxfst.files import RACY_NS

    path = write(tmp_path, "doc.md", "one")
    cache_file = tmp_path / "digests.json"
    cache = DigestCache(cache_file, RACY_NS)
    cache.put("doc.md", path.stat(), "a" * 64)
    assert cache.get("doc.md", path.stat()) is None  # written just now: not remembered
    old = time.time_ns() - 10 * RACY_NS
    os.utime(path, ns=(old, old))
    info = path.stat()
    if time.time_ns() - info.st_ctime_ns < RACY_NS:
        time.sleep(RACY_NS / 1e9 * 1.5)  # ctime cannot be set back: let it age
    cache.put("doc.md", info, "a" * 64)
    cache.save()
    assert DigestCache(cache_file, RACY_NS).get("doc.md", info) == "a" * 64
    path.write_text("two")
    assert DigestCache(cache_file, RACY_NS).get("doc.md", path.stat()) is None
    # Entries only dropped are not written (the one on disk misses as well); an added
    # one is.
    cache = DigestCache(cache_file, RACY_NS)
    cache.put("doc.md", path.stat(), "b" * 64)  # racy: dropped
    cache.keep_only(set())
    written = cache_file.stat().st_mtime_ns, cache_file.stat().st_ino
    cache.save()
    assert (cache_file.stat().st_mtime_ns, cache_file.stat().st_ino) == written
    assert DigestCache(cache_file, RACY_NS).get("doc.md", path.stat()) is None
    cache.put("other.md", info, "c" * 64)
    cache.save()
    assert DigestCache(cache_file, RACY_NS).entries == {"other.md": [*file_stamp(info),
                                                                     "c" * 64]}


def test_a_foreign_digest_cache_entry_is_a_miss_and_is_not_written_back(tmp_path):
    """The input digests file may come with a stranger's KB: an entry is checked when a
    file asks for it (wrong types, a bool for a number, a nested value, a bad sha256 are
    misses) and only well-formed entries are written back."""
    from ctxfst.artifacts.reader import DigestCache
    from ctxfst.files import RACY_NS

    path = write(tmp_path, "doc.md", "x")  # (one byte: a size True equals)
    old = time.time_ns() - 10 * RACY_NS
    os.utime(path, ns=(old, old))
    time.sleep(RACY_NS / 1e9 * 1.5)
    info = path.stat()
    identity = list(file_stamp(info))
    assert identity[0] == 1
    nested: list = []
    for _ in range(400):
        nested = [nested]
    forged = {"bools": [True, *identity[1:], "a" * 64],
              "short": identity[:4], "bad-sha": [*identity, "A" * 64],
              "strings": [str(part) for part in identity] + ["a" * 64], "nested": nested,
              "doc.md": [*identity, "b" * 64]}
    cache_file = tmp_path / "digests.json"
    cache_file.write_text(json.dumps(forged))
    cache = DigestCache(cache_file, RACY_NS)
    for key in forged:
        expected = "b" * 64 if key == "doc.md" else None
        assert cache.get(key, info) == expected, key
    cache.put("other.md", info, "c" * 64)
    cache.save()
    assert set(json.loads(cache_file.read_text())) == {"doc.md", "other.md"}


def test_a_remembered_walk_sees_added_removed_and_renamed_files(tmp_path):
    """A WalkMemory keeps a listing while its folders keep their mtime: every add,
    removal or rename in a folder moves it, and the next scan lists again."""
    from ctxfst.files import RACY_NS, WalkMemory, scan_project

    root = project(tmp_path / "kb")
    write(root, "content/sub/a.md", "x")
    config = find_project(root)

    def age() -> None:  # folders older than the racy window: listings are remembered
        old = time.time_ns() - 10 * RACY_NS
        for folder in (root / "content", root / "content/sub"):
            os.utime(folder, ns=(old, old))
        time.sleep(RACY_NS / 1e9 * 1.5)  # utime() moves ctime, which cannot be set back

    memory = WalkMemory()

    def names() -> list[str]:
        return [p.relative_to(root).as_posix() for p in scan_project(config, memory).files]

    age()
    assert names() == ["content/sub/a.md"]
    assert memory.walks  # (remembered: the folders are older than the racy window)
    write(root, "content/sub/b.md", "x")
    assert names() == ["content/sub/a.md", "content/sub/b.md"]
    age()
    assert names() == ["content/sub/a.md", "content/sub/b.md"]
    (root / "content/sub/a.md").rename(root / "content/sub/c.md")
    assert names() == ["content/sub/b.md", "content/sub/c.md"]
    age()
    names()
    (root / "content/sub/b.md").unlink()
    assert names() == ["content/sub/c.md"]


def test_a_remembered_extra_edge_glob_sees_every_change_a_fresh_one_does(tmp_path):
    """The extra-edge globs ("**" patterns) are remembered in a WalkMemory while no
    folder below content/ changed, hidden and skipped ones included (a glob reads them
    where the walk does not); a matched link is looked at again every time."""
    from ctxfst.files import RACY_NS, WalkMemory, scan_project

    root = project(tmp_path / "kb")
    write(root, "content/a.md", "x")
    write(root, "content/.hidden/deep/one.edges.json", "[]")
    config = find_project(root)

    def age() -> None:
        old = time.time_ns() - 10 * RACY_NS
        for folder in [root / "content", *(p for p in (root / "content").rglob("*")
                                           if p.is_dir() and not p.is_symlink())]:
            os.utime(folder, ns=(old, old))
        time.sleep(RACY_NS / 1e9 * 1.5)  # utime() moves ctime, which cannot be set back

    memory = WalkMemory()

    def edges() -> list[str]:
        return [p.relative_to(root).as_posix() for p in scan_project(config, memory).files
                if p.name.endswith(".edges.json")]

    def fresh() -> list[str]:
        return sorted(p.relative_to(root).as_posix() for p in
                      (root / "content").glob("**/*.edges.json") if p.is_file())

    age()
    assert edges() == fresh() == ["content/.hidden/deep/one.edges.json"]
    assert memory.globs  # (remembered: no folder changed within the racy window)
    write(root, "content/.hidden/deep/two.edges.json", "[]")  # a folder the walk skips
    assert edges() == fresh()
    age()
    (root / "content/node_modules/x").mkdir(parents=True)
    age()
    assert edges() == fresh()
    write(root, "content/node_modules/x/three.edges.json", "[]")
    assert edges() == fresh() and len(fresh()) == 3
    age()
    (root / "content/.hidden/deep/one.edges.json").unlink()
    assert edges() == fresh()
    # a link to an edges file: its target can go with no folder below content/ changing
    write(root, "elsewhere/real.json", "[]")
    (root / "content/linked.edges.json").symlink_to(root / "elsewhere/real.json")
    age()
    assert "content/linked.edges.json" in edges()
    (root / "elsewhere/real.json").unlink()
    assert edges() == fresh() and "content/linked.edges.json" not in edges()
    # a pattern whose "*" component follows a folder link out of content/
    (root / "content/linked.edges.json").unlink()
    write(root, "shared/one.edges.json", "[]")
    (root / "content/to-shared").symlink_to(root / "shared")
    project(root, extra_edges=["**/*/*.edges.json"])
    config = find_project(root)
    age()
    assert "content/to-shared/one.edges.json" in edges()
    write(root, "shared/two.edges.json", "[]")  # no folder below content/ changed
    assert "content/to-shared/two.edges.json" in edges()


def test_the_default_edge_patterns_find_what_pathlib_globs_find(tmp_path):
    """The "**/<name>" patterns are answered together from one listing: the same files
    as pathlib's glob of each, on a tree with hidden and skipped folders, links to files
    and to folders, a folder with a matching name, other cases and pattern characters."""
    from ctxfst.files import scan_project

    patterns = ["**/*.edges.json", "**/*.edges.yaml", "**/[ab]?.edges.yml",
                "**/exact.edges.txt"]  # (an exact name: pathlib looks it up, as before)
    root = project(tmp_path / "kb", extra_edges=patterns)
    for name in ["content/top.edges.json", "content/.hidden/deep/one.edges.json",
                 "content/node_modules/x/two.edges.yaml", "content/a/b/UPPER.EDGES.JSON",
                 "content/a/ax.edges.yml", "content/a/abc.edges.yml", "content/a/.dot.edges.json",
                 "content/a/plain.md", "content/dir.edges.json/inner.txt",
                 "content/a/exact.edges.txt",
                 "elsewhere/real.edges.json", "elsewhere/deeper/far.edges.json"]:
        write(root, name, "[]")
    (root / "content/linked.edges.json").symlink_to(root / "elsewhere/real.edges.json")
    (root / "content/out-link.edges.yaml").symlink_to(tmp_path / "outside.edges.yaml")
    write(tmp_path, "outside.edges.yaml", "[]")
    (root / "content/folder-link").symlink_to(root / "elsewhere/deeper")
    (root / "content/dangling.edges.json").symlink_to(root / "nowhere.json")
    config = find_project(root)
    scan = scan_project(config)
    found = sorted(p.relative_to(root).as_posix() for p in scan.files
                   if not p.name.endswith(".md"))
    fresh = sorted({p.relative_to(root).as_posix() for pattern in patterns
                    for p in (root / "content").glob(pattern)
                    if p.is_file() and p.resolve().is_relative_to(root.resolve())})
    assert found == fresh
    assert {"content/linked.edges.json", "content/a/ax.edges.yml",
            "content/a/exact.edges.txt"} <= set(found)
    assert [d.code for d in scan.problems] == ["CTX809"]  # the link out of the project


def _diagnostic_lines(text: str) -> list[str]:
    return sorted(line for line in text.splitlines()
                  if re.match(r"^\S+:\d+:\d+: (error|warning|info) CTX\d{3}", line))


def test_an_incremental_validation_reports_what_a_full_one_does(tmp_path, capsys, cli):
    """A build checks only the documents that changed and those naming an id whose
    standing changed; what it reports equals `ctxfst validate` on the whole knowledge
    base, also for unchanged documents that an edit elsewhere broke."""
    root = example(tmp_path)
    # Names ids that only backend-frameworks.ctxfst.md declares: an entity, a chunk.
    write(root, "content/reader.ctxfst.md", """
        ---
        title: Reader
        chunks:
          - id: note:reader
            context: Reads another document's ids.
            entities: [entity:go]
            dependencies: [skill:go-grpc-services]
        ---
        <Chunk id="note:reader">Go services, read after the gRPC notes.</Chunk>
        """)
    assert build(root, capsys)[0] == 0
    edited = root / "content/backend-frameworks.ctxfst.md"
    original = edited.read_text(encoding="utf-8")
    steps = [
        # entity:hono is declared again (verbatim) in career-world-model.ctxfst.md: a
        # type changed here is a conflict reported there, in a document left as it was
        original.replace("  - id: entity:hono\n    name: Hono\n    type: framework",
                         "  - id: entity:hono\n    name: Hono\n    type: platform"),
        # ids no longer declared: every unchanged document naming them is reported
        original.replace("  - id: entity:go\n", "  - id: entity:golang\n"),
        original.replace("  - id: skill:go-grpc-services\n", "  - id: skill:go-services\n")
        .replace('<Chunk id="skill:go-grpc-services">', '<Chunk id="skill:go-services">'),
        original,
    ]
    for text in steps:
        edited.write_text(text, encoding="utf-8")
        code, out = build(root, capsys)
        full = cli("validate", cwd=root)
        assert _diagnostic_lines(out) == _diagnostic_lines(full.out), text[:0] or out
        assert (code == 0) == (full.code == 0)
        if text is not original:
            assert code != 0 and _diagnostic_lines(out)
    expected = {0: ("content/career-world-model.ctxfst.md", "CTX202"),
                1: ("content/reader.ctxfst.md", "CTX204"),
                2: ("content/reader.ctxfst.md", "CTX206")}
    for step, (unchanged, code) in expected.items():  # each reported in a document as it was
        edited.write_text(steps[step], encoding="utf-8")
        _, out = build(root, capsys)
        assert any(line.startswith(unchanged) and code in line
                   for line in _diagnostic_lines(out)), out


def _chain_document(name: str, needs: list[str], also: str = "",
                    also_needs: tuple[str, ...] = ()) -> str:
    """A document declaring chunk note:<name> that depends on needs (and note:<also>,
    that depends on also_needs)."""
    chunks = f"""
          - id: note:{name}
            context: One link of a chain.
            dependencies: [{", ".join(needs)}]"""
    bodies = f'<Chunk id="note:{name}">The {name} step.</Chunk>'
    if also:
        chunks += f"""
          - id: note:{also}
            context: A second chunk.
            dependencies: [{", ".join(also_needs)}]"""
        bodies += f'\n        <Chunk id="note:{also}">The {also} step.</Chunk>'
    return f"""
        ---
        title: {name}
        chunks:{chunks}
        ---
        {bodies}
        """


def _change_and_compare(root: Path, capsys, cli, path: str, text: str | None
                        ) -> tuple[int, str]:
    """Write (or, for None, delete) one document and build: the build reports what
    `ctxfst validate` reports, and fails when it fails."""
    if text is None:
        (root / path).unlink()
    else:
        write(root, path, text)
    code, out = build(root, capsys)
    full = cli("validate", cwd=root)
    assert _diagnostic_lines(out) == _diagnostic_lines(full.out), (path, out)
    assert (code == 0) == (full.code == 0), path
    return code, out


def test_dependency_cycles_an_edit_closes_or_opens_are_reported_as_validate_does(
        tmp_path, capsys, cli):
    """The build looks for new cycles from the chunks that changed alone (the last
    build had none); whatever edit, add, delete or unshadowed duplicate closes one, it
    reports what `ctxfst validate` reports, and a fixed cycle is gone."""
    root = project(tmp_path)
    for name, needs in (("a", ["note:b"]), ("b", ["note:c"]), ("c", []), ("d", ["note:a"])):
        write(root, f"content/{name}.ctxfst.md", _chain_document(name, needs))
    assert build(root, capsys)[0] == 0
    steps = [
        # an edit in one document closes a -> b -> c -> a: reported, though a, b unchanged
        ("content/c.ctxfst.md", _chain_document("c", ["note:a"])),
        ("content/c.ctxfst.md", _chain_document("c", [])),  # fixed
        # an added document declares the chunk c's edge waits for: c -> e -> d -> a -> .. c
        ("content/c.ctxfst.md", _chain_document("c", ["note:e"])),
        ("content/e.ctxfst.md", _chain_document("e", ["note:d"])),
        ("content/e.ctxfst.md", None),  # deleted: the cycle goes with it
        # a duplicate of note:c that would close a cycle, shadowed by the first
        # declaration (z sorts after c); the first one deleted, the second one's edges
        # count: the cycle appears with no document but the deleted one changed
        ("content/z.ctxfst.md", _chain_document("z", [], also="c", also_needs=("note:a",))),
        ("content/c.ctxfst.md", None),
        ("content/z.ctxfst.md", _chain_document("z", [], also="c")),
    ]
    verdicts = []
    for path, text in steps:
        out = _change_and_compare(root, capsys, cli, path, text)[1]
        verdicts.append(any("CTX207" in line for line in _diagnostic_lines(out)))
    assert verdicts == [True, False, False, True, False, False, True, False]


def entities_yaml(declares: list[tuple[str, str, str, list[str]]]) -> str:
    """entities[] items declaring (id, name, type, aliases) each, as the documents below
    indent them."""
    return "".join(f"""
          - id: {entity_id}
            name: {label}
            type: {kind}
            aliases: [{", ".join(aliases)}]""" for entity_id, label, kind, aliases in declares)


def _declaring_document(name: str, declares: list[tuple[str, str, str, list[str]]],
                        mentions: list[str]) -> str:
    """A document with chunk note:<name> mentioning `mentions`, declaring (id, name, type,
    aliases) each."""
    entities = entities_yaml(declares)
    return f"""
        ---
        title: {name}
        entities:{entities or " []"}
        chunks:
          - id: note:{name}
            context: A chunk.
            entities: [{", ".join(mentions)}]
        ---
        <Chunk id="note:{name}">The {name} chunk.</Chunk>
        """


def test_declarations_an_edit_changes_are_linked_as_a_clean_build_links_them(
        tmp_path, capsys, cli):
    """The link step answers from the ids an edit touches (pipeline.link_index): the
    first declaration moving to another document, merged aliases, a conflicting
    declaration, a suggestion that appears for an unchanged document, a type change that
    makes an unchanged document's reference good or bad. After each step the build
    reports what `ctxfst validate` reports, and its catalog is a clean build's."""
    root = project(tmp_path / "kb")
    x_in_a = ("entity:x", "X", "concept", ["ex"])
    write(root, "content/a.ctxfst.md", _declaring_document("a", [x_in_a], ["entity:x"]))
    write(root, "content/b.ctxfst.md", _declaring_document("b", [], ["entity:x"]))
    write(root, "content/c.ctxfst.md", _declaring_document(
        "c", [("entity:x", "X", "concept", ["why"])], []))
    assert build(root, capsys)[0] == 0
    steps = [
        ("content/a.ctxfst.md", None),  # the first declaration goes: c's is first now
        ("content/a0.ctxfst.md", _declaring_document(  # sorts first: its aliases lead
            "a0", [("entity:x", "X", "concept", ["zero"])], [])),
        ("content/c.ctxfst.md", _declaring_document(  # declared otherwise: CTX202
            "c", [("entity:x", "Other", "concept", [])], [])),
        ("content/c.ctxfst.md", _declaring_document(
            "c", [("entity:x", "X", "concept", ["why", "more"])], [])),
        ("content/b.ctxfst.md", _declaring_document("b", [], ["entity:x", "entity:y"])),
        # b unchanged: its dangling entity:y now gets a suggestion, then is declared
        ("content/d.ctxfst.md", _declaring_document("d", [("state:y", "Y", "state", [])], [])),
        ("content/d.ctxfst.md", _declaring_document("d", [("entity:y", "Y", "concept", [])],
                                                    [])),
        ("content/d.ctxfst.md", None),  # and gone again
        ("content/b.ctxfst.md", _declaring_document("b", [], ["entity:x"])),
        ("content/a.ctxfst.md", _declaring_document("a", [x_in_a], ["entity:x"])),
    ]
    verdicts = []
    for number, (path, text) in enumerate(steps):
        code = _change_and_compare(root, capsys, cli, path, text)[0]
        verdicts.append(code == 0)
        if code == 0:
            clean = tmp_path / f"clean-{number}"
            shutil.copytree(root / "content", clean / "content")
            shutil.copy(root / "ctxfst.toml", clean / "ctxfst.toml")
            assert build(clean, capsys)[0] == 0
            for name in ("chunks.json", "entity-profiles.json", "entities.parquet"):
                assert (root / "build" / name).read_bytes() == (
                    clean / "build" / name).read_bytes(), (number, name)
    assert verdicts == [True, True, False, True, False, False, True, False, True, True]
    entities = json.loads((root / "build/chunks.json").read_text())["entities"]
    assert [e["aliases"] for e in entities] == [["ex", "zero", "why", "more"]]


def test_what_spans_documents_is_found_after_units_the_mark_does_not_describe(
        tmp_path, capsys, cli, monkeypatch):
    """The link step trusts "nothing spanned documents before" only for the very units
    it was saved with: units written since by a toolchain that does not keep the mark,
    or a unit that cannot be read back, send it through the whole graph."""
    import sqlite3

    import ctxfst.pipeline.incremental as incremental

    root = project(tmp_path)
    for name, needs in (("a", ["note:b"]), ("b", ["note:c"]), ("c", []), ("d", [])):
        write(root, f"content/{name}.ctxfst.md", _chain_document(name, needs))
    assert build(root, capsys)[0] == 0
    # another toolchain closes a cycle and leaves the mark as it was
    monkeypatch.setattr(incremental, "LINKED", "a mark it does not keep")
    write(root, "content/c.ctxfst.md", _chain_document("c", ["note:a"]))
    assert build(root, capsys)[0] != 0
    monkeypatch.undo()
    write(root, "content/d.ctxfst.md", _chain_document("d", [], also="e"))  # elsewhere
    code, out = build(root, capsys)
    full = cli("validate", cwd=root)
    assert code != 0 and any("CTX207" in line for line in _diagnostic_lines(out))
    assert _diagnostic_lines(out) == _diagnostic_lines(full.out)

    # a unit that cannot be read back: its old chunk ids are not known to be touched
    root = project(tmp_path / "second")
    write(root, "content/a.ctxfst.md", _chain_document("a", ["note:u"]))
    write(root, "content/b.ctxfst.md", _chain_document("b", [], also="u"))
    write(root, "content/z.ctxfst.md", _chain_document("z", [], also="u",
                                                       also_needs=("note:a",)))
    assert build(root, capsys)[0] != 0  # note:u twice (CTX203), and no cycle
    with sqlite3.connect(root / ".ctxfst/cache/units.sqlite") as db:
        assert db.execute("UPDATE unit_docs SET volatile = 7 WHERE path = ?",
                          ("content/b.ctxfst.md",)).rowcount == 1
    write(root, "content/b.ctxfst.md", _chain_document("b", []))  # z's note:u now counts
    code, out = build(root, capsys)
    full = cli("validate", cwd=root)
    assert code != 0 and any("CTX207" in line for line in _diagnostic_lines(out))
    assert _diagnostic_lines(out) == _diagnostic_lines(full.out)


def test_a_linked_document_is_reported_as_validate_reports_it(tmp_path, capsys, cli):
    """A link inside content/ to another document is an input of its own: the build
    reports its duplicate chunk ids where `ctxfst validate` does."""
    root = example(tmp_path)
    (root / "content/again.ctxfst.md").symlink_to(root / "content/deployment.zh-TW.ctxfst.md")
    code, out = build(root, capsys)
    full = cli("validate", cwd=root)
    assert code != 0 and full.code != 0
    assert _diagnostic_lines(out) == _diagnostic_lines(full.out) != []


def test_units_are_kept_for_one_toolchain_and_one_cache_file(tmp_path, capsys, monkeypatch):
    """Units from another ctxfst version, or in a cache file copied in with a checkout,
    are never used: every document is checked again."""
    import ctxfst.pipeline.units as units

    root = example(tmp_path / "a")
    assert build(root, capsys)[0] == 0
    documents = stage(root, "validate")["files"] - 4  # less the four skills
    copy = tmp_path / "b"
    shutil.copytree(root, copy, symlinks=True)  # caches and all
    edit = copy / "content/backend-frameworks.ctxfst.md"
    edit.write_text(edit.read_text().replace("Goroutines made", "Goroutines kept"))
    assert build(copy, capsys)[0] == 0
    assert stage(copy, "validate")["documents_checked"] == documents
    edit.write_text(edit.read_text().replace("Goroutines kept", "Goroutines made"))
    assert build(copy, capsys)[0] == 0
    assert stage(copy, "validate")["documents_checked"] == 2  # its own units now
    monkeypatch.setattr(units, "__version__", "99.0.0")
    edit.write_text(edit.read_text().replace("Goroutines made", "Goroutines kept"))
    assert build(copy, capsys)[0] == 0
    assert stage(copy, "validate")["documents_checked"] == documents


def test_a_build_checks_skill_folders_as_validate_does(tmp_path, capsys, cli):
    root = example(tmp_path)
    (root / "skills/empty").mkdir()
    code, out = build(root, capsys)
    assert code != 0 and "CTX410" in out
    assert _diagnostic_lines(out) == _diagnostic_lines(cli("validate", cwd=root).out)
    assert out.rstrip().splitlines()[-1] == ("build stopped: validate: 1 error(s) in the "
                                            "knowledge base, build/ unchanged")


def test_a_damaged_unit_cache_is_started_over_not_obeyed(tmp_path, capsys):
    """Rows of the wrong shape in units.sqlite (a damaged or edited file) never make a
    traceback: the build starts the units over from the sources."""
    import sqlite3

    damages = {
        "skills": "UPDATE units SET value = CAST('{\"names\": 5}' AS BLOB) WHERE key = "
                  "'skills'",
        "a declaration": "UPDATE link_dumps SET text = CAST(replace(CAST(text AS TEXT), "
                         "'\"aliases\":[', '\"aliases\":7,\"x\":[') AS BLOB)",
        "diagnostics": "UPDATE unit_docs SET diagnostics = '[[1' WHERE path IN (SELECT path "
                       "FROM unit_docs LIMIT 2)",
        "dependencies": "UPDATE link_chunks SET needs = '{\"a\": 1}'",
        "declarations named": "UPDATE unit_docs SET declares = 'nope' WHERE declares != ''",
        "a unit's sha256": "UPDATE unit_docs SET sha256 = upper(sha256) WHERE path IN "
                           "(SELECT path FROM unit_docs LIMIT 3)",
        "a unit's sha256 cut": "UPDATE unit_docs SET sha256 = substr(sha256, 2) WHERE path "
                               "IN (SELECT path FROM unit_docs LIMIT 3)",
        "a unit's flag": "UPDATE unit_docs SET ctxfst = 2 WHERE path IN (SELECT path FROM "
                         "unit_docs LIMIT 3)",
        "a catalog row": "UPDATE link_catalog SET row = '[]' WHERE rowid IN (SELECT rowid "
                         "FROM link_catalog LIMIT 1)",
        "a catalog row's id": "UPDATE link_catalog SET row = replace(row, '\"id\":', "
                              "'\"di\":')",
        "a catalog row gone": "DELETE FROM link_catalog WHERE rowid IN (SELECT rowid FROM "
                              "link_catalog LIMIT 1)",
        "the mark": "UPDATE units SET value = CAST('{\"clean\": 1}' AS BLOB) WHERE key = "
                    "'linked'",
    }
    root = example(tmp_path)
    assert build(root, capsys)[0] == 0
    before = artifact_bytes(root)
    edit = root / "content/backend-frameworks.ctxfst.md"
    text = edit.read_text()
    for name, damage in damages.items():
        with sqlite3.connect(root / ".ctxfst/cache/units.sqlite") as db:
            assert db.execute(damage).rowcount > 0, name
        db.close()
        edit.write_text(text.replace("Goroutines made", "Goroutines kept"))
        code, out = build(root, capsys)
        assert code == 0 and "Traceback" not in out, (name, out)
        edit.write_text(text)
        assert build(root, capsys)[0] == 0
        now = artifact_bytes(root)
        assert {n for n in now if now[n] != before[n]} <= {
            n for n, (s, _) in ARTIFACTS.items() if s == "facts"} | {"manifest.json"}, name


def _passages_project(root: Path) -> Path:
    """A document whose passages live outside content/ and in a .txt file."""
    project(root)
    write(root, "content/a.ctxfst.md", """
        ---
        title: A
        chunks:
          - id: note:outside
            content_path: ../passages/outside.md
          - id: note:text
            content_path: text.txt
        ---
        """)
    write(root, "passages/outside.md", "First words outside.\n")
    write(root, "content/text.txt", "First words in text.\n")
    return root


def test_an_edited_passage_file_anywhere_is_rebuilt(tmp_path, capsys):
    """content_path files outside content/, or not Markdown, are no walked inputs: the
    build depends on the ones its documents name all the same."""
    root = _passages_project(tmp_path)
    assert build(root, capsys)[0] == 0

    def contents() -> dict[str, str]:
        chunks = json.loads((root / "build/chunks.json").read_text())["chunks"]
        return {chunk["id"]: chunk["content"] for chunk in chunks}

    assert contents() == {"note:outside": "First words outside.",
                          "note:text": "First words in text."}
    write(root, "passages/outside.md", "Second words outside.\n")
    code, out = build(root, capsys)
    assert code == 0 and "validate" in ran(out), out
    write(root, "content/text.txt", "Second words in text.\n")
    assert build(root, capsys)[0] == 0
    assert contents() == {"note:outside": "Second words outside.",
                          "note:text": "Second words in text."}
    (root / "content/text.txt").unlink()  # a passage gone is a change too
    code, out = build(root, capsys)
    assert code != 0 and "CTX309" in out


def test_readers_see_an_edited_passage_outside_content(tmp_path, capsys):
    root = _passages_project(tmp_path)
    assert build(root, capsys)[0] == 0
    from ctxfst.freshness import stale_reason

    config = find_project(root)
    assert stale_reason(config, root / "build") is None
    write(root, "passages/outside.md", "Other words outside.\n")
    assert "passages/outside.md" in stale_reason(config, root / "build")


def test_an_edit_looks_up_only_the_documents_whose_files_changed(tmp_path, capsys,
                                                                 monkeypatch):
    """A document whose file keeps the identity (size, mtime, inode, ctime) its unit was
    checked with is taken from its unit: neither hashed nor its digest looked up (git's
    index); a new one is hashed only as its bytes are read to be typed. One whose
    identity changed is hashed and, its bytes the same, keeps the new
    identity; one changed within a clock tick of its build is hashed again by the next
    one. Their digests live in their units, not in the build's input digests: only one
    with content_path passages (other files), checked every build, is looked up there."""
    import ctxfst.artifacts.io as artifact_io
    from ctxfst.artifacts.reader import DigestCache
    from ctxfst.pipeline import stages

    hashed: list[str] = []
    looked_up: set[str] = set()
    real_hash, real_lookup = artifact_io.sha256_file_and_size, DigestCache.sha256_and_size

    def counted_hash(path, limit=None):
        if "/content/" in str(path):
            hashed.append(Path(path).name)
        return real_hash(path, limit)

    def counted_lookup(self, key, path, info=None, limit=None):
        if key.startswith("content/"):
            looked_up.add(Path(key).name)
        return real_lookup(self, key, path, info, limit)

    monkeypatch.setattr(artifact_io, "sha256_file_and_size", counted_hash)
    monkeypatch.setattr(stages, "sha256_file_and_size", counted_hash)
    monkeypatch.setattr(DigestCache, "sha256_and_size", counted_lookup)
    root = example(tmp_path)
    content = root / "content"
    a, c, d, volatile = (content / name for name in (
        "backend-frameworks.ctxfst.md", "ai-assistant.zh-TW.ctxfst.md",
        "deployment.zh-TW.ctxfst.md", "career-world-model.ctxfst.md"))

    def edit(path: Path) -> None:
        path.write_text(path.read_text(encoding="utf-8") + "\n", encoding="utf-8")

    def built(settle: bool = True) -> tuple[list[str], set[str]]:
        if settle:
            time.sleep(0.2)  # (past the racy window: files.RACY_NS)
        hashed.clear()
        looked_up.clear()
        code, out = build(root, capsys)
        assert code == 0, out
        return sorted(hashed), looked_up - {volatile.name}

    # The first build hashes each document as it reads it to type it, not before.
    assert built() == ([], set())
    edit(a)
    assert volatile.name in built()[0]  # (known from now on as one with passages)
    edit(a)
    assert built() == ([a.name], set())
    assert volatile.name in looked_up and volatile.name not in hashed
    os.utime(c, ns=(time.time_ns(), time.time_ns()))  # touched: the same bytes
    edit(d)
    assert built() == ([c.name, d.name], set())
    edit(a)
    assert built() == ([a.name], set())  # (c kept its new identity)
    edit(d)
    found, found_looked_up = built(settle=False)  # at once: d's identity is not kept
    assert set(found) == {d.name} and found_looked_up == set()  # (doit's state hashes it,
    edit(a)                                                      # too)
    assert built() == (sorted([a.name, d.name]), set())
    edit(c)
    assert built() == ([c.name], set())
    assert_consistent(root)
    kept = json.loads((root / ".ctxfst/cache/build-inputs.json").read_text())
    assert [key for key in kept if key.endswith(".md") and "SKILL" not in key] == [
        volatile.relative_to(root).as_posix()]


def test_a_stamp_is_kept_only_for_the_file_its_bytes_came_from(tmp_path, capsys,
                                                                monkeypatch):
    """A skills folder link pointed at another folder while the build reads a document
    in it (a `git checkout`, say): the bytes are the other file's, so the stat doit took
    before is not kept as their stamp, and once the link is back the next build takes
    the document's real bytes again (and lists their sha256)."""
    from ctxfst.document.source import Source

    root = example(tmp_path)
    for side, words in (("a", "Alpha notes here.\n"), ("b", "Beta notes, other.\n")):
        folder = root / "elsewhere" / side / "foo"
        shutil.copytree(root / "skills" / "analyze-gaps", folder)
        (folder / "notes.md").write_text(words)
        skill = folder / "SKILL.md"
        skill.write_text(skill.read_text().replace("name: analyze-gaps", "name: foo", 1))
    link = root / "skills" / "foo"
    os.symlink("../elsewhere/a/foo", link)
    time.sleep(0.2)  # (past the racy window: files.RACY_NS)
    assert build(root, capsys)[0] == 0
    notes = root / "elsewhere/a/foo/notes.md"
    notes.write_text("Alpha notes, edited.\n")
    time.sleep(0.2)
    real = Source.read_with_stat

    def read_with_stat(self, *args, **kwargs):
        if str(self.fs_path).endswith("skills/foo/notes.md") and not flipped:
            flipped.append(True)
            os.unlink(link)
            os.symlink("../elsewhere/b/foo", link)
        return real(self, *args, **kwargs)

    flipped: list[bool] = []
    monkeypatch.setattr(Source, "read_with_stat", read_with_stat)
    build(root, capsys)  # (it read the other file's bytes)
    monkeypatch.setattr(Source, "read_with_stat", real)
    assert flipped
    os.unlink(link)
    os.symlink("../elsewhere/a/foo", link)
    other = root / "content" / "backend-frameworks.ctxfst.md"
    other.write_text(other.read_text(encoding="utf-8") + "\n", encoding="utf-8")
    time.sleep(0.2)
    code, out = build(root, capsys)
    assert code == 0, out
    manifest = json.loads((root / "build/manifest.json").read_text())
    listed = [i["sha256"] for i in manifest["inputs"] if i["path"].endswith("foo/notes.md")]
    assert listed == [hashlib.sha256(notes.read_bytes()).hexdigest()]
