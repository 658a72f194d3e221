"""The ray engine: documents parsed and cache misses embedded by Ray Data pipelines on a
local cluster, and the artifacts the local engine builds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ctxfst.mock import generate
from ctxfst.pipeline.runner import run_build

from .conftest import write
from .test_build import artifact_bytes, stage


def knowledge_base(root: Path, documents: int, model: str, extra: str = "") -> Path:
    generate(root, documents, seed=7)
    write(root, "ctxfst.toml", f'embedding_model = "{model}"\n{extra}')
    return root


def build_cli(root: Path, *options: str) -> subprocess.CompletedProcess:
    """`ctxfst build` in a process of its own (with --engine ray, on a local cluster it
    starts and stops)."""
    env = {name: value for name, value in os.environ.items() if name != "RAY_ADDRESS"}
    return subprocess.run([sys.executable, "-m", "ctxfst", "build", "--root", str(root),
                           *options], capture_output=True, text=True, env=env, timeout=900)


def embed_record(root: Path) -> dict:
    return stage(root, "embed")


def built_both_ways(base: Path, documents: int, model: str) -> tuple[Path, Path]:
    """Two copies of a generated knowledge base, built from nothing on each engine, whose
    artifacts are the same bytes."""
    local = knowledge_base(base / "local", documents, model)
    on_ray = knowledge_base(base / "ray", documents, model)
    assert run_build(local, [], quiet=True) == 0
    done = build_cli(on_ray, "--engine", "ray")
    assert done.returncode == 0, done.stderr[-3000:]
    assert artifact_bytes(on_ray) == artifact_bytes(local)
    return local, on_ray


def test_the_ray_engine_builds_what_the_local_engine_builds(tmp_path, capsys):
    local, on_ray = built_both_ways(tmp_path, 300, "hash-64")
    record = embed_record(on_ray)
    assert record["engine"] == "ray" and record["ray_actors"] >= 1
    assert record["embedded"] == embed_record(local)["embedded"] > 2000
    assert embed_record(local)["engine"] == "local"
    # every document was parsed on the cluster, none where the build ran
    parsed = stage(on_ray, "validate")
    assert parsed["engine"] == "ray" and parsed["ray_parsed"] == parsed["documents_parsed"]
    assert parsed["documents_parsed"] >= 300
    assert "ray_parsed" not in stage(local, "validate")
    # The vectors the cluster made filled this project's cache: the local engine, after
    # an edit, embeds only the edited document's new texts.
    note = next((on_ray / "content").rglob("*.ctxfst.md"))
    note.write_text(note.read_text().replace('context: "', 'context: "Edited. ', 1))
    assert run_build(on_ray, [], quiet=True) == 0
    record = embed_record(on_ray)
    assert record["engine"] == "local" and 1 <= record["embedded"] <= 8
    # An edit on the ray engine: its one document is parsed where the build runs
    note.write_text(note.read_text().replace('context: "', 'context: "Again. ', 1))
    done = build_cli(on_ray, "--engine", "ray")
    assert done.returncode == 0, done.stderr[-3000:]
    parsed = stage(on_ray, "validate")
    assert parsed["engine"] == "ray" and parsed["documents_parsed"] == 1
    assert "ray_parsed" not in parsed


def test_the_engine_setting_and_a_missing_ray(tmp_path, capsys, cli):
    root = knowledge_base(tmp_path / "kb", 5, "hash-64", 'engine = "ray"\n')
    # `ray` not importable: the build fails, says what to install, publishes nothing
    done = subprocess.run(
        [sys.executable, "-c", "import sys; sys.modules['ray'] = None; from ctxfst.cli import "
         "main; sys.exit(main(['build', '--root', sys.argv[1]]))", str(root)],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr
    assert "pip install 'ctxfst[ray]'" in done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert not (root / "build" / "manifest.json").exists()
    # --engine local overrides the setting
    assert run_build(root, [], quiet=True, engine="local") == 0
    assert embed_record(root)["engine"] == "local"


def test_a_broken_document_parsed_on_the_cluster_is_reported_where_it_is(tmp_path):
    """A document the cluster parses is checked as the local engine checks it: the same
    located findings, exit 1, nothing published."""
    outputs = []
    for engine in ("local", "ray"):
        root = knowledge_base(tmp_path / engine, 250, "hash-64")
        note = sorted((root / "content").rglob("*.ctxfst.md"))[7]
        note.write_text(note.read_text().replace("chunks:", "chunks: [unclosed\n", 1))
        done = build_cli(root, "--engine", engine)
        assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
        assert "Traceback" not in done.stdout + done.stderr
        assert not (root / "build" / "manifest.json").exists()
        findings = [line for line in done.stdout.splitlines() if ".ctxfst.md:" in line]
        assert any(line.startswith(f"{note.relative_to(root)}:") and "CTX012" in line
                   for line in findings)
        outputs.append(findings)
    assert outputs[0] == outputs[1]


@pytest.mark.model
def test_the_ray_engine_makes_the_real_models_vectors_byte_for_byte(tmp_path, capsys):
    """MiniLM's floats depend on how many threads split its sums: an actor runs as many
    as the local engine would, so its vectors are the same bytes."""
    built_both_ways(tmp_path, 12, "minilm")
