"""Incremental builds equal clean rebuilds over random sequences of edits.

A project (the example knowledge base plus a few mock documents) is built once; then a
sequence of operations edits, adds, deletes, renames, touches and rewrites its sources,
with a real in-process build after each operation (or after a batch of them). After every
build, a copy of the current sources is built from nothing in a fresh folder, and:

- every published artifact but the facts-stage ones and manifest.json is byte-identical;
- the facts artifacts' active facts are equal (they keep history by design);
- the manifests are equal once the facts artifacts' entries are removed.

An operation that breaks the knowledge base must fail the build and leave build/ byte for
byte as it was; its fix must then build like a clean rebuild again.

The sources are held as a small model (each document's frontmatter as YAML data, its body
as text and chunks), so that every operation is checked to keep the knowledge base valid
before it is written: a failed build is then a finding, not a bad edit.
"""

from __future__ import annotations

import contextlib
import copy
import difflib
import hashlib
import io
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context

from ctxfst.facts import build as facts_build
from ctxfst.facts.model import Fact, evidence_schema, facts_table
from ctxfst.mock import generate, mock_document
from ctxfst.pipeline.runner import run_build
from ctxfst.pipeline.table import ARTIFACTS

from .conftest import copy_example
from .test_build import PUBLISHED, assert_consistent, project

# Edits that keep a file's mtime (`cp -p`, `rsync -t`, `tar x`), swaps of files with one
# mtime, and adds to a folder whose mtime is put back are drawn too: the build trusts a
# file's whole identity (size, mtime, inode, ctime), never its mtime alone.
STATEFUL = {name for name, (stage, _) in ARTIFACTS.items() if stage == "facts"}
MOCK_DOCUMENTS = 6
MOCK_SEED = 5
SOURCE_DIRS = ("content", "skills")
CHUNK = re.compile(r'<Chunk id="([^"]*)">(.*?)</Chunk>', re.S)
# A string in the frontmatter that names an id (a reference or a condition); colon-less
# names (skills) are not tracked. Conservative: an id-like string anywhere counts.
ID_LIKE = re.compile(r"(?:NOT )?([a-z0-9_.-]+(?::[a-z0-9_.-]+)+)")


# --- building and comparing -------------------------------------------------------------

@pytest.fixture(autouse=True, scope="module")
def small_row_groups():
    """chunks.parquet and semantic_facts.parquet in row groups of a few rows, so that
    edits splice many groups of the example's few dozen chunks and few hundred facts,
    the facts with three or more evidence entries alone in theirs, and fact rows that
    keep one evidence entry, so that rows are cut and entries beyond them come back
    (module scope: Hypothesis forbids per-test ones)."""
    from ctxfst.facts import model as facts_model
    from ctxfst.pipeline import chunk_rows

    kept = (chunk_rows.CHUNK_GROUP_ROWS, facts_build.FACT_GROUP_ROWS,
            facts_build.HEAVY_EVIDENCE, facts_model.EVIDENCE_KEPT)
    chunk_rows.CHUNK_GROUP_ROWS, facts_build.FACT_GROUP_ROWS, facts_build.HEAVY_EVIDENCE = 4, 32, 3
    facts_model.EVIDENCE_KEPT = 1
    yield
    chunk_rows.CHUNK_GROUP_ROWS, facts_build.FACT_GROUP_ROWS, facts_build.HEAVY_EVIDENCE = kept[:3]
    facts_model.EVIDENCE_KEPT = kept[3]


def build(root: Path) -> tuple[int, str]:
    """An in-process `ctxfst build`, its output captured (no pytest fixture: Hypothesis)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = run_build(root, [])
    return code, out.getvalue()


def _published_bytes(root: Path, name: str) -> bytes | None:
    """An artifact's bytes in build/; None when it is not there (a JSON export off)."""
    path = root / "build" / name
    return path.read_bytes() if os.path.lexists(path) else None


def _without_run_ids(entries: list[dict]) -> tuple:
    return tuple(tuple(value for name, value in entry.items() if name != "run_id")
                 for entry in entries)


def active_facts(root: Path) -> list:
    """The active facts as their rows and evidence say them (run ids aside: a clean
    build's runs are other runs)."""
    rows = pq.read_table(root / "build/semantic_facts.parquet").to_pylist()
    evidence: dict[str, list[dict]] = {}
    for entry in pq.read_table(root / "build/semantic_fact_evidence.parquet").to_pylist():
        evidence.setdefault(entry.pop("fact_id"), []).append(entry)
    return sorted((r["fact_id"], r["fact_value_text"], r["evidence_start"],
                   r["evidence_excerpt"], r["evidence_count"], r["freshness_at"],
                   _without_run_ids(r["evidence"]), _without_run_ids(evidence[r["fact_id"]]))
                  for r in rows if r["is_active"])


def _facts_as_written_whole(root: Path) -> bool:
    """Whether the facts file and its evidence file (spliced from the previous ones' row
    groups) are the bytes of encoding their rows at once."""
    from ctxfst.artifacts.parquet import parquet_bytes
    from ctxfst.facts.build import _evidence_starts, fact_group_starts, facts_bytes

    path = root / "build/semantic_facts.parquet"
    table = pq.read_table(path)
    meta = table.schema.metadata
    fresh = facts_table([Fact.from_row(row) for row in table.to_pylist()],
                        int(meta[b"ctxfst.build_seq"]), meta[b"ctxfst.extract_version"].decode())
    evidence_path = root / "build/semantic_fact_evidence.parquet"
    evidence = pq.read_table(evidence_path).cast(evidence_schema())
    starts = _evidence_starts(evidence, fact_group_starts(fresh, facts_build.FACT_GROUP_ROWS,
                                                          facts_build.HEAVY_EVIDENCE),
                              fresh.num_rows)
    return facts_bytes(fresh) == path.read_bytes() and parquet_bytes(
        evidence.replace_schema_metadata(pq.read_schema(evidence_path).metadata),
        group_starts=starts) == evidence_path.read_bytes()


