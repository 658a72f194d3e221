"""The git hook, the pre-commit manifest, the doit build, and lazy heavy imports."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from ctxfst.config import find_project

from .conftest import REPO, copy_example, make_project, run_process, write

VALID = ('---\nchunks:\n  - id: note:a\n    context: "A specific note about the thing"\n---\n'
         '<Chunk id="note:a">\nText.\n</Chunk>\n')
BROKEN = "---\nchunks:\n  - id: note:b\n    priority: urgent\n---\n"


def git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True,
                          check=False, env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e",
                                            "GIT_COMMITTER_NAME": "t",
                                            "GIT_COMMITTER_EMAIL": "t@e", "HOME": str(repo),
                                            "PATH": "/usr/bin:/bin"})


def test_install_hook_blocks_a_broken_commit_and_passes_a_good_one(tmp_path):
    make_project(tmp_path)
    git(tmp_path, "init", "-q")
    install = run_process("install-hook", cwd=tmp_path)
    assert install.returncode == 0, install.stderr
    hook = tmp_path / ".git" / "hooks" / "pre-commit"
    assert hook.stat().st_mode & 0o111
    write(tmp_path, "content/a.md", VALID)
    git(tmp_path, "add", "-A")
    assert git(tmp_path, "commit", "-qm", "good").returncode == 0
    write(tmp_path, "content/b.md", BROKEN)
    git(tmp_path, "add", "content/b.md")
    refused = git(tmp_path, "commit", "-qm", "bad")
    assert refused.returncode != 0
    assert "content/b.md:4:15: error CTX103" in refused.stdout + refused.stderr
    # The hook checks what is staged, not the working tree.
    write(tmp_path, "content/b.md", VALID.replace("note:a", "note:b"))
    assert git(tmp_path, "commit", "-qm", "still staged broken").returncode != 0
    git(tmp_path, "add", "content/b.md")
    assert git(tmp_path, "commit", "-qm", "fixed").returncode == 0


def test_staged_check_sees_deletions_that_break_references(tmp_path, cli):
    make_project(tmp_path)
    git(tmp_path, "init", "-q")
    write(tmp_path, "content/catalog.md",
          "---\nentities:\n  - id: entity:a\n    name: A\n    type: concept\n---\n")
    write(tmp_path, "content/uses.md",
          VALID.replace("context:", "entities: [entity:a]\n    context:"))
    git(tmp_path, "add", "-A")
    assert cli("validate", "--staged", cwd=tmp_path).code == 0
    git(tmp_path, "rm", "-q", "--cached", "content/catalog.md")
    result = cli("validate", "--staged", "--format", "json", cwd=tmp_path)
    assert result.code == 1 and result.codes() == ["CTX204"]


def test_install_hook_keeps_a_foreign_hook(tmp_path, cli):
    git(tmp_path, "init", "-q")
    write(tmp_path, ".git/hooks/pre-commit", "#!/bin/sh\necho mine\n")
    result = cli("install-hook", cwd=tmp_path)
    assert result.code == 2 and "--force" in result.err
    assert cli("install-hook", "--force", cwd=tmp_path).code == 0


def test_install_hook_outside_git_is_a_usage_error(tmp_path, cli):
    result = cli("install-hook", cwd=tmp_path)
    assert result.code == 2 and "git" in result.err


def test_pre_commit_manifest():
    hooks = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
    by_id = {hook["id"]: hook for hook in hooks}
    assert by_id["ctxfst-validate"]["entry"] == "ctxfst validate"
    assert by_id["ctxfst-validate"]["language"] == "python"
    import re

    pattern = re.compile(by_id["ctxfst-validate"]["files"])
    assert pattern.search("content/notes/a.md") and pattern.search("skills/x/SKILL.md")
    assert not pattern.search("README.md")


def test_validation_never_imports_torch():
    code = ("import sys\nfrom ctxfst.cli import main\n"
            f"rc = main(['validate', {str(REPO / 'content')!r}, {str(REPO / 'skills')!r}])\n"
            "heavy = [m for m in ('torch', 'sentence_transformers', 'numpy', 'pyarrow', "
            "'ctxfst.facts.model', 'ctxfst.facts.extractors', 'ctxfst.facts.build', "
            "'ctxfst.facts.query') if m in sys.modules]\nassert rc == 0 and not heavy, heavy\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr + proc.stdout


def test_the_command_line_parser_imports_nothing_heavy():
    """Every command builds the whole parser first: it must stay light (a query or a
    help text would otherwise pay for the validator's models)."""
    code = ("import sys\nfrom ctxfst.cli import build_parser\nbuild_parser()\n"
            "heavy = ('pydantic', 'pyarrow', 'numpy', 'yaml', 'torch')\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & set(heavy)))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.stdout.strip() == "[]", proc.stdout + proc.stderr


def test_usage_errors_exit_2(tmp_path, cli):
    assert cli("validate", tmp_path / "missing.md").code == 2
    assert cli("validate", "--format", "xml").code == 2
    assert cli("frobnicate").code == 2
    result = cli("validate", cwd=tmp_path)  # not a project, no paths
    assert result.code == 2 and "no ctxfst project" in result.err


def test_bad_config_is_a_usage_error(tmp_path, cli):
    write(tmp_path, "ctxfst.toml", "content_dir = [\n")
    result = cli("validate", cwd=tmp_path)
    assert result.code == 2 and "ctxfst.toml" in result.err


def _doit(project: Path, *args: str) -> subprocess.CompletedProcess:
    doit = Path(sys.executable).with_name("doit")
    return subprocess.run([str(doit), *args], cwd=project, capture_output=True, text=True,
                          check=False)


def _built_example(project: Path) -> Path:
    """The example knowledge base with the repository's dodo.py, built once by doit."""
    copy_example(project)
    shutil.copy(REPO / "dodo.py", project / "dodo.py")
    assert _doit(project).returncode == 0
    return project


def test_real_doit_command_builds_the_example_kb_incrementally(tmp_path):
    project = tmp_path / "kb"
    for name in ("content", "skills"):
        shutil.copytree(REPO / name, project / name)
    shutil.copy(REPO / "dodo.py", project / "dodo.py")
    write(project, "ctxfst.toml", 'content_dir = "content"\nskills_dir = "skills"\n'
          'embedding_model = "hash-64"\n')
    first = _doit(project)
    assert first.returncode == 0, first.stdout + first.stderr
    assert ".  validate" in first.stdout and ".  manifest" in first.stdout
    assert first.stderr == ""  # nothing said at exit either (a lock let go late, say)
    assert first.stdout.splitlines()[-1].startswith("build: 8 of 8 stages ran, published")
    again = _doit(project)
    assert again.returncode == 0 and ".  " not in again.stdout  # everything up to date
    listing = _doit(project, "list")
    for stage in ("validate", "compile", "profiles", "embed", "graph", "manifest"):
        assert f"\n{stage} " in "\n" + listing.stdout
    assert "Validate content/ and skills/" in listing.stdout
    write(project, "content/broken.md", BROKEN)
    failed = _doit(project)
    assert failed.returncode != 0
    assert "content/broken.md:4:15: error CTX103" in failed.stdout
    assert re.fullmatch(r"build stopped: validate: \d+ error\(s\) in the knowledge base, "
                        r"build/ unchanged", failed.stdout.splitlines()[-1])
    assert "Python Task failed" not in failed.stdout + failed.stderr
    (project / "content/broken.md").unlink()
    assert _doit(project).returncode == 0
    # A dodo.py written before the doit wiring moved to ctxfst.pipeline still works.
    write(project, "dodo.py", "from ctxfst.build.tasks import dodo_namespace\n\n"
          "globals().update(dodo_namespace())\n")
    old_dodo = _doit(project)
    assert old_dodo.returncode == 0 and ".  " not in old_dodo.stdout, old_dodo.stdout
    # From a subfolder, `doit -k` finds dodo.py above and builds the same project.
    (project / "content/sub").mkdir()
    write(project, "content/sub/extra.md", "---\nentities:\n  - id: entity:extra\n"
          "    name: Extra\n    type: concept\n---\n")
    below = _doit(project / "content/sub", "-k")
    assert below.returncode == 0, below.stdout + below.stderr
    assert ".  validate" in below.stdout and ".  manifest" in below.stdout
    assert not (project / "content/sub/.ctxfst").exists()
    assert "entity:extra" in (project / "build/entity-profiles.json").read_text()


def test_a_noop_build_imports_nothing_heavy(tmp_path):
    """A no-op `doit` only stats files: it loads no parser, model, Arrow or NumPy (their
    imports alone cost more than the whole no-op)."""
    project = _built_example(tmp_path / "kb")
    probe = subprocess.run([sys.executable, "-c", (
        "import sys\n"
        "from doit.cmd_base import DodoTaskLoader\n"
        "from doit.doit_cmd import DoitMain\n"
        "code = DoitMain(DodoTaskLoader()).run([])\n"
        "heavy = ('pydantic', 'pyarrow', 'numpy', 'yaml', 'torch')\n"
        "print(code, sorted({m.split('.')[0] for m in sys.modules} & set(heavy)))\n")],
        cwd=project, capture_output=True, text=True, check=False)
    assert probe.stdout.splitlines()[-1] == "0 []", probe.stdout + probe.stderr


def test_a_second_build_waits_for_the_first(tmp_path):
    """Two builds at once would share the staging folder, journal and facts ledger: the
    second waits (saying so) and then finds everything up to date. A process never waits
    for a lock it (or its parent build) holds, and `doit list` takes none."""
    import time

    project = _built_example(tmp_path / "kb")
    holder = subprocess.Popen([sys.executable, "-c", (
        "import pathlib, sys, time\n"
        "from ctxfst.pipeline.tasks import build_lock\n"
        "from ctxfst.config import find_project\n"
        "with build_lock(find_project(pathlib.Path(sys.argv[1]))):\n"
        "    print('held', flush=True)\n"
        "    time.sleep(60)\n"), str(project)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert _doit(project, "list").returncode == 0  # read-only: no wait
        write(project, "content/extra.md", "---\nentities:\n  - id: entity:extra\n"
              "    name: Extra\n    type: concept\n---\n")
        for command in ([str(Path(sys.executable).with_name("doit"))],
                        [sys.executable, "-m", "ctxfst", "build"]):
            waiting = subprocess.Popen(command, cwd=project, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True)
            time.sleep(3)
            assert waiting.poll() is None  # still waiting for the lock
            waiting.kill()
            assert "another build of this project is running" in waiting.communicate()[1]
    finally:
        holder.kill()
        holder.wait()
    second = subprocess.run([sys.executable, "-m", "ctxfst", "build"], cwd=project,
                            capture_output=True, text=True)
    assert second.returncode == 0 and "waiting" not in second.stderr


def test_the_build_lock_is_reentrant_in_one_process(tmp_path, capsys):
    from ctxfst.pipeline.run import BuildRun
    from ctxfst.pipeline.runner import run_build
    from ctxfst.pipeline.tasks import build_lock, hold_build_lock

    project = copy_example(tmp_path / "kb")
    config = find_project(project)
    with build_lock(config):
        hold_build_lock(BuildRun(config))  # a stage action inside a build: no self-wait
        assert run_build(project, []) == 0  # ctxfst build inside something holding it
    assert run_build(project, []) == 0
    capsys.readouterr()


def test_the_hook_reads_the_index_as_git_names_it(tmp_path, cli):
    """Folder names are literal (no pathspec magic), a file name that is not UTF-8 is
    refused as the build refuses it (CTX811), and a submodule or link entry named *.md
    is no document."""
    root = make_project(tmp_path)
    write(root, "ctxfst.toml", 'content_dir = ":(exclude)content"\nskills_dir = "skills"\n')
    git(root, "init", "-q")
    write(root, ":(exclude)content/b.md", BROKEN)
    git(root, "add", "-A")
    result = cli("validate", "--staged", cwd=root)
    assert result.code == 1 and "CTX103" in result.out  # checked, not excluded
    write(root, "ctxfst.toml", 'content_dir = "content"\nskills_dir = "skills"\n')
    (root / "content" / os.fsdecode(b"caf\xe9.md")).write_text(VALID)
    git(root, "add", "-A")
    sha = "1" * 40  # a submodule's commit, which this repository does not hold
    assert git(root, "update-index", "--add", "--cacheinfo",
               f"160000,{sha},content/module.md").returncode == 0
    result = cli("validate", "--staged", "--format", "json", cwd=root)
    assert result.code == 1, result.out + result.err
    assert [(d["code"], d["path"]) for d in result.json()["diagnostics"]] == [
        ("CTX811", "content/caf\udce9.md")]
    git(root, "rm", "-q", "--cached", os.fsdecode(b"content/caf\xe9.md"))
    result = cli("validate", "--staged", "--format", "json", cwd=root)
    assert result.code == 0 and result.json()["summary"]["files"] == 0, result.out


def test_the_hook_takes_the_settings_and_edge_files_from_the_index(tmp_path, cli):
    root = make_project(tmp_path)
    git(root, "init", "-q")
    write(root, "content/a.md", VALID)
    write(root, "other/b.md", BROKEN)
    git(root, "add", "-A")
    assert cli("validate", "--staged", cwd=root).code == 0  # other/ is no source yet
    # a staged ctxfst.toml that moves the content folder: the commit's view is checked
    write(root, "ctxfst.toml", 'content_dir = "other"\nskills_dir = "skills"\n')
    git(root, "add", "ctxfst.toml")
    write(root, "ctxfst.toml", 'content_dir = "content"\nskills_dir = "skills"\n')
    result = cli("validate", "--staged", cwd=root)
    assert result.code == 1 and "other/b.md" in result.out and "CTX103" in result.out
    # a staged path out of the project
    write(root, "ctxfst.toml", 'content_dir = "../../../etc"\n')
    git(root, "add", "ctxfst.toml")
    write(root, "ctxfst.toml", 'content_dir = "content"\nskills_dir = "skills"\n')
    result = cli("validate", "--staged", cwd=root)
    assert result.code == 2 and "CTX804" in result.err
    # a staged edge file that is not valid, while the work tree's is
    git(root, "add", "ctxfst.toml")
    write(root, "content/x.edges.json", '{"not": "a list"}')
    git(root, "add", "content/x.edges.json")
    write(root, "content/x.edges.json", "[]")
    result = cli("validate", "--staged", cwd=root)
    assert result.code == 1 and "CTX601" in result.out


PASSAGE_DOC = ('---\nchunks:\n  - id: note:p\n    context: "A passage kept in a file of its own"\n'
               '    content_path: {path}\n    facts:\n      - {{namespace: doc, key: topic, '
               'value: hono, evidence: "edge routing"}}\n---\n')


def test_the_hook_reads_content_path_passages_from_the_index(tmp_path, cli):
    """A passage that exists only in the work tree fails the commit; a staged passage
    since deleted (or edited) in the work tree passes it; a staged link is followed as
    the index holds it."""
    root = make_project(tmp_path)
    git(root, "init", "-q")
    write(root, "content/a.md", PASSAGE_DOC.format(path="../passages/a.txt"))
    git(root, "add", "-A")
    write(root, "passages/a.txt", "Hono does edge routing.\n")
    result = cli("validate", "--staged", cwd=root)
    assert result.code == 1 and "CTX309" in result.out, result.out  # not in the commit
    assert cli("validate", cwd=root).code == 0  # the work tree has it
    git(root, "add", "-A")
    (root / "passages/a.txt").unlink()
    result = cli("validate", "--staged", cwd=root)
    assert result.code == 0, result.out + result.err
    # the staged passage lacks the evidence the document names; the work tree's has it
    write(root, "passages/a.txt", "Something else.\n")
    git(root, "add", "-A")
    write(root, "passages/a.txt", "Hono does edge routing.\n")
    result = cli("validate", "--staged", cwd=root)
    assert result.code == 1 and "CTX708" in result.out, result.out
    # a staged link to the passage, resolved in the index; a folder is no passage
    write(root, "passages/b.txt", "Hono does edge routing.\n")
    (root / "passages/link.txt").symlink_to("b.txt")
    write(root, "content/a.md", PASSAGE_DOC.format(path="../passages/link.txt"))
    git(root, "add", "-A")
    result = cli("validate", "--staged", cwd=root)
    assert result.code == 0, result.out + result.err
    write(root, "content/a.md", PASSAGE_DOC.format(path="../passages"))
    git(root, "add", "-A")
    result = cli("validate", "--staged", cwd=root)
    assert result.code == 1 and "CTX311" in result.out, result.out
    # a link in the index that leaves the project
    (root / "passages/out.txt").symlink_to("../../outside.txt")
    write(root, "content/a.md", PASSAGE_DOC.format(path="../passages/out.txt"))
    git(root, "add", "-A")
    result = cli("validate", "--staged", cwd=root)
    assert result.code == 1 and "CTX308" in result.out, result.out


SKILL_DOC = "---\nname: {name}\ndescription: A skill\n{fields}---\nDo it.\n"


def test_the_hook_reads_skill_folders_and_scripts_from_the_index(tmp_path, cli):
    """A skill folder whose SKILL.md is only in the work tree fails the commit, one
    whose staged SKILL.md was deleted since passes it, and a staged script link that
    leaves its folder fails it while the work tree's file is plain."""
    root = make_project(tmp_path)
    git(root, "init", "-q")
    write(root, "content/a.md", VALID)
    write(root, "skills/s/notes.txt", "notes\n")
    git(root, "add", "-A")
    write(root, "skills/s/SKILL.md", SKILL_DOC.format(name="s", fields=""))
    result = cli("validate", "--staged", cwd=root)
    assert result.code == 1 and "CTX410" in result.out, result.out
    git(root, "add", "-A")
    (root / "skills/s/SKILL.md").unlink()
    result = cli("validate", "--staged", cwd=root)
    assert result.code == 0, result.out + result.err
    assert "CTX410" in cli("validate", cwd=root).out  # the work tree's view differs
    write(root, "skills/s/SKILL.md", SKILL_DOC.format(name="s", fields="script: run.py\n"))
    (root / "skills/s/run.py").symlink_to("../../../outside.py")
    git(root, "add", "-A")
    (root / "skills/s/run.py").unlink()
    write(root, "skills/s/run.py", "print('{}')\n")
    result = cli("validate", "--staged", cwd=root)
    assert result.code == 1 and "CTX414" in result.out, result.out
    assert "CTX414" not in cli("validate", cwd=root).out
    # a skill folder staged as a link out of the project
    (root / "skills/t").symlink_to(tmp_path.parent)
    git(root, "add", "-A")
    result = cli("validate", "--staged", cwd=root)
    assert result.code == 1 and "CTX411" in result.out, result.out
