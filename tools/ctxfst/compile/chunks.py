"""Compile a validated knowledge base into chunk and entity records (the export).

chunks.json keeps the upstream export shape ({"entities": [...], "chunks": [...]}),
so consumers of upstream CtxFST read it unchanged; chunks.parquet holds the same rows
in columns.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..artifacts.io import compact_json_text
from ..diagnostics import Diagnostic, diag
from ..document.model import SCHEMA_VERSION, ChunkRecord, ParsedDocument
from ..document.rules import passage_file
from ..document.source import Source, load_text

CHUNKS_SCHEMA_VERSION = "1.0.0"
# Export field order: upstream's required fields first, then its optional ones.
_CHUNK_ORDER = ("id", "context", "content", "tags", "source", "entities", "state_refs",
                "preconditions", "postconditions", "created_at", "version", "priority",
                "dependencies", "type", "content_path")
_ENTITY_ORDER = ("id", "name", "type", "aliases", "preconditions", "postconditions",
                 "related_skills")
_COLUMNS = ("tags", "entities", "state_refs", "dependencies")


class CompileError(Exception):
    def __init__(self, diagnostics: list[Diagnostic]) -> None:
        super().__init__(f"{len(diagnostics)} error(s)")
        self.diagnostics = diagnostics


def _ordered(data: dict[str, Any], order: tuple[str, ...]) -> dict[str, Any]:
    out = {key: data[key] for key in order if key in data}
    out.update((key, data[key]) for key in sorted(data) if key not in out)
    return out


def _content(doc: ParsedDocument, record: ChunkRecord, errors: list[Diagnostic],
             root: Path) -> tuple[str, int, int]:
    body = doc.bodies.get(record.id)
    if body is not None:
        return body.content, body.line, body.end_line
    pos = doc.source_map.value(("chunks", [i for i, r in doc.chunks if r is record][0], "id"))
    target, why = passage_file(doc, record, root)
    if target is None:
        errors.append(diag("CTX309", f"content_path {record.content_path!r} {why}",
                           doc.path, pos.line, pos.column))
        return "", pos.line, pos.line
    text, problem = load_text(Source(str(target), target))  # size-limited, no FIFO
    if problem is not None:
        errors.append(diag("CTX309", f"content_path '{record.content_path}': {problem.message}",
                           doc.path, pos.line, pos.column))
        return "", pos.line, pos.line
    return (text or "").strip(), pos.line, pos.line


def document_rows(doc: ParsedDocument, relative: str, root: Path,
                  errors: list[Diagnostic]) -> list[dict[str, Any]]:
    """One document's chunk rows, in its own order: a function of the document alone
    (and its content_path files), so a build keeps them for unchanged documents."""
    rows = []
    for _index, record in doc.chunks:
        content, line_start, line_end = _content(doc, record, errors, root)
        data = record.model_dump(exclude_none=True, exclude_unset=True)
        data.update(content=content, source=relative)
        data.setdefault("context", "")
        data.setdefault("tags", [])
        data["line_start"], data["line_end"] = line_start, line_end
        # The build's own columns, as content and source: never a chunk field's value.
        data.pop("document_title", None)
        if doc.title:
            data["document_title"] = doc.title
        rows.append(_ordered(data, _CHUNK_ORDER))
    return rows


def entity_rows(merged: dict[str, dict], declared_in: dict[str, list[str]]
                ) -> list[dict[str, Any]]:
    """The merged entity catalog, sorted by id, each with the documents declaring it."""
    entities = []
    for entity_id in sorted(merged):
        data = dict(merged[entity_id])
        for key in ("preconditions", "postconditions", "related_skills"):
            if not data.get(key):
                data.pop(key, None)
        data["declared_in"] = sorted(set(declared_in[entity_id]))
        entities.append(_ordered(data, _ENTITY_ORDER))
    return entities


def row_text(row: dict[str, Any]) -> str:
    """A row as chunks.json writes it (compact), so rows kept as text splice exactly."""
    return compact_json_text(row)


def chunks_json(entities_json: bytes, rows: list) -> list:
    """chunks.json from the entity rows (their list as compact JSON, as catalog.json
    holds it) and the chunk rows' UTF-8 texts in id order, as pieces to write end to end
    (artifacts.io.write_pieces): the bytes json_bytes({"schema_version", "entities",
    "chunks"}, compact=True) gives, without a parse of every row. A row may be a Span
    of the previous file (copied as it lies)."""
    from ..artifacts.io import Span

    head = row_text({"schema_version": CHUNKS_SCHEMA_VERSION})[:-1] + ',"entities":'
    # The rows' own texts, not joined: a first build would hold them twice (66 MB at
    # 10,000 documents).
    pieces: list = [head.encode("utf-8"), entities_json, b',"chunks":[']
    for index, row in enumerate(rows):
        if index:
            pieces.append(b",")
        pieces.append(row)
    pieces.append(b"]}\n")
    return [piece for piece in pieces if isinstance(piece, Span) or piece]


def _extra_json(extra: dict[str, Any]) -> str:
    """A row's fields beyond the columns, as the `extra` column holds them ("{}" for the
    most rows, which have none, without an encoder made for each)."""
    return json.dumps(extra, ensure_ascii=False, sort_keys=True) if extra else "{}"


def chunks_table(rows: list[dict[str, Any]]):
    import pyarrow as pa

    known = set(_CHUNK_ORDER) | {"line_start", "line_end", "document_title"}

    def column(name: str) -> list:
        return [row.get(name) for row in rows]

    arrays = {
        "chunk_id": pa.array(column("id"), pa.string()),
        "source": pa.array(column("source"), pa.string()),
        "line_start": pa.array(column("line_start"), pa.int32()),
        "line_end": pa.array(column("line_end"), pa.int32()),
        "document_title": pa.array(column("document_title"), pa.string()),
        "context": pa.array(column("context"), pa.string()),
        "content": pa.array(column("content"), pa.string()),
    }
    for name in _COLUMNS:
        arrays[name] = pa.array([row.get(name, []) for row in rows], pa.list_(pa.string()))
    arrays.update({
        "created_at": pa.array(column("created_at"), pa.string()),
        "version": pa.array(column("version"), pa.int64()),
        "priority": pa.array(column("priority"), pa.string()),
        "type": pa.array(column("type"), pa.string()),
        "content_path": pa.array(column("content_path"), pa.string()),
        "extra": pa.array([_extra_json({k: v for k, v in row.items() if k not in known})
                           for row in rows], pa.string()),
    })
    return pa.table(arrays).replace_schema_metadata({
        "ctxfst.artifact": "chunks", "ctxfst.schema_version": CHUNKS_SCHEMA_VERSION,
        "ctxfst.document_schema_version": SCHEMA_VERSION})