def _manifest_without_facts(root: Path) -> dict:
    manifest = json.loads((root / "build/manifest.json").read_text())
    manifest["artifacts"] = [a for a in manifest["artifacts"] if a["path"] not in STATEFUL]
    return manifest


def differences(incremental: Path, clean: Path) -> list[str]:
    """How incremental's build/ differs from clean's, by test_build's rules: [] if equal."""
    found = [name for name in PUBLISHED
             if name not in STATEFUL and name != "manifest.json"
             and _published_bytes(incremental, name) != _published_bytes(clean, name)]
    if active_facts(incremental) != active_facts(clean):
        found.append("semantic_facts.parquet (active facts)")
    if not _facts_as_written_whole(incremental):
        found.append("semantic_facts.parquet (not the bytes of a whole write)")
    if _manifest_without_facts(incremental) != _manifest_without_facts(clean):
        found.append("manifest.json (less the facts artifacts)")
    return found


def explain(incremental: Path, clean: Path, names: list[str]) -> str:
    """The start of a diff of the first differing text artifact, for the failure message."""
    for name in names:
        name = name.split(" ")[0]
        if name.endswith(".json"):
            if name == "manifest.json":
                texts = [json.dumps(_manifest_without_facts(root), indent=1, sort_keys=True)
                         for root in (incremental, clean)]
            else:
                texts = [json.dumps(json.loads((root / "build" / name).read_text()), indent=1,
                                    sort_keys=True) for root in (incremental, clean)]
            diff = difflib.unified_diff(texts[0].splitlines(), texts[1].splitlines(),
                                        "incremental/" + name, "clean/" + name, lineterm="", n=2)
            return "\n".join(list(diff)[:60])
        if name == "semantic_facts.parquet":
            a, b = set(active_facts(incremental)), set(active_facts(clean))
            return f"active only incrementally: {sorted(a - b)[:5]}\n" \
                   f"active only in the clean build: {sorted(b - a)[:5]}"
    return ""


def build_tree(root: Path) -> dict[str, str]:
    """Every file under build/ (staging and run results too), by content."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted((root / "build").rglob("*")) if p.is_file()}


def clean_rebuild(root: Path, where: Path) -> Path:
    """The current sources of root (and its settings file), built from nothing."""
    if where.exists():
        shutil.rmtree(where)
    where.mkdir(parents=True)
    for name in SOURCE_DIRS:
        shutil.copytree(root / name, where / name)
    shutil.copy2(root / "ctxfst.toml", where / "ctxfst.toml")
    code, out = build(where)
    assert code == 0, f"the clean rebuild failed:\n{out}"
    return where


# --- a model of the sources ---------------------------------------------------------------

class Doc:
    """A CtxFST document: frontmatter (raw text until edited), body text and chunks.
    Rendering an unedited document gives its bytes back exactly."""

    def __init__(self, text: str) -> None:
        assert text.startswith("---\n"), text[:40]
        end = text.index("\n---\n", 3)
        self.fm_text: str | None = text[4:end + 1]
        self.fm: dict = yaml.safe_load(self.fm_text)
        body = text[end + 5:]
        # Alternating: text, [chunk id, inner text], text, ..., text.
        self.segments: list = []
        position = 0
        for match in CHUNK.finditer(body):
            self.segments += [body[position:match.start()], [match.group(1), match.group(2)]]
            position = match.end()
        self.segments.append(body[position:])
        assert self.render() == text

    def edited(self) -> dict:
        """The frontmatter, to be written back as YAML from now on."""
        self.fm_text = None
        return self.fm

    def render(self) -> str:
        fm = self.fm_text if self.fm_text is not None else yaml.safe_dump(
            self.fm, sort_keys=False, allow_unicode=True, width=10_000)
        body = "".join(s if isinstance(s, str) else f'<Chunk id="{s[0]}">{s[1]}</Chunk>'
                       for s in self.segments)
        return f"---\n{fm}---\n{body}"

    def records(self, section: str) -> list[dict]:
        value = self.fm.get(section)
        return value if isinstance(value, list) else []

    def bodies(self) -> list[list]:
        return [s for s in self.segments if not isinstance(s, str)]

    def body(self, chunk_id: str) -> list | None:
        return next((s for s in self.bodies() if s[0] == chunk_id), None)

    def add_body(self, chunk_id: str, inner: str, after: int) -> None:
        """A new body chunk after the after-th existing one (-1: before the first)."""
        if after < 0:
            self.segments[1:1] = [[chunk_id, inner], "\n\n"]
        else:
            index = 2 * after + 2
            self.segments[index:index] = ["\n\n", [chunk_id, inner]]

    def remove_body(self, chunk_id: str) -> None:
        index = next(i for i, s in enumerate(self.segments)
                     if not isinstance(s, str) and s[0] == chunk_id)
        self.segments[index - 1:index + 2] = [self.segments[index - 1] + self.segments[index + 1]]


def _id_strings(value, skip_ids: bool = True) -> set[str]:
    """Id-like strings in a YAML value (the `id` fields of declarations left out)."""
    found: set[str] = set()
    if isinstance(value, dict):
        for key, item in value.items():
            if not (skip_ids and key == "id"):
                found |= _id_strings(item, skip_ids)
    elif isinstance(value, list):
        for item in value:
            found |= _id_strings(item, skip_ids)
    elif isinstance(value, str):
        match = ID_LIKE.fullmatch(value)
        if match:
            found.add(match.group(1))
    return found


def _evidence(facts) -> list[str]:
    return [f["evidence"] for f in facts if isinstance(f, dict) and "evidence" in f] \
        if isinstance(facts, list) else []


def _skill_frontmatter(text: str) -> dict:
    end = text.index("\n---\n", 3)
    return yaml.safe_load(text[4:end + 1])


class Sources:
    """The project's sources: documents (modelled) and other files (skills, passages)."""

    def __init__(self, root: Path) -> None:
        self.docs: dict[str, Doc] = {}
        self.files: dict[str, str] = {}
        for name in SOURCE_DIRS:
            for path in sorted((root / name).rglob("*")):
                if path.is_file():
                    relative = path.relative_to(root).as_posix()
                    text = path.read_text(encoding="utf-8")
                    if relative.startswith("content/") and text.startswith("---\n"):
                        self.docs[relative] = Doc(text)
                    else:
                        self.files[relative] = text
        self.deleted: list[tuple[str, Doc]] = []  # for restoring a document later
        self.counter = 0

    def fresh(self) -> int:
        self.counter += 1
        return self.counter

    def rendered(self) -> dict[str, str]:
        return {**self.files, **{path: doc.render() for path, doc in self.docs.items()}}

    def skills(self) -> list[str]:
        return sorted(p for p in self.files if p.endswith("/SKILL.md"))

    def passages(self) -> list[str]:
        return sorted(p for p in self.files if p.startswith("content/"))

    def declared(self) -> set[str]:
        ids: set[str] = set()
        for doc in self.docs.values():
            ids |= {r["id"] for r in doc.records("entities")}
            ids |= {r["id"] for r in doc.records("chunks")}
        return ids

    def problems(self) -> list[str]:
        """Why these sources would not validate, as far as the operations here can break
        them (an empty list: they build)."""
        out: list[str] = []
        declared = self.declared()
        chunk_ids: dict[str, str] = {}
        for path, doc in sorted(self.docs.items()):
            entities = [r["id"] for r in doc.records("entities")]
            if len(entities) != len(set(entities)):
                out.append(f"{path}: an entity declared twice")
            records = doc.records("chunks")
            if not records:
                out.append(f"{path}: no chunks")
            for record in records:
                if record["id"] in chunk_ids:
                    out.append(f"{path}: chunk {record['id']} also in {chunk_ids[record['id']]}")
                chunk_ids[record["id"]] = path
            missing = _id_strings(doc.fm) - declared
            if missing:
                out.append(f"{path}: references undeclared {sorted(missing)}")
            local = {r["id"] for r in records if "content_path" not in r}
            bodies = {s[0]: s[1] for s in doc.bodies()}
            if local != set(bodies) or len(bodies) != len(doc.bodies()):
                out.append(f"{path}: frontmatter chunks {sorted(local)} != body {sorted(bodies)}")
            for record in records:
                if "content_path" in record:
                    target = os.path.normpath(os.path.join(os.path.dirname(path),
                                                           record["content_path"]))
                    if target not in self.files:
                        out.append(f"{path}: content_path {record['content_path']} is gone")
                for excerpt in _evidence(record.get("facts")):
                    if excerpt not in bodies.get(record["id"], ""):
                        out.append(f"{path}: {record['id']} lost its evidence {excerpt!r}")
            everything = list(bodies.values())
            for excerpt in _evidence(doc.fm.get("facts")) + [
                    e for r in doc.records("entities") for e in _evidence(r.get("facts"))]:
                if not any(excerpt in text for text in everything):
                    out.append(f"{path}: evidence {excerpt!r} no longer occurs")
        for path in self.skills():
            missing = _id_strings(_skill_frontmatter(self.files[path])) - declared
            if missing:
                out.append(f"{path}: names undeclared {sorted(missing)}")
        return out


