"""`ctxfst contextualize`: fill missing chunk contexts through a language model
(Contextual Retrieval: the document and the passage in, a short situating context out).

Answers are cached by (provider, model, prompt version, document hash, chunk hash) in
.ctxfst/cache/, so a rerun asks nothing it asked before. Contexts are written into the
frontmatter as new lines (or in place of an empty value), everything else kept as it
was, comments and formatting included; the result is parsed again and must differ from
the original by the contexts alone. A file any of whose chunks failed is left untouched.
Never part of validation or the build.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ..diagnostics import Diagnostic, Severity, diag, ordered
from ..files import display_path
from .documents import Editable, read_editable
from .providers import Provider, ProviderError, Request
from .yamledit import EditRefused, FrontmatterEditor, scalar_text

PROMPT_VERSION = "1"
SYSTEM = ("You write short retrieval contexts for passages of a knowledge base. Answer "
          "with the context only.")
PROMPT = """<document title="{title}">
{document}
</document>

A passage of that document:
<passage>
{passage}
</passage>

In one or two sentences (at most {words} words), situate this passage within the \
document, so that a search finds it: what it is about and how it fits the rest. Write in \
the passage's language. Reply with the context only."""
CONTEXT_WORDS = 50
MAX_TOKENS = 200
MAX_DOCUMENT_CHARS = 48_000   # a longer document is cut to a window around the passage
MAX_CONTEXT_CHARS = 600
_TAG_LINE = re.compile(r"^[ \t]*(?:<Chunk\b[^>\n]*>|</Chunk>|%%[ \t]*chunk-(?:start|end)\b.*)"
                       r"[ \t]*$", re.IGNORECASE | re.MULTILINE)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
CACHE_SCHEMA = ("CREATE TABLE IF NOT EXISTS contexts (key TEXT PRIMARY KEY, "
                "context TEXT NOT NULL)")


@dataclass
class Job:
    path: str                 # the document, as shown
    index: int                # the chunk's place in chunks[]
    chunk_id: str
    key: str
    request: Request
    context: str | None = None
    cached: bool = False
    error: str | None = None


@dataclass
class Outcome:
    jobs: list[Job] = field(default_factory=list)
    written: list[str] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return any(job.error for job in self.jobs) or any(
            d.severity == Severity.ERROR for d in self.diagnostics)


