"""Untrusted knowledge bases, holes 2 and 3: every path stays inside the project, and a
tenant mapping that matches nothing fails closed. Each test builds a hostile KB in tmp_path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import copy_example, make_project, write

DOC = """\
---
chunks:
  - id: {chunk}
    context: "about {chunk}"
{extra}---
<Chunk id="{chunk}">
{text}
</Chunk>
"""


def doc(chunk: str, text: str = "Some text.", extra: str = "") -> str:
    return DOC.format(chunk=chunk, text=text, extra=extra)


def settings(root: Path, extra: str) -> Path:
    return write(root, "ctxfst.toml", 'content_dir = "content"\nskills_dir = "skills"\n'
                 f'embedding_model = "hash-16"\n{extra}')


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def victim(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    """A folder beside the KB holding files named like artifacts."""
    folder = tmp_path / "victim"
    for name in ("manifest.json", "chunks.json", "notes.md"):
        write(folder, name, f"precious {name}\n")
    (folder / ".staging").mkdir()
    write(folder / ".staging", "keep.txt", "keep\n")
    return folder, snapshot(folder)


def located(err: str, code: str, line: int, path: str = "ctxfst.toml") -> bool:
    return f"{path}:{line}:" in err and f"error {code}:" in err


def doit(project: Path, *args: str) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("doit")
    write(project, "dodo.py", (Path(__file__).parents[1] / "dodo.py").read_text())
    return subprocess.run([str(exe), *args], cwd=project, capture_output=True, text=True,
                          check=False)


def test_build_dir_outside_the_project_is_never_written_or_cleaned(tmp_path, cli):
    target, before = victim(tmp_path)
    kb = tmp_path / "kb"
    settings(kb, 'build_dir = "../victim"\n')
    write(kb, "content/a.md", doc("note:a"))
    result = cli("build", "--root", kb)
    assert result.code == 2 and located(result.err, "CTX804", 4), result.err
    assert cli("build", "--root", kb, "clean").code == 2
    assert cli("validate", cwd=kb).code == 2
    for args in ((), ("clean",)):  # the real doit, through the project's dodo.py
        run = doit(kb, *args)
        assert run.returncode == 2 and "error CTX804" in run.stderr, run.stdout + run.stderr
    assert snapshot(target) == before
    assert not (kb / ".ctxfst").exists()  # checked before anything was touched
    # The same through a link: build/ -> ../victim, and an absolute path.
    (kb / "ctxfst.toml").write_text('embedding_model = "hash-16"\n')
    (kb / "build").symlink_to(target)
    assert cli("build", "--root", kb).code == 2 and doit(kb, "clean").returncode == 2
    (kb / "build").unlink()
    settings(kb, f'build_dir = "{target}"\n')
    assert cli("build", "--root", kb).code == 2
    assert snapshot(target) == before


def test_build_dir_that_holds_the_sources_is_refused(tmp_path, cli):
    for text, line in (('build_dir = "."\n', 1), ('content_dir = "data/content"\n'
                                                   'build_dir = "data"\n', 2)):
        kb = tmp_path / str(line)
        write(kb, "data/content/a.md", doc("note:a"))
        write(kb, "ctxfst.toml", text)
        before = snapshot(kb)
        result = cli("build", "--root", kb)
        assert result.code == 2 and located(result.err, "CTX805", line), result.err
        assert cli("build", "--root", kb, "clean").code == 2
        assert snapshot(kb) == before


def test_content_dir_outside_the_project_is_refused(tmp_path, cli):
    write(tmp_path, "other/secret.md", doc("secret:s", "someone else's text"))
    kb = tmp_path / "kb"
    write(kb, "ctxfst.toml", 'content_dir = "../other"\nembedding_model = "hash-16"\n')
    for args in (("validate",), ("build",), ("query", "text", "--mode", "lexical")):
        result = cli(*args, cwd=kb)
        assert result.code == 2 and located(result.err, "CTX804", 1), result.err
    assert not (kb / "build").exists()
    # pyproject.toml's [tool.ctxfst] is located as well; skills_dir through a link too.
    (kb / "ctxfst.toml").unlink()
    (kb / "linked").symlink_to(tmp_path / "other")
    write(kb, "pyproject.toml", '[project]\nname = "x"\n\n[tool.ctxfst]\n'
          'skills_dir = "linked"\n')
    result = cli("validate", cwd=kb)
    assert result.code == 2 and located(result.err, "CTX804", 5, "pyproject.toml"), result.err


def test_input_files_linking_out_of_the_project_are_refused_and_never_compiled(tmp_path, cli):
    outside = write(tmp_path, "outside/secret.md", doc("secret:s", "the neighbour's secret"))
    kb = tmp_path / "kb"
    settings(kb, "")
    write(kb, "content/a.md", doc("note:a"))
    (kb / "content/secret.md").symlink_to(outside)
    write(tmp_path, "outside/skill/SKILL.md", "---\nname: skill\ndescription: x\n---\nbody\n")
    (kb / "skills/own").mkdir(parents=True)
    (kb / "skills/own/SKILL.md").symlink_to(tmp_path / "outside/skill/SKILL.md")
    edges = write(tmp_path, "outside/x.edges.json", "not json")
    (kb / "content/x.edges.json").symlink_to(edges)
    result = cli("validate", "--format", "json", cwd=kb)
    assert result.code == 1
    found = {(d["code"], d["path"]) for d in result.json()["diagnostics"]}
    assert found >= {("CTX809", "content/secret.md"), ("CTX809", "skills/own/SKILL.md"),
                     ("CTX809", "content/x.edges.json")}, found
    assert all(code == "CTX809" for code, _ in found)  # not read: no parse errors of theirs
    named = cli("validate", "--format", "json", "content", cwd=kb)  # a folder named
    assert named.code == 1 and "CTX809" in named.codes()
    build = cli("build", "--root", kb)
    assert build.code != 0 and "content/secret.md:1:1: error CTX809" in build.out + build.err
    assert not (kb / "build/chunks.json").exists()
    (kb / "content/x.edges.json").unlink()
    (kb / "skills/own/SKILL.md").unlink()
    (kb / "skills/own").rmdir()
    (kb / "content/secret.md").unlink()
    assert cli("build", "--root", kb).code == 0  # a link inside the project is fine
    (kb / "content/again.md").symlink_to(kb / "content/a.md")
    assert cli("validate", "--format", "json", cwd=kb).codes() == ["CTX203"]  # read, twice


def test_extra_edges_patterns_cannot_reach_outside(tmp_path, cli):
    write(tmp_path, "x/e.edges.json", "[]")
    kb = tmp_path / "kb"
    write(kb, "content/a.md", doc("note:a"))
    for pattern in ("../x/*.json", f"{tmp_path}/x/*.json", "sub/../../x/*.json"):
        settings(kb, f'extra_edges = [\n  "**/*.edges.json",\n  "{pattern}",\n]\n')
        result = cli("validate", cwd=kb)
        assert result.code == 2 and located(result.err, "CTX804", 6), result.err
        assert "internal error" not in result.err


def test_ctxfst_folder_and_staging_links_out_are_refused(tmp_path, cli):
    target, before = victim(tmp_path)
    kb = copy_example(tmp_path / "kb", "hash-16")
    (kb / ".ctxfst").symlink_to(target)
    result = cli("build", "--root", kb)
    assert result.code == 2 and "error CTX804" in result.err, result.err
    (kb / ".ctxfst").unlink()
    (kb / ".ctxfst/cache").mkdir(parents=True)
    (kb / ".ctxfst/cache/parse.sqlite").symlink_to(target / "notes.md")
    assert cli("validate", cwd=kb).code == 2 and cli("build", "--root", kb).code == 2
    (kb / ".ctxfst/cache/parse.sqlite").unlink()
    (kb / "build").mkdir()
    (kb / "build/.staging").symlink_to(target / ".staging")
    result = cli("build", "--root", kb)
    assert result.code == 2 and "build/.staging" in result.err
    assert snapshot(target) == before


def test_a_forged_publication_journal_writes_nothing_outside(tmp_path, cli):
    kb = copy_example(tmp_path / "kb", "hash-16")
    write(kb, "payload.txt", "written by a stranger\n")
    (kb / "build/.staging").mkdir(parents=True)
    # build/.staging/../../payload.txt is kb/payload.txt; build/../../payload.txt is outside.
    write(kb, "build/.publish.json", json.dumps({"files": ["../../payload.txt"]}))
    result = cli("build", "--root", kb)
    assert result.code == 0, result.err
    assert not (tmp_path / "payload.txt").exists()


TENANT_DOCS = {
    "content/secret/pay.md": doc("secret:pay", "Payroll details.", "    facts:\n      - "
                                 "{namespace: hr, key: salary, value: ultrasecret}\n"),
    "content/public/a.md": doc("public:a", "Open text.", "    facts:\n      - "
                               "{namespace: hr, key: salary, value: public}\n"),
}


@pytest.mark.parametrize("key, code", [("content/Secret", "CTX806"), ("content/secrte", "CTX806"),
                                      ("/abs", "CTX804"), ("content/public/a.md", "CTX806")])
def test_tenant_folders_that_match_nothing_fail_closed(tmp_path, cli, key, code):
    kb = tmp_path / "kb"
    settings(kb, f'\n[facts]\ntenants = {{ "{key}" = "secret" }}\n')
    for name, text in TENANT_DOCS.items():
        write(kb, name, text)
    result = cli("build", "--root", kb)
    assert result.code == 2 and located(result.err, code, 6), result.err
    answer = cli("facts", "ask", "--tenant", "default", "--op", "list", "--format", "json",
                 cwd=kb)
    assert answer.code != 0 and "ultrasecret" not in answer.out
    # Built with a correct key first, then mistyped: the old build is never served either.
    settings(kb, '\n[facts.tenants]\n"content/secret" = "secret"\n')
    assert cli("build", "--root", kb).code == 0
    settings(kb, f'\n[facts.tenants]\n"{key}" = "secret"\n')
    answer = cli("facts", "ask", "--tenant", "default", "--op", "list", "--format", "json",
                 cwd=kb)
    assert answer.code == 2 and located(answer.err, code, 6) and "ultrasecret" not in answer.out


def test_a_tenant_folder_without_sources_stops_the_build(tmp_path, cli):
    kb = tmp_path / "kb"
    settings(kb, '\n[facts]\ntenants = { "content/secret" = "secret", "content/empty" = "x" }\n')
    for name, text in TENANT_DOCS.items():
        write(kb, name, text)
    write(kb, "content/empty/README.txt", "no documents here")
    result = cli("build", "--root", kb)
    assert result.code != 0 and located(result.out + result.err, "CTX807", 6), result.err
    assert not (kb / "build/semantic_facts.parquet").exists()


def test_a_source_whose_tenant_cannot_be_decided_is_never_served(tmp_path):
    from ctxfst.config import BuildSettings
    from ctxfst.document.kb import load_kb
    from ctxfst.facts.build import collect_sources, document_tenant
    from ctxfst.facts.extractors import ExtractionError
    from ctxfst.validation import project_inputs
    from ctxfst.config import find_project

    kb = make_project(tmp_path)
    write(kb, "content/a.md", doc("note:a", extra="", text="x").replace(
        "---\nchunks", "---\ntenant: \"not a tenant\"\nchunks", 1))
    assert document_tenant({"tenant": "not a tenant"}, "content/a.md", BuildSettings()) is None
    assert document_tenant({"tenant": 5}, "content/a.md", BuildSettings()) is None
    config = find_project(kb)
    loaded = load_kb(config.root, project_inputs(config))
    with pytest.raises(ExtractionError, match="cannot be decided"):
        collect_sources(config.root, loaded, config.build)


def test_state_file_outside_the_project_is_refused(tmp_path, cli):
    kb = copy_example(tmp_path / "kb", "hash-16")
    assert cli("build", "--root", kb).code == 0
    goal = "goal:edge-api-learning-plan"
    for state in ("../outside.json", str(tmp_path / "outside.json")):
        result = cli("state", "init", "--goal", goal, "--state", state, cwd=kb)
        assert result.code == 2 and "CTX804" in result.err, result.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kb"]
    # A world state (or its event log) planted as a link out of the project.
    (kb / "mine.json.events.jsonl").symlink_to(tmp_path / "log.jsonl")
    result = cli("state", "init", "--goal", goal, "--state", "mine.json", cwd=kb)
    assert result.code == 2 and "CTX804" in result.err
    (kb / ".ctxfst/world-state.json").symlink_to(tmp_path / "state.json")
    assert cli("state", "init", "--goal", goal, cwd=kb).code == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kb"]
    assert cli("state", "init", "--goal", goal, "--state", "inside.json", cwd=kb).code == 2
    (kb / ".ctxfst/world-state.json").unlink()
    assert cli("state", "init", "--goal", goal, "--state", "inside.json", cwd=kb).code == 0


def test_export_db_must_be_a_folder_inside_the_project(tmp_path, cli):
    pytest.importorskip("lancedb")
    kb = copy_example(tmp_path / "kb", "hash-16")
    assert cli("build", "--root", kb).code == 0
    write(kb, "db.txt", "a file\n")
    result = cli("export", "lancedb", "--db", "db.txt", cwd=kb)
    assert result.code == 2 and "CTX808" in result.err and "is a file" in result.err
    assert (kb / "db.txt").read_text() == "a file\n"
    (kb / "lance").symlink_to(tmp_path)
    for db in ("../lance", "lance"):
        result = cli("export", "lancedb", "--db", db, cwd=kb)
        assert result.code == 2 and "CTX804" in result.err, result.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kb"]
    assert cli("export", "lancedb", "--db", "own-db", cwd=kb).code == 0


def test_an_unreadable_folder_is_an_error_not_skipped(tmp_path, cli, monkeypatch):
    kb = make_project(tmp_path / "kb")
    write(kb, "content/a.md", doc("note:a"))
    write(kb, "content/private/b.md", doc("note:b", extra="    entities: [entity:none]\n"))
    real = os.scandir

    def scandir(path="."):  # as os.scandir fails for a normal user on a 0o000 folder
        if Path(path).name == "private":
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    result = cli("validate", "--format", "json", cwd=kb)
    assert result.code == 1, result.out + result.err
    diagnostics = result.json()["diagnostics"]
    assert [(d["code"], d["path"]) for d in diagnostics] == [("CTX001", "content/private")]
    assert "Permission denied" in diagnostics[0]["message"]
    build = cli("build", "--root", kb)
    assert build.code != 0 and "content/private:1:1: error CTX001" in build.out
    outside = cli("validate", tmp_path / "kb" / "content")  # a folder named on its own
    assert outside.code in (1, 2) and "content/private" in outside.out + outside.err


@pytest.mark.skipif(os.geteuid() != 0 or not Path("/usr/bin/setpriv").exists(),
                    reason="needs root to run the check as another user")
def test_an_unreadable_folder_as_a_normal_user(tmp_path):
    base = Path("/tmp") / f"ctxfst-perm-{os.getpid()}"
    kb = make_project(base / "kb")
    try:
        write(kb, "content/a.md", doc("note:a"))
        write(kb, "content/private/b.md", doc("note:b"))
        os.chmod(base, 0o755)
        for folder in (kb, kb / "content", kb / "skills"):
            os.chmod(folder, 0o755)
        os.chmod(kb / "content/private", 0)
        import ctxfst

        src = Path(ctxfst.__file__).parents[1]  # the code under test, as imported here
        result = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
             sys.executable, "-c", "import sys; from ctxfst.cli import main; "
             "sys.exit(main(['validate', '--format', 'json']))"],
            cwd=kb, capture_output=True, text=True, check=False,
            env={**os.environ, "PYTHONPATH": str(src), "HOME": str(base)})
        if result.returncode not in (0, 1) or not result.stdout.startswith("{"):
            pytest.skip(f"cannot run as nobody here: {result.stderr[-300:]}")
        codes = [(d["code"], d["path"]) for d in json.loads(result.stdout)["diagnostics"]]
        assert result.returncode == 1 and ("CTX001", "content/private") in codes
    finally:
        os.chmod(kb / "content/private", 0o755)
        import shutil

        shutil.rmtree(base, ignore_errors=True)


def test_settings_errors_are_located_with_a_code(tmp_path, cli):
    cases = [
        ("similar_topk = 3\n", "CTX802", 1, 1),
        ('embedding_model = "hash-16"\nsimilar_top_k = "five"\n', "CTX803", 2, 17),
        ('content_dir = "content"\nbuild_dir = [\n', "CTX801", 3, 1),
        ('[facts]\nfallback_limit = 1000\n', "CTX803", 2, 18),
        ('[facts]\nunknown = 1\n', "CTX802", 2, 1),
        ('[facts.tenants]\n"content/a" = "has space"\n', "CTX803", 2, 15),
        ('content_dir = "a\\u0000b"\n', "CTX803", 1, 15),
    ]
    for text, code, line, column in cases:
        (tmp_path / "content/a").mkdir(parents=True, exist_ok=True)
        (tmp_path / "ctxfst.toml").write_text(text)
        result = cli("validate", cwd=tmp_path)
        assert result.code == 2, (text, result.err)
        assert result.err.startswith(f"ctxfst.toml:{line}:{column}: error {code}: "), \
            (text, result.err)


def test_a_settings_file_linking_out_of_the_project_is_not_used(tmp_path, cli):
    write(tmp_path, "elsewhere.toml", 'skills_dir = "nothing"\n')
    write(tmp_path, "elsewhere-pyproject.toml", '[tool.ctxfst]\nskills_dir = "nothing"\n')
    kb = make_project(tmp_path / "kb")
    (kb / "ctxfst.toml").unlink()
    (kb / "ctxfst.toml").symlink_to(tmp_path / "elsewhere.toml")
    result = cli("validate", cwd=kb)
    assert result.code == 2 and result.err.startswith("ctxfst.toml:1:1: error CTX804"), \
        result.err
    (kb / "ctxfst.toml").unlink()
    (kb / "pyproject.toml").symlink_to(tmp_path / "elsewhere-pyproject.toml")
    assert "error CTX804" in cli("validate", cwd=kb).err
    # Another tool's pyproject.toml may be a link: without [tool.ctxfst] it is not ours.
    write(tmp_path, "elsewhere-pyproject.toml", '[project]\nname = "x"\n')
    (kb / "pyproject.toml").unlink()
    settings(kb, "")
    write(kb, "content/a.md", doc("note:a"))
    (kb / "content/pyproject.toml").symlink_to(tmp_path / "elsewhere-pyproject.toml")
    assert cli("validate", cwd=kb / "content").code == 0