def sync(sources: Sources, root: Path) -> None:
    """Write what the model holds: changed files only, and delete files it dropped."""
    wanted = sources.rendered()
    for relative, text in wanted.items():
        path = root / relative
        data = text.encode("utf-8")
        if not path.exists() or path.read_bytes() != data:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    for name in SOURCE_DIRS:
        for path in sorted((root / name).rglob("*")):
            if path.is_file() and path.relative_to(root).as_posix() not in wanted:
                path.unlink()


# --- operations ---------------------------------------------------------------------------
# Each takes a copy of the sources and a Random, edits the copy and returns
# (description, disk action or None), or None when it found nothing to do. The disk
# action, if any, runs before the copy is synced to disk (renames, touches, rewrites).

_OTHER_LETTERS = "etaoinshrdlucmfwypvbgkqjxz"
_OTHER_HAN = "山川風雲海星光橋城港林石火水木金土花雪月雷霧河湖島谷原"


def _same_length_change(line: str, rnd: random.Random) -> str | None:
    """line with one letter changed for another of the same UTF-8 length."""
    places = [i for i, c in enumerate(line) if c.isalpha()]
    if not places:
        return None
    i = rnd.choice(places)
    pool = _OTHER_LETTERS if line[i].isascii() else _OTHER_HAN
    if len(line[i].encode()) != len(pool[0].encode()):
        return None
    replacement = rnd.choice([c for c in pool if c != line[i].lower()])
    return line[:i] + replacement + line[i + 1:]


def _pick_doc(s: Sources, rnd: random.Random) -> tuple[str, Doc]:
    path = rnd.choice(sorted(s.docs))
    return path, s.docs[path]