def clean_context(reply: str) -> str:
    """A reply as a one-line context: quotes and control characters gone, cut at a word
    under MAX_CONTEXT_CHARS. ProviderError for an empty one."""
    text = " ".join(_CONTROL.sub(" ", reply).split()).strip("\"'“”「」 ")
    if not text:
        raise ProviderError("the reply is empty")
    if len(text) > MAX_CONTEXT_CHARS:
        cut = text.rfind(" ", 0, MAX_CONTEXT_CHARS)
        text = text[:cut if cut > MAX_CONTEXT_CHARS // 2 else MAX_CONTEXT_CHARS].rstrip()
    return text


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _document_text(doc) -> str:
    """The document's body with its chunk tags taken out: what the model reads."""
    from ..document.parse import split_frontmatter

    _, body_start, _ = split_frontmatter(doc.text, doc.path)
    body = "\n".join(doc.text.split("\n")[body_start:])
    return _TAG_LINE.sub("", body).strip()


def _window(document: str, passage: str) -> str:
    if len(document) <= MAX_DOCUMENT_CHARS:
        return document
    at = max(0, document.find(passage[:200]))
    start = max(0, min(at - MAX_DOCUMENT_CHARS // 2, len(document) - MAX_DOCUMENT_CHARS))
    return document[start:start + MAX_DOCUMENT_CHARS]


def load_documents(paths: list[Path]) -> tuple[list[Editable], list[Diagnostic]]:
    """The CtxFST documents under paths, read to be edited, and the errors of those that
    cannot be edited safely."""
    from ..document.kb import inputs_for
    from ..document.parse import looks_like_ctxfst

    documents, problems = [], []
    for item in read_editable(inputs_for(paths))[0]:
        doc = item.doc
        if not item.explicit and doc.frontmatter is None and not looks_like_ctxfst(doc.text):
            continue  # plain Markdown met in a folder
        errors = [d for d in doc.diagnostics if d.severity == Severity.ERROR]
        if errors or doc.frontmatter is None:
            problems.extend(errors)
            continue
        documents.append(item)
    return documents, problems


def plan_jobs(documents, provider: Provider) -> tuple[list[Job], list[Diagnostic]]:
    """A job per chunk with no context (missing, empty or blank) and a passage."""
    jobs: list[Job] = []
    notes: list[Diagnostic] = []
    for doc in documents:
        document = None
        for index, record in doc.chunks:
            if record.context.strip():
                continue
            body = doc.bodies.get(record.id)
            if body is None or not body.content.strip():
                continue  # a content_path passage: its file is no part of the document
            if document is None:
                document = _document_text(doc)
            title = doc.title or Path(doc.path).name
            prompt = PROMPT.format(title=title.replace('"', "'"),
                                   document=_window(document, body.content),
                                   passage=body.content, words=CONTEXT_WORDS)
            key = _sha(json.dumps([provider.identity, PROMPT_VERSION, _sha(document),
                                   _sha(body.content)]))
            jobs.append(Job(doc.path, index, record.id, key,
                            Request(SYSTEM, prompt, MAX_TOKENS)))
    return jobs, notes


class ContextCache:
    """key -> context, in a data-only sqlite table; a row that is not a plain short
    string is a miss (the cache may come from a stranger)."""

    def __init__(self, path: Path | None) -> None:
        from ..artifacts.cache import connect

        self.db = connect(path, CACHE_SCHEMA) if path is not None \
            else sqlite3.connect(":memory:")
        if path is None:
            self.db.execute(CACHE_SCHEMA)

    def get(self, key: str) -> str | None:
        try:
            row = self.db.execute("SELECT context FROM contexts WHERE key = ? AND "
                                  "typeof(context) = 'text' AND length(context) <= ?",
                                  (key, MAX_CONTEXT_CHARS)).fetchone()
        except sqlite3.Error:
            return None
        if row is None:
            return None
        try:
            return clean_context(row[0])
        except ProviderError:
            return None

    def put(self, key: str, context: str) -> None:
        try:
            with self.db:
                self.db.execute("INSERT OR REPLACE INTO contexts VALUES (?, ?)", (key, context))
        except sqlite3.Error:
            pass  # a read-only disk: the answer is still written into the document

    def close(self) -> None:
        self.db.close()


def run_jobs(jobs: list[Job], provider: Provider, cache: ContextCache, workers: int) -> None:
    """Answer every job: from the cache, else from the provider (workers at a time)."""
    asked: list[Job] = []
    for job in jobs:
        job.context = cache.get(job.key)
        job.cached = job.context is not None
        if not job.cached:
            asked.append(job)

    def ask(job: Job) -> None:
        try:
            job.context = clean_context(provider.complete(job.request))
        except ProviderError as error:
            job.error = provider.redact(str(error))

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        list(pool.map(ask, asked))
    for job in asked:
        if job.context is not None:
            cache.put(job.key, job.context)


def insert_contexts(raw: str, doc, contexts: dict[int, str]) -> str:
    """raw (the file's text) with each chunk's context written in: a new `context:`
    line, or in place of an empty one. EditRefused when that cannot be done cleanly."""
    editor = FrontmatterEditor(raw, doc)
    for index, context in sorted(contexts.items()):
        chunk = doc.frontmatter["chunks"][index]
        if "context" in chunk:
            if chunk["context"] not in (None, ""):
                raise EditRefused(f"chunk {index}: its context is not empty")
            editor.set_scalar(("chunks", index, "context"), context)
        else:
            editor.insert_key(("chunks", index), "context", scalar_text(context), context)
    return editor.text()


def contextualize(documents: list[Editable], provider: Provider, cache_path: Path | None,
                  workers: int = 4, dry_run: bool = False) -> Outcome:
    outcome = Outcome()
    jobs, notes = plan_jobs([item.doc for item in documents], provider)
    outcome.jobs, outcome.diagnostics = jobs, notes
    cache = ContextCache(cache_path)
    try:
        if dry_run:
            for job in jobs:
                job.context = cache.get(job.key)
                job.cached = job.context is not None
                job.context = None
            return outcome
        run_jobs(jobs, provider, cache, workers)
    finally:
        cache.close()
    by_doc: dict[str, list[Job]] = {}
    for job in jobs:
        by_doc.setdefault(job.path, []).append(job)
    editable = {item.doc.path: item for item in documents}
    for path, doc_jobs in by_doc.items():
        failed = [job for job in doc_jobs if job.error]
        if failed:
            outcome.diagnostics.append(diag(
                "CTX905", f"left untouched: the provider failed for {len(failed)} of its "
                f"{len(doc_jobs)} chunk(s) ({', '.join(j.chunk_id for j in failed)})", path))
            continue
        item = editable[path]
        contexts = {job.index: job.context for job in doc_jobs if job.context}
        try:
            new_text = insert_contexts(item.raw, item.doc, contexts)
        except (EditRefused, KeyError, IndexError, TypeError) as error:
            outcome.diagnostics.append(diag("CTX906", f"left untouched: {error}; add the "
                                            "contexts by hand", path))
            continue
        item.write(new_text)
        outcome.written.append(display_path(item.doc.fs_path))
    outcome.diagnostics = ordered(outcome.diagnostics)
    return outcome
