"""`json_exports = false`: chunks.json and entity-profiles.json are neither made nor
published; every other artifact, reader and incremental path works from their Parquet
twins, and the build equals a clean one with the same setting."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from ctxfst.pipeline.runner import run_build

from .test_build import assert_consistent, build, example, project

JSON_EXPORTS = ("chunks.json", "entity-profiles.json")


def run_record(root: Path, stage: str) -> dict:
    results = json.loads((root / "build/run_results.json").read_text())
    return next(record for record in results["stages"] if record["stage"] == stage)


def published_bytes(root: Path) -> dict[str, bytes]:
    manifest = json.loads((root / "build/manifest.json").read_text())
    return {item["path"]: (root / "build" / item["path"]).read_bytes()
            for item in manifest["artifacts"] if not item["path"].startswith("semantic_fact")}


def test_without_json_exports_the_build_publishes_parquet_alone(tmp_path, capsys, cli):
    root = example(tmp_path / "kb", json_exports=False, report=True)
    code, out = build(root, capsys)
    assert code == 0, out
    for name in JSON_EXPORTS:
        assert not os.path.lexists(root / "build" / name), name
        assert not (root / "build/.staging" / name).exists(), name
    manifest = json.loads((root / "build/manifest.json").read_text())
    listed = {item["path"] for item in manifest["artifacts"]}
    assert {"chunks.parquet", "entities.parquet", "entity-graph.json"} <= listed
    assert not listed & set(JSON_EXPORTS)
    assert manifest["settings"]["json_exports"] is False
    assert_consistent(root)
    assert (root / "build/report.html").is_file()
    # The readers need nothing the exports held.
    found = cli("query", "web framework for the edge", "--mode", "graph", "--format", "json",
                cwd=root)
    assert found.code == 0, found.err
    assert json.loads(found.out)["results"]

    # The same knowledge base with the exports on: the other artifacts are byte-identical,
    # and entities.parquet carries entity-profiles.json's dangling references.
    with_json = example(tmp_path / "with-json")
    code, out = build(with_json, capsys)
    assert code == 0, out
    profiles = json.loads((with_json / "build/entity-profiles.json").read_text())
    dangling = profiles["meta"]["dangling_chunk_entity_refs"]
    metadata = pq.read_schema(root / "build/entities.parquet").metadata
    assert json.loads(metadata[b"ctxfst.dangling_chunk_entity_refs"]) == dangling
    theirs, ours = published_bytes(with_json), published_bytes(root)
    assert set(theirs) - set(ours) == set(JSON_EXPORTS)
    for name, data in ours.items():
        if name != "manifest.json":
            assert theirs[name] == data, name


def test_an_edit_without_json_exports_copies_the_other_documents_rows(tmp_path, capsys):
    """The rows of unchanged documents are located by the last compile's layout and taken
    from the previous chunks.parquet: one document is compiled again, not all of them."""
    from ctxfst.mock import generate

    root = project(tmp_path / "kb", json_exports=False)
    generate(root, 40, seed=2)
    assert build(root, capsys)[0] == 0
    chunks = run_record(root, "compile")["chunks"]
    edited = next((root / "content").rglob("notes-00007.ctxfst.md"))
    edited.write_text(edited.read_text().replace("version: 1", "version: 2", 1))
    code, out = build(root, capsys)
    assert code == 0, out
    record = run_record(root, "compile")
    own = sum(1 for row in pq.read_table(root / "build/chunks.parquet", columns=["source"])
              .column("source").to_pylist() if row.endswith("notes-00007.ctxfst.md"))
    assert record["documents_recompiled"] == 1
    assert record["chunks_copied"] == chunks - own > 0
    clean = project(tmp_path / "clean", json_exports=False)
    shutil.rmtree(clean / "content")
    shutil.copytree(root / "content", clean / "content")
    assert build(clean, capsys)[0] == 0
    assert published_bytes(root) == published_bytes(clean)


def test_switching_json_exports_publishes_or_withdraws_them(tmp_path, capsys):
    root = example(tmp_path / "kb")
    assert build(root, capsys)[0] == 0
    first = published_bytes(root)
    project(root, json_exports=False)
    code, out = build(root, capsys)
    assert code == 0, out
    assert not any(os.path.lexists(root / "build" / name) for name in JSON_EXPORTS)
    assert_consistent(root)
    project(root)  # on again (the default)
    code, out = build(root, capsys)
    assert code == 0, out
    again = published_bytes(root)
    assert again == first  # the same settings as the first build: the same bytes


def test_the_json_exports_setting_must_be_true_or_false(tmp_path):
    from ctxfst.config import ConfigError

    root = example(tmp_path, json_exports="no")
    with pytest.raises(ConfigError) as caught:
        run_build(root, [])
    assert caught.value.code == "CTX803"
    assert "'json_exports' must be true or false" in str(caught.value)
    assert "ctxfst.toml:4:" in str(caught.value)