def op_edit_sentence(s: Sources, rnd: random.Random, root: Path):
    path, doc = _pick_doc(s, rnd)
    if not doc.bodies():
        return None
    chunk = rnd.choice(doc.bodies())
    lines = chunk[1].split("\n")
    places = [i for i, line in enumerate(lines) if line.strip()]
    if not places:
        return None
    i = rnd.choice(places)
    how = rnd.choice(["same-length", "append", "replace", "same-length-keep-mtime"])
    n = s.fresh()
    if how.startswith("same-length"):
        changed = _same_length_change(lines[i], rnd)
        if changed is None:
            return None
        lines[i] = changed
    elif how == "append":
        lines[i] += f" An added sentence number {n}."
    else:
        lines[i] = f"A rewritten sentence number {n} about the latency budget."
    chunk[1] = "\n".join(lines)
    action = None
    if how.endswith("keep-mtime"):
        # The edit keeps the file's size and its modification time (as `cp -p` or
        # `rsync -t` would): only its bytes (and ctime) tell it changed.
        before = os.stat(root / path)

        def action():
            yield
            os.utime(root / path, ns=(before.st_atime_ns, before.st_mtime_ns))
    return f"edit a sentence ({how}) in {chunk[0]} of {path}", action


def op_edit_context(s: Sources, rnd: random.Random, root: Path):
    path, doc = _pick_doc(s, rnd)
    record = rnd.choice(doc.edited()["chunks"])
    n = s.fresh()
    record["context"] = rnd.choice([f"{record.get('context', '')} Revised {n}.",
                                    f"A new context number {n} for this chunk"])
    return f"edit the context of {record['id']} in {path}", None


def op_add_chunk(s: Sources, rnd: random.Random, root: Path):
    path, doc = _pick_doc(s, rnd)
    fm = doc.edited()
    n = s.fresh()
    chunk_id = f"note:probe-{n}"
    entities = [r["id"] for r in doc.records("entities")]
    record = {"id": chunk_id, "tags": ["Probe"],
              "entities": rnd.sample(entities, min(len(entities), rnd.randint(1, 2))),
              "context": f"A probe chunk number {n}"}
    fm["chunks"].insert(rnd.randint(0, len(fm["chunks"])), record)
    others = [b[1] for bodies in (d.bodies() for d in s.docs.values()) for b in bodies]
    # Sometimes the text of another chunk, word for word (the same text twice).
    inner = rnd.choice(others) if others and rnd.random() < 0.3 else \
        f"\n## Probe {n}\n\nThe probe passage number {n} talks about caches and queues.\n"
    doc.add_body(chunk_id, inner, rnd.randrange(-1, len(doc.bodies())))
    return f"add chunk {chunk_id} to {path}", None


def op_delete_chunk(s: Sources, rnd: random.Random, root: Path):
    path, doc = _pick_doc(s, rnd)
    chunks = doc.edited()["chunks"]
    record = chunks.pop(rnd.randrange(len(chunks)))
    if doc.body(record["id"]) is not None:
        doc.remove_body(record["id"])
    return f"delete chunk {record['id']} from {path}", None


def op_add_entity(s: Sources, rnd: random.Random, root: Path):
    path, doc = _pick_doc(s, rnd)
    fm = doc.edited()
    chunk = rnd.choice(fm["chunks"])
    mentioned = chunk.setdefault("entities", [])
    how = rnd.choice(["new", "declared elsewhere", "declared again"])
    if how == "new":
        n = s.fresh()
        entity = {"id": f"entity:probe-{n}", "name": f"Probe {n}", "type": "concept"}
        fm.setdefault("entities", []).append(entity)
        entity_id = entity["id"]
    else:
        here = {r["id"] for r in doc.records("entities")}
        elsewhere = sorted({r["id"]: r for p, d in s.docs.items() if p != path
                            for r in d.records("entities")
                            if r["id"] not in here and r["id"] not in mentioned}.items())
        if not elsewhere:
            return None
        entity_id, declaration = rnd.choice(elsewhere)
        if how == "declared again":  # the same declaration in a second document
            fm.setdefault("entities", []).append(copy.deepcopy(declaration))
    if entity_id not in mentioned:
        mentioned.append(entity_id)
    return f"mention {entity_id} ({how}) from {chunk['id']} in {path}", None


def op_remove_mention(s: Sources, rnd: random.Random, root: Path):
    path, doc = _pick_doc(s, rnd)
    chunks = [r for r in doc.edited()["chunks"] if len(r.get("entities") or []) >= 2]
    if not chunks:
        return None
    chunk = rnd.choice(chunks)
    removed = chunk["entities"].pop(rnd.randrange(len(chunk["entities"])))
    return f"remove the mention of {removed} from {chunk['id']} in {path}", None


def op_edit_fact(s: Sources, rnd: random.Random, root: Path):
    path, doc = _pick_doc(s, rnd)
    fm = doc.edited()
    n = s.fresh()
    facts = fm.get("facts")
    if facts and rnd.random() < 0.6:
        fact = rnd.choice(facts)
        fact["value"] = f"probe topic {n}"
        fact.pop("evidence", None)
        fact.pop("value_type", None)
        return f"change a declared fact of {path} to {fact['value']!r}", None
    fm.setdefault("facts", []).append({"namespace": "domain", "key": "topic",
                                       "value": f"probe topic {n}"})
    return f"declare a fact 'probe topic {n}' on {path}", None


def op_restore_document(s: Sources, rnd: random.Random, root: Path):
    """A deleted document comes back, byte for byte: at its old path or another."""
    if not s.deleted:
        return None
    old_path, doc = s.deleted.pop(rnd.randrange(len(s.deleted)))
    path = old_path if old_path not in s.docs and rnd.random() < 0.7 else \
        f"content/restored/r{s.fresh()}-{os.path.basename(old_path)}"
    s.docs[path] = doc
    return f"restore the deleted {old_path} as {path}", None


