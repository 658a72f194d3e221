"""The library API (docs/python.md): its examples run as written, and its failures are
ctxfst.Error."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from .conftest import REPO, copy_example

DOC = REPO / "docs" / "python.md"


def examples() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


def test_the_python_docs_examples_run_as_written(tmp_path, monkeypatch, capsys):
    copy_example(tmp_path / "my-kb", "hash-16",
                 '[facts]\ncomplete = { document = ["domain/topic"] }\n')
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    blocks = examples()
    assert len(blocks) == 3
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)  # (our own docs)
    out = capsys.readouterr().out
    assert "{'files': 4, 'errors': 0, 'warnings': 0, 'infos': 0}" in out
    assert "yes 2" in out
    assert "mode must be one of" in out and "no ctxfst project here" in out


def test_import_ctxfst_loads_nothing_until_used():
    code = ("import sys, ctxfst\n"
            "heavy = [m for m in ('ctxfst.api', 'ctxfst.workspace', 'pyarrow', 'numpy', "
            "'pydantic', 'yaml') if m in sys.modules]\n"
            "assert not heavy, heavy\n"
            "assert callable(ctxfst.open) and 'ctxfst.api' in sys.modules\n"
            "print(ctxfst.__version__)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert sorted(__import__("ctxfst").__all__) == ["Error", "Project", "__version__",
                                                    "build", "open", "validate"]


def test_api_failures_are_ctxfst_errors(tmp_path):
    import ctxfst

    root = copy_example(tmp_path / "kb", "hash-16")
    with pytest.raises(ctxfst.Error, match="no ctxfst project"):
        ctxfst.open(tmp_path / "nowhere")
    with pytest.raises(ctxfst.Error, match="missing"):
        ctxfst.open(root).query("Hono", mode="lexical")  # nothing built yet
    ctxfst.build(root)
    kb = ctxfst.open(root)
    with pytest.raises(ctxfst.Error, match="top_k"):
        kb.query("Hono", top_k=0)
    with pytest.raises(ctxfst.Error, match="tenant"):
        kb.ask("", "exists")
    (root / "content" / "backend-frameworks.ctxfst.md").write_text(
        (root / "content" / "backend-frameworks.ctxfst.md").read_text() + "\nMore.\n")
    with pytest.raises(ctxfst.Error, match="older than the sources"):
        kb.query("Hono", mode="lexical")
    stale = ctxfst.open(root, allow_stale=True)
    assert stale.query("Hono", mode="lexical")["results"]
    assert "backend-frameworks" in stale.stale_reason()
    (root / "content" / "broken.md").write_text("---\nchunks: 5\n---\n")
    with pytest.raises(ctxfst.Error, match="the build stopped"):
        ctxfst.build(root)
    report = ctxfst.validate([root / "content" / "broken.md"])
    assert report.exit_code() == 1 and report.diagnostics[0].code.startswith("CTX")
    with pytest.raises(ctxfst.Error, match="no such file"):
        ctxfst.validate([tmp_path / "absent.md"])