def op_add_document(s: Sources, rnd: random.Random, root: Path):
    index = 100 + s.fresh()
    doc = Doc(mock_document(index, MOCK_SEED))
    existing = sorted(r["id"] for d in s.docs.values() for r in d.records("chunks"))
    for record in doc.edited()["chunks"]:
        if "dependencies" in record:  # on a document that may not exist: on one that does
            record["dependencies"] = [rnd.choice(existing)]
    folder = rnd.choice(["content/000", "content/new", "content"])
    path = f"{folder}/notes-{index:05d}.ctxfst.md"
    s.docs[path] = doc
    if (root / folder).is_dir() and rnd.random() < 0.3:
        before = os.stat(root / folder)

        def action():  # the folder keeps its mtime, as `rsync -a` or `tar x` leave it
            yield
            os.utime(root / folder, ns=(before.st_atime_ns, before.st_mtime_ns))
        return f"add document {path} (its folder keeps its mtime)", action
    return f"add document {path}", None


def op_delete_document(s: Sources, rnd: random.Random, root: Path):
    path, doc = _pick_doc(s, rnd)
    del s.docs[path]
    s.deleted.append((path, doc))
    return f"delete document {path}", None


def op_rename_document(s: Sources, rnd: random.Random, root: Path):
    path, doc = _pick_doc(s, rnd)
    others = sorted(p for p in s.docs if p != path)
    if others and rnd.random() < 0.3:  # two documents swap their paths
        other = rnd.choice(others)
        s.docs[path], s.docs[other] = s.docs[other], doc

        def action():
            temporary = root / "content" / ".swap"
            os.rename(root / path, temporary)
            os.rename(root / other, root / path)
            os.rename(temporary, root / other)
            yield
        return f"swap documents {path} and {other}", action
    folder = rnd.choice([os.path.dirname(path), "content/moved", "content/moved/deeper"])
    target = f"{folder}/renamed-{s.fresh()}-{os.path.basename(path)}"
    s.docs[target] = s.docs.pop(path)

    def action():
        (root / target).parent.mkdir(parents=True, exist_ok=True)
        os.rename(root / path, root / target)  # a move keeps the inode, like `git mv`
        yield
    return f"rename {path} to {target}", action


def op_edit_skill(s: Sources, rnd: random.Random, root: Path):
    path = rnd.choice(s.skills())
    n = s.fresh()
    text, count = re.subn(r'(?m)^description: "(.*)"$',
                          lambda m: f'description: "Revised {n}: {m.group(1)}"', s.files[path])
    assert count == 1, path
    s.files[path] = text
    return f"edit the description of {path}", None


def op_edit_passage(s: Sources, rnd: random.Random, root: Path):
    if not s.passages():
        return None
    path = rnd.choice(s.passages())
    n = s.fresh()
    lines = s.files[path].split("\n")
    i = rnd.randrange(len(lines))
    changed = _same_length_change(lines[i], rnd) if rnd.random() < 0.5 else None
    lines[i] = changed if changed is not None else lines[i] + f" Passage edit {n}."
    s.files[path] = "\n".join(lines)
    return f"edit the content_path passage {path}", None


def _any_source(s: Sources, rnd: random.Random) -> str:
    return rnd.choice(sorted(s.rendered()))


def op_touch(s: Sources, rnd: random.Random, root: Path):
    path = _any_source(s, rnd)
    when = rnd.choice(["now", "future", "past"])

    def action():
        stamp = {"now": None, "future": os.stat(root / path).st_mtime + 3600,
                 "past": 1_000_000_000}[when]
        os.utime(root / path, None if stamp is None else (stamp, stamp))
        yield
    return f"touch {path} ({when}; same bytes)", action


def op_rewrite_same(s: Sources, rnd: random.Random, root: Path):
    path = _any_source(s, rnd)
    how = rnd.choice(["in place", "replaced"])

    def action():
        data = (root / path).read_bytes()
        if how == "in place":
            (root / path).write_bytes(data)
        else:  # as editors save: a new file (a new inode) renamed over the old one
            temporary = (root / path).with_name(".save.tmp")
            temporary.write_bytes(data)
            os.replace(temporary, root / path)
        yield
    return f"rewrite {path} with the same bytes ({how})", action


OPERATIONS = {
    "edit_sentence": op_edit_sentence, "edit_context": op_edit_context,
    "add_chunk": op_add_chunk, "delete_chunk": op_delete_chunk,
    "add_entity": op_add_entity, "remove_mention": op_remove_mention,
    "edit_fact": op_edit_fact, "add_document": op_add_document,
    "delete_document": op_delete_document, "restore_document": op_restore_document,
    "rename_document": op_rename_document,
    "edit_skill": op_edit_skill, "edit_passage": op_edit_passage,
    "touch": op_touch, "rewrite_same": op_rewrite_same,
}
BREAKS = ("undeclared entity", "unknown dependency", "yaml syntax", "chunk without body")


# --- the session: a project, its operations, its checks -----------------------------------

class Session:
    def __init__(self, base: Path, json_exports: bool = True) -> None:
        self.base = base
        self.root = base / "kb"
        self.json_exports = json_exports
        copy_example(self.root)
        generate(self.root, MOCK_DOCUMENTS, seed=MOCK_SEED)
        project(self.root, json_exports=json_exports)
        self.sources = Sources(self.root)
        assert self.sources.problems() == []
        self.log: list[str] = []
        self.pending = False
        self.check("the first build")

    def say(self, line: str) -> None:
        self.log.append(line)
        if currently_in_test_context():  # under Hypothesis: shown with a failing example
            note(line)

    def context(self) -> str:
        return "operations so far:\n  " + "\n  ".join(self.log)

    def check(self, what: str) -> None:
        code, out = build(self.root)
        assert code == 0, f"the incremental build after {what} failed\n{self.context()}\n{out}"
        assert_consistent(self.root)
        clean = clean_rebuild(self.root, self.base / "clean")
        found = differences(self.root, clean)
        assert not found, (f"after {what}, the incremental build differs from a clean "
                           f"rebuild in {found}\n{self.context()}\n"
                           f"{explain(self.root, clean, found)}")
        self.pending = False

    def apply(self, name: str, pick: int) -> str:
        """Apply operation name, choosing with pick, to the sources and the disk. A choice
        that would make the knowledge base invalid is drawn again; with none valid (rare),
        the operation becomes a touch."""
        rnd = random.Random(pick)
        for _ in range(25):
            trial = copy.deepcopy(self.sources)
            done = OPERATIONS[name](trial, rnd, self.root)
            if done is not None and not trial.problems():
                break
        else:
            name, trial = "touch", copy.deepcopy(self.sources)
            done = op_touch(trial, rnd, self.root)
        description, action = done
        steps = action() if action is not None else iter(())
        next(steps, None)  # the disk action's part before the sync
        self.sources = trial
        sync(self.sources, self.root)
        next(steps, None)  # and after it
        self.say(f"{name}: {description}")
        self.pending = True
        return name

    def break_and_fix(self, pick: int, kind: str | None = None, fix: str | None = None
                      ) -> None:
        """Make the knowledge base invalid: the build fails and leaves build/ as it was.
        Then fix it (put it back, or make the broken reference good) and build."""
        rnd = random.Random(pick)
        before = build_tree(self.root)
        broken = copy.deepcopy(self.sources)
        path, doc = _pick_doc(broken, rnd)
        kind = kind or rnd.choice(BREAKS)
        fix = fix or rnd.choice(["revert", "repair"])
        if kind == "yaml syntax":
            fix = "revert"
        n = broken.fresh()
        chunk = rnd.choice(doc.edited()["chunks"])
        if kind == "undeclared entity":
            chunk.setdefault("entities", []).append(f"entity:missing-{n}")
        elif kind == "unknown dependency":
            chunk.setdefault("dependencies", []).append(f"ref:missing-{n}")
        elif kind == "chunk without body":
            doc.edited()["chunks"].append({"id": f"note:bodiless-{n}", "context": "no body"})
        if kind == "yaml syntax":
            text = doc.render().replace("\nchunks:\n", "\nchunks: [unclosed\n", 1)
            assert text != doc.render()
        else:
            assert broken.problems(), kind  # the model agrees the sources are invalid
            text = doc.render()
        (self.root / path).write_text(text, encoding="utf-8")
        self.say(f"break: {kind} in {path} (then {fix})")
        code, out = build(self.root)
        assert code != 0, f"a build with {kind} in {path} succeeded\n{self.context()}\n{out}"
        assert "Traceback" not in out, out
        assert build_tree(self.root) == before, (
            f"the failed build changed build/\n{self.context()}")
        if fix == "repair" and kind == "undeclared entity":
            doc.edited().setdefault("entities", []).append(
                {"id": f"entity:missing-{n}", "name": f"Missing {n}", "type": "concept"})
            self.sources = broken
        elif fix == "repair" and kind == "unknown dependency":
            chunk["dependencies"].remove(f"ref:missing-{n}")
            if not chunk["dependencies"]:
                del chunk["dependencies"]
            self.sources = broken  # the frontmatter now written back as YAML
        elif fix == "repair" and kind == "chunk without body":
            doc.add_body(f"note:bodiless-{n}", "\nNow with a body.\n", len(doc.bodies()) - 1)
            self.sources = broken
        assert self.sources.problems() == []
        sync(self.sources, self.root)
        self.pending = True
        self.check(f"fixing {kind} in {path}")

    def switch_json_exports(self) -> None:
        """Turn the JSON exports off, or on again: the next build's artifacts are those
        of a clean build with the new setting (clean_rebuild copies it)."""
        self.json_exports = not self.json_exports
        project(self.root, json_exports=self.json_exports)
        self.say(f"switch: json_exports = {str(self.json_exports).lower()}")
        self.pending = True

    def step(self, name: str, pick: int, build_now: bool) -> None:
        if name == "break_and_fix":
            self.break_and_fix(pick)
            return
        if name == "switch_json_exports":
            self.switch_json_exports()
            if build_now:
                self.check("switching json_exports")
            return
        applied = self.apply(name, pick)
        if build_now:
            self.check(applied)

    def finish(self) -> None:
        if self.pending:
            self.check("the last operation")


# --- the tests ----------------------------------------------------------------------------

STEP_NAMES = [*OPERATIONS, "break_and_fix", "switch_json_exports"]
steps = st.lists(st.tuples(st.sampled_from(STEP_NAMES), st.integers(0, 2**16), st.booleans()),
                 min_size=3, max_size=6)


@settings(max_examples=15, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.booleans(), steps)
def test_incremental_builds_equal_clean_rebuilds(json_exports, sequence):
    with tempfile.TemporaryDirectory(prefix="ctxfst-incremental-") as base:
        session = Session(Path(base), json_exports)
        for name, pick, build_now in sequence:
            session.step(name, pick, build_now)
        session.finish()


@pytest.mark.parametrize("json_exports", [True, False])
def test_every_operation_in_one_sequence(tmp_path, json_exports):
    """Each operation at least once, whatever Hypothesis draws: one build after each,
    with the JSON exports on and off."""
    session = Session(tmp_path, json_exports)
    for pick, name in enumerate(STEP_NAMES):
        if name == "break_and_fix":
            for number, kind in enumerate(BREAKS):
                for fix in ("revert", "repair")[:1 if kind == "yaml syntax" else 2]:
                    session.break_and_fix(number, kind, fix)
            continue
        if name == "switch_json_exports":
            for _ in range(2):  # (off and on again, or on and off)
                session.switch_json_exports()
                session.check(name)
            continue
        assert session.apply(name, pick) == name, session.context()  # not a fallback
        session.check(name)
    # A batch of operations, built once.
    for pick, name in enumerate(["delete_document", "add_document", "edit_sentence",
                                 "rename_document", "add_chunk", "restore_document",
                                 "delete_chunk", "edit_fact"]):
        assert session.apply(name, 2000 + pick) == name, session.context()
    session.finish()


def test_the_comparison_sees_a_stale_artifact(tmp_path):
    """differences() is not blind: one stale chunk, one extra active fact, one manifest
    entry each show up."""
    session = Session(tmp_path)
    clean = clean_rebuild(session.root, tmp_path / "clean")
    assert differences(session.root, clean) == []
    chunks_path = session.root / "build/chunks.json"
    original = chunks_path.read_bytes()
    chunks = json.loads(original)
    chunks["chunks"][0]["content"] += " stale"
    chunks_path.write_text(json.dumps(chunks))
    assert differences(session.root, clean) == ["chunks.json"]
    assert "stale" in explain(session.root, clean, ["chunks.json"])
    chunks_path.write_bytes(original)

    facts_path = session.root / "build/semantic_facts.parquet"
    table = pq.read_table(facts_path)
    rows = table.to_pylist()
    inactive = [r for r in rows if not r["is_active"]]
    flipped = dict(rows[0], is_active=not rows[0]["is_active"]) if not inactive else \
        dict(inactive[0], is_active=True)
    rows[rows.index(inactive[0] if inactive else rows[0])] = flipped
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), facts_path)
    facts_said = ["semantic_facts.parquet (active facts)",
                  "semantic_facts.parquet (not the bytes of a whole write)"]
    assert differences(session.root, clean) == facts_said

    manifest_path = session.root / "build/manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["inputs"][0]["bytes"] += 1
    manifest_path.write_text(json.dumps(manifest))
    assert differences(session.root, clean) == [*facts_said,
                                                "manifest.json (less the facts artifacts)"]


# --- edits that keep timestamps -----------------------------------------------------------
# doit's own MD5Checker takes a file whose st_mtime equals the recorded one as unchanged;
# the build's IdentityChecker (build/doit_state.py) and the project walk
# (files._remembered_walk) trust the whole identity, ctime included (utime() moves it).


def test_an_edit_that_keeps_the_mtime_is_rebuilt(tmp_path):
    """As `cp -p`, `rsync -t`, `tar x` or an editor that keeps timestamps would edit."""
    root = tmp_path / "kb"
    copy_example(root)
    project(root)
    assert build(root)[0] == 0
    edited = root / "content/backend-frameworks.ctxfst.md"
    before = os.stat(edited)
    edited.write_text(edited.read_text().replace("Goroutines made", "Goroutines kept"))
    os.utime(edited, ns=(before.st_atime_ns, before.st_mtime_ns))
    code, out = build(root)
    assert code == 0, out
    clean = clean_rebuild(root, tmp_path / "clean")
    assert differences(root, clean) == []


def test_two_documents_with_equal_mtimes_that_swap_paths_are_rebuilt(tmp_path):
    """Files from one checkout, archive or `cp -p` often share an mtime; two of them swap
    paths (`git mv a t; git mv b a; git mv t b`), sizes and bytes all different."""
    root = tmp_path / "kb"
    copy_example(root)
    project(root)
    a = root / "content/backend-frameworks.ctxfst.md"
    b = root / "content/career-world-model.ctxfst.md"
    for path in (a, b):
        os.utime(path, (1_700_000_000, 1_700_000_000))
    assert build(root)[0] == 0
    os.rename(a, root / "content/swap.tmp")
    os.rename(b, a)
    os.rename(root / "content/swap.tmp", b)
    code, out = build(root)
    assert code == 0, out
    clean = clean_rebuild(root, tmp_path / "clean")
    assert differences(root, clean) == []


def test_a_document_added_to_a_folder_that_keeps_its_mtime_is_built(tmp_path):
    """In one process (a watch loop, a server, these tests), a document arrives as
    `rsync -a` or `tar x` would add it: the folder's mtime is put back afterwards. A new
    process builds it (its walk is not remembered); the same process does not."""
    root = tmp_path / "kb"
    copy_example(root)
    project(root)
    folder = root / "content"
    os.utime(folder, (1_700_000_000, 1_700_000_000))
    assert build(root)[0] == 0
    time.sleep(0.2)  # past the walk's racy window (files.RACY_NS): now it is remembered
    assert build(root)[0] == 0
    (folder / "notes-00000.ctxfst.md").write_text(mock_document(0, MOCK_SEED), encoding="utf-8")
    os.utime(folder, (1_700_000_000, 1_700_000_000))
    code, out = build(root)
    assert code == 0, out
    clean = clean_rebuild(root, tmp_path / "clean")
    assert differences(root, clean) == []


# A build killed right after its n-th write to the unit cache (validate saves the units,
# compile saves the chunk rows, then what the staged chunks.parquet was made from).
_KILLED_AT_SAVE = """
import os, signal, sys
from pathlib import Path
from ctxfst.pipeline import units
from ctxfst.pipeline.runner import run_build
stop_after, calls = int(sys.argv[2]), []
real = units.UnitStore.save
def save(self):
    real(self)
    calls.append(1)
    if len(calls) == stop_after:
        os.kill(os.getpid(), signal.SIGKILL)
units.UnitStore.save = save
sys.exit(run_build(Path(sys.argv[1]), []))
"""


# A build whose validation could not keep its units (the unit cache's first save of the
# build rolled back, as on a full disk) while its later saves go through.
# (with the row-group sizes of this module's in-process builds: small_row_groups)
_UNITS_NOT_SAVED = """
import sys
from pathlib import Path
from ctxfst.facts import build as facts_build, model as facts_model
from ctxfst.pipeline import chunk_rows, units
from ctxfst.pipeline.runner import run_build
(chunk_rows.CHUNK_GROUP_ROWS, facts_build.FACT_GROUP_ROWS, facts_build.HEAVY_EVIDENCE,
 facts_model.EVIDENCE_KEPT) = map(int, sys.argv[2:])
real, calls = units.UnitStore.save, []
def save(self):
    calls.append(1)
    if len(calls) == 1:
        self.db.rollback()
        self.pending.clear()
        self.removed.clear()
        return
    real(self)
units.UnitStore.save = save
sys.exit(run_build(Path(sys.argv[1]), []))
"""


def test_an_edit_whose_units_were_not_saved_is_compiled_all_the_same(tmp_path):
    """Compile compares the unit store's units with the documents it last compiled; where
    the store does not hold the units this validation made (their save failed), it must
    not trust that comparison, or the edited document's rows would be copied unchanged."""
    root = tmp_path / "kb"
    copy_example(root)
    project(root, json_exports=False)
    generate(root, MOCK_DOCUMENTS, seed=MOCK_SEED)
    assert build(root)[0] == 0
    edited = next((root / "content").rglob("notes-00001.ctxfst.md"))
    edited.write_text(edited.read_text().replace("\n</Chunk>", " Edited.\n</Chunk>", 1))
    from ctxfst.facts import model as facts_model
    from ctxfst.pipeline import chunk_rows

    sizes = (chunk_rows.CHUNK_GROUP_ROWS, facts_build.FACT_GROUP_ROWS,
             facts_build.HEAVY_EVIDENCE, facts_model.EVIDENCE_KEPT)
    done = subprocess.run([sys.executable, "-c", _UNITS_NOT_SAVED, str(root),
                           *map(str, sizes)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    clean = clean_rebuild(root, tmp_path / "clean")
    found = differences(root, clean)
    assert found == [], explain(root, clean, found)


def test_compile_compares_only_what_the_validation_changed_after_a_compile_of_its_units(
        tmp_path, monkeypatch):
    """Where the last compile compiled the very units this validation started from, only
    the documents it changed or dropped can differ from what that compile compiled:
    compile compares those alone (a look-up each, not two scans of every document), and
    the builds equal clean rebuilds; otherwise (a validation it did not compile from)
    it compares every document."""
    from ctxfst.pipeline.units import UnitStore

    root = tmp_path / "kb"
    copy_example(root)
    project(root, json_exports=False)
    generate(root, MOCK_DOCUMENTS, seed=MOCK_SEED)
    assert build(root)[0] == 0
    asked: list = []
    real = UnitStore.compiled_changes

    def compared(self, paths=None):
        asked.append(paths)
        return real(self, paths)

    monkeypatch.setattr(UnitStore, "compiled_changes", compared)
    edited = next((root / "content").rglob("notes-00001.ctxfst.md"))
    edited.write_text(edited.read_text().replace("\n</Chunk>", " Edited.\n</Chunk>", 1))
    gone = next((root / "content").rglob("notes-00002.ctxfst.md"))
    kept_bytes = gone.read_bytes()
    gone.unlink()
    assert build(root)[0] == 0
    # (and the example's document with content_path passages: checked every build)
    assert len(asked) == 1 and sorted(Path(path).name for path in asked[0]) == [
        "career-world-model.ctxfst.md", "notes-00001.ctxfst.md", "notes-00002.ctxfst.md"
    ], asked
    clean = clean_rebuild(root, tmp_path / "clean")
    found = differences(root, clean)
    assert found == [], explain(root, clean, found)
    gone.write_bytes(kept_bytes)  # back as it was: compiled again, not taken as kept
    assert build(root)[0] == 0
    clean = clean_rebuild(root, tmp_path / "clean-back")
    found = differences(root, clean)
    assert found == [], explain(root, clean, found)
    # a validation that compile did not run on (its build stopped at an error): the
    # next compile compares every document
    broken = next((root / "content").rglob("notes-00003.ctxfst.md"))
    kept = broken.read_text()
    broken.write_text(kept.replace("---", "--- [", 1))
    assert build(root)[0] != 0
    broken.write_text(kept.replace("\n</Chunk>", " Mended.\n</Chunk>", 1))
    asked.clear()
    assert build(root)[0] == 0
    assert asked == [None], asked
    clean = clean_rebuild(root, tmp_path / "clean-again")
    found = differences(root, clean)
    assert found == [], explain(root, clean, found)


@pytest.mark.parametrize("stop_after, switch", [(1, False), (2, False), (3, False),
                                                (2, True), (3, True)])
def test_a_build_killed_between_unit_cache_writes_recovers_exactly(tmp_path, stop_after,
                                                                   switch):
    """Units, chunk rows and the record of the staged chunks.parquet are written at
    different moments; a kill between any two leaves them out of step, and the next
    build must still equal a clean one (a unit cache that lies is never trusted). So
    too when the build killed had the JSON exports turned off (chunks.json no longer
    made): the build published before stays whole, JSON exports and all."""
    root = tmp_path / "kb"
    copy_example(root)
    project(root)
    generate(root, MOCK_DOCUMENTS, seed=MOCK_SEED)
    assert build(root)[0] == 0
    if switch:
        project(root, json_exports=False)
    edited = next((root / "content").rglob("notes-00001.ctxfst.md"))
    edited.write_text(edited.read_text().replace("version: 1", "version: 2", 1))
    moved = next((root / "content").rglob("notes-00002.ctxfst.md"))
    moved.rename(root / "content" / "moved.ctxfst.md")
    killed = subprocess.run([sys.executable, "-c", _KILLED_AT_SAVE, str(root), str(stop_after)],
                            capture_output=True, text=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert_consistent(root)  # the published build is the previous one, whole
    assert (root / "build/chunks.json").is_file()
    code, out = build(root)
    assert code == 0, out
    assert (root / "build/chunks.json").exists() is not switch
    clean = clean_rebuild(root, tmp_path / "clean")
    found = differences(root, clean)
    assert found == [], explain(root, clean, found)
