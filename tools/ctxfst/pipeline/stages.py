"""The build stages as plain functions over a project's Config.

Each stage reads its inputs from the staging folder (build/.staging), writes its
outputs there atomically, and records its status, timing and counts. The last stage
writes the manifest and publishes the staged artifacts into build/: a build that fails
or is killed before then leaves the published artifacts and their manifest as they were.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..artifacts.io import (
    Spliced,
    copy_atomic,
    indented_json_pieces,
    note_written,
    read_bytes_no_follow,
    read_json,
    recording_writes,
    sha256_file,
    sha256_file_and_size,
    write_atomic,
    write_json,
    write_pieces,
    written_so_far,
)
from ..artifacts.layout import (
    LEDGER_FILES,
    MANIFEST,
    MANIFEST_INPUTS,
    MANIFEST_VERSION,
    ledger_copy_name,
    result_path,
    staged,
    staging,
)
from ..config import Config
from ..diagnostics import Diagnostic
from ..document.source import MAX_FILE_BYTES
from ..files import file_identity
from ..version import __version__
from .doit_state import inputs_state
from .errors import BuildFailed
from .manifest_inputs import read_manifest_inputs, write_manifest_inputs
from .publish import publish, written_entry
from .run import BuildRun
from .table import BY_NAME, STAGES, artifacts_for, exported


def _record(config: Config, stage: str, started: float, **details: Any) -> None:
    """A stage's result: its status, time and counts, and what it wrote to the staging
    folder in this process (the manifest trusts those digests while the files keep the
    identity they had when written)."""
    folder = str(staging(config)) + os.sep
    outputs = {path[len(folder):]: entry for path, entry in written_so_far().items()
               if path.startswith(folder)}
    write_json(result_path(config, stage), {"stage": stage, "status": "success",
                                            "seconds": round(time.perf_counter() - started, 4),
                                            **details, "outputs": outputs})


def run_stage(run: BuildRun, stage) -> None:
    """Run a stage of the table, remembering the digests of what it writes. Staged files
    it no longer makes with these settings (a JSON export switched off) go first: they
    are never published again."""
    for name in set(stage.outputs) - set(stage.outputs_for(run.config)):
        staged(run.config, name).unlink(missing_ok=True)
    with recording_writes():
        globals()[stage.run](run)  # (the table names the functions of this module)


def describe(config: Config, stage) -> str:
    """What a stage of the table that just ran did, in one line: its summary filled from
    its recorded counts."""
    try:
        recorded = read_json(result_path(config, stage.name))
    except (OSError, ValueError):
        return f"{stage.name}: done"
    said = stage.summary.format_map(_Counts(recorded))
    return f"{stage.name}: {said}, {recorded.get('seconds', 0):.2f} s"


class _Counts(dict):
    """Recorded counts for a summary: numbers with thousands separators, "?" otherwise."""

    def __getitem__(self, key: str) -> str:
        value = self.get(key)
        return f"{value:,}" if type(value) is int else "?"


def _shown(config: Config, diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    """The diagnostics the project's [lint] settings and noqa comments leave shown."""
    from ..silence import apply as apply_selection
    from ..silence import project_text_reader

    return apply_selection(diagnostics, config.lint, config.root,
                           project_text_reader(config.root))


def _show(run: BuildRun, diagnostics: list[Diagnostic], files: int) -> None:
    run.write_findings(_shown(run.config, diagnostics), files)


def unit_store(config: Config):
    from .units import UnitStore

    return UnitStore(config.unit_store)


def _load_validated(run: BuildRun, counts: dict | None = None, reuse: bool = True):
    """Validate the knowledge base, typing only the documents that changed (pipeline/incremental);
    raise BuildFailed on any error. With reuse, a later stage gets what an earlier one
    validated while no input has changed (the validate stage itself always checks: it
    opens a run)."""
    from ..artifacts.cache import ParseCache
    from .incremental import check_incrementally

    config = run.config
    shared = run.validated
    if reuse and shared is not None and shared[2] and run.running:
        return shared[1]  # (this run's snapshot)
    refused: list[Diagnostic] = []  # unreadable folders, links out of the project
    inputs = run.inputs(refused)
    # (within doit's run its stages share the run's snapshot: no identities compared)
    identities = None if run.running else run.identities(inputs, refused)
    if reuse and shared is not None and identities and shared[0] == identities:
        return shared[1]
    run.validated = None
    digested: dict[str, tuple[str, str, int]] = {}

    def sha(path, relative: str, volatile: bool) -> str | None:
        """A document its unit does not vouch for (new, edited, touched, or with
        content_path passages): its digest is kept in its unit, and in the build's input
        digests only when it is checked every build (volatile)."""
        try:  # (a source over the limit is never read: parsing refuses it, CTX004)
            if volatile:
                digest, size = run.input_digests().sha256_and_size(
                    relative, path, run.stats.get(os.fspath(path)), MAX_FILE_BYTES)
            else:
                digest, size = sha256_file_and_size(path, MAX_FILE_BYTES)
        except OSError:
            return None  # unreadable or too large: parsing reports it
        digested[os.fspath(path)] = (relative, digest, size)  # (validation.json's stamp)
        return digest

    caches: list = []

    def open_parse_cache():
        caches.append(ParseCache(config.cache_dir / "parse.sqlite"))
        return caches[-1]

    # (on the ray engine, the documents the parse cache has no row for are parsed on
    # the cluster: cluster_engine())
    with cluster_engine(config) as engine:

        def check(store, regular_files=None):
            return check_incrementally(config, inputs, refused, sha, open_parse_cache, store,
                                       regular_files, digested,
                                       mapper=None if engine is None else engine.map,
                                       stamps=run.stamps if regular_files else None)

        store = unit_store(config)
        try:
            try:
                checked = check(store, run.stats)
            except (TypeError, ValueError, KeyError, IndexError, AttributeError):
                # Units that are not what this toolchain wrote (a damaged or edited cache; a
                # copied one is emptied on open): start over from the sources alone. A
                # failure then is a real one, and is raised.
                store.clear()
                digested.clear()  # (what the units gave is not trusted either)
                checked = check(store)
            except sqlite3.DatabaseError as error:  # damaged pages: a fresh file, computed again
                from ..artifacts.cache import busy, discard

                if busy(error):  # another process held it all the while: not damaged
                    raise BuildFailed(f"{config.unit_store} stayed locked by another process; "
                                      "run the build again") from None
                store.close()
                discard(config.unit_store)
                store = unit_store(config)
                digested.clear()
                checked = check(store)
        finally:
            store.close()
    run.input_digests().save()
    checked.digested = digested
    if counts is not None:
        counts.update(documents_parsed=sum(c.misses for c in caches),
                      documents_from_cache=sum(c.hits for c in caches), **checked.counts,
                      **_on_engine(config, "ray_parsed", engine and engine.mapped))
    errors = [d for d in checked.diagnostics if d.severity.value == "error"]
    if errors:
        _show(run, checked.diagnostics, checked.files)
        raise BuildFailed(f"{len(errors)} error(s) in the knowledge base")
    if identities or run.running:
        run.validated = (identities, checked, run.running)
    return checked


def _inputs(run: BuildRun, files: list[str], every_input: bool = False,
            digested: dict[str, tuple[str, str, int]] | None = None
            ) -> list[tuple[str, str, int]]:
    """(path, sha256, size) of each file (in Path order); a file is hashed again only
    when its identity (size, mtime, inode, ctime) changed since it was last hashed.
    every_input: files are all the project's inputs, so the digests of others (deleted
    files) are forgotten. digested: what a validation just found of some files
    (Checked.digested), taken as it is."""
    from ..files import ProjectRelative, path_order

    config = run.config
    relative_to_root = ProjectRelative(config.root)
    digests = run.input_digests()
    digested = digested or {}
    found = []
    for path in sorted(files, key=path_order):
        known = digested.get(path)
        if known is not None:
            relative, digest, size = known
        else:
            relative = relative_to_root(path)
            digest, size = digests.sha256_and_size(relative, path)
        found.append((relative, digest, size))
    if every_input:  # (the settings file is one too: the manifest lists it)
        kept = {relative for relative, _, _ in found}
        if config.config_file is not None:
            kept.add(relative_to_root(config.config_file))
        digests.keep_only(kept)
    digests.save()
    return found


def validate_sources(run: BuildRun) -> tuple[list[str], str]:
    """No file dependencies for doit to check one by one (at 100,000 documents that
    alone took 3 s of a no-op): the state is every input's identity in one digest
    (inputs_state), and what the walk refused, so that the stage runs and reports it.
    content_path files the last build read outside the walk (outside content/, or not
    Markdown) are inputs as well."""
    from ..artifacts.cache import recorded_passages
    from ..files import inside, plain_relative

    config = run.config
    scan = run.walk()
    sources = list(scan.paths)
    if config.config_file is not None:
        sources.append(str(config.config_file))
    refused = [f"{d.code} {d.path}" for d in scan.problems]
    passages = set()
    for relative in recorded_passages(config.unit_store):
        path = config.root / relative
        if plain_relative(relative) and inside(config.root, path) and path.is_file():
            passages.add(str(path))
    return [], inputs_state(run, sources + sorted(passages - set(sources)), refused)


def before_beside(run: BuildRun, stage) -> None:
    """What a stage forked beside the others takes from this process: the validated
    snapshot of a stage that reads the validation, made here when the validate stage
    was up to date (compile, next, takes it too), not in both processes: two
    validations of one build would each be counted, and the facts stage's next run
    would compare every source."""
    if "validation.json" in stage.reads:
        _load_validated(run)


def stage_validate(run: BuildRun) -> None:
    config = run.config
    started = time.perf_counter()
    counts: dict[str, int] = {}
    checked = _load_validated(run, counts, reuse=False)
    shown = _shown(config, checked.diagnostics)
    warnings = sum(1 for d in shown if d.severity.value == "warning")
    files = checked.files
    if shown:
        run.write_findings(shown, files)
    # The stamp changes exactly when a source changes: later stages depend on it alone.
    # (Settings are not in it: each stage tracks the settings it reads itself.)
    # content_path files are inputs too, wherever they are (the walk lists content/ only)
    walked = run.walk().paths
    known = set(walked)
    stamped = walked + [str(path) for path in (config.root / r for r in checked.passages)
                        if str(path) not in known and path.is_file()]
    inputs = _inputs(run, stamped, every_input=True, digested=checked.digested)
    # The manifest lists the settings file as an input too (the stamp leaves it out).
    settings = _inputs(run, [str(config.config_file)])[0] if config.config_file else None
    stamp = write_manifest_inputs(staged(config, MANIFEST_INPUTS), inputs, settings)
    write_json(staged(config, "validation.json"), {"toolchain": __version__,
                                                   "inputs": stamp}, compact=True)
    _record(config, "validate", started, files=files, warnings=warnings, **counts)


def stage_compile(run: BuildRun) -> None:
    from ..compile.chunks import CompileError
    from .chunk_rows import compile_chunks

    config = run.config
    started = time.perf_counter()
    checked = _load_validated(run)
    store = unit_store(config)
    exports = config.build.json_exports
    try:
        try:
            compiled = compile_chunks(checked, store, staged(config, "chunks.parquet"),
                                      staged(config, "chunks.json"), exports, let_go=True)
        except (ValueError, TypeError, KeyError):  # kept rows this toolchain did not write
            store.forget_rows()
            compiled = compile_chunks(checked, store, staged(config, "chunks.parquet"),
                                      staged(config, "chunks.json"), exports,
                                      reuse_layout=False, let_go=True)
        compiled.write(staged(config, "chunks.json"), staged(config, "chunks.parquet"))
        write_atomic(staged(config, "catalog.json"), compiled.catalog_json + b"\n")
        compiled.record(store)  # what the staged chunk files were made from
        checked.let_go_typed()  # (the facts stage types what it extracts, in its workers)
    except CompileError as error:
        _show(run, error.diagnostics, checked.files)
        raise BuildFailed("some chunk content could not be read") from None
    finally:
        store.close()
    write_json(staged(config, "extra-edges.json"),
               [edge.model_dump(exclude_none=True) for edge in checked.extra_edges])
    _record(config, "compile", started, documents=len(checked.units),
            chunks=compiled.chunks, entities=compiled.entities,
            documents_recompiled=compiled.recompiled, chunks_copied=compiled.copied,
            # (the manifest need not parse them to count their rows)
            artifact_rows={name: compiled.chunks for name in ("chunks.json", "chunks.parquet")
                           if exported(config, name)})


def skill_sources(run: BuildRun) -> tuple[list[str], str]:
    from ..skills import SKILL_FILE

    named = os.sep + SKILL_FILE  # (str.endswith: basename() of 100,000 paths took 0.08 s)
    return [path for path in run.walk().paths
            if path.endswith(named) or path == SKILL_FILE], ""


def stage_skills(run: BuildRun) -> None:
    from ..artifacts.parquet import write_parquet
    from ..kb import load_kb
    from ..skills import SKILL_FILE
    from ..skills.index import build_index, skills_table

    config = run.config
    started = time.perf_counter()
    inputs = [item for item in run.inputs()
              if os.path.basename(item.source.path) == SKILL_FILE]
    kb = load_kb(config.root, inputs)
    index = build_index(kb.skills, config.root)
    write_json(staged(config, "skill-index.json"), index)
    write_parquet(staged(config, "skills.parquet"), skills_table(index["skills"]))
    _record(config, "skills", started, skills=len(index["skills"]))


_PROFILED = "profiled"  # the unit store's record of what the staged profiles were made from
_PROFILE_FILES = ("entity-profiles.json", "entities.parquet")


def stage_profiles(run: BuildRun) -> None:
    """Entity profiles from the catalog and chunks.parquet (its columns read as needed:
    parsing the 66 MB chunks.json of 10,000 documents took twice as long as reading
    every column). The staged files are kept while the catalog, every chunk's mention
    columns and the text of the row groups the profiles quote are as they were (most
    edits change only a passage no profile quotes); otherwise only the profiles of the
    entities a change touches are made again, the others' rows copied from the staged
    entities.parquet (compile.profiles.Mentions says what a profile depends on)."""
    import hashlib

    import pyarrow as pa

    from ..artifacts.io import map_regular, read_regular
    from ..artifacts.parquet_splice import SpliceError
    from .published import PUBLISHED

    config = run.config
    started = time.perf_counter()
    files = [name for name in _PROFILE_FILES if exported(config, name)]
    catalog = read_regular(staged(config, "catalog.json"), follow_links=False)[0]
    # (mapped: an edit reads the mention columns and a few groups' text of it)
    chunks = map_regular(staged(config, "chunks.parquet"), follow_links=False)[0]
    try:
        groups = _ChunkGroups(chunks)
    except (SpliceError, pa.ArrowException):  # (read whole below, which says what is wrong)
        groups = None
    basis = {"catalog": hashlib.sha256(catalog).hexdigest(),
             "mentions": groups.mentions if groups is not None else None}
    store = unit_store(config)
    try:
        published = store.value(PUBLISHED)
        record = _profiles_record(store.value(_PROFILED), files)
        if record is not None and groups is not None and all(
                record[key] == value for key, value in basis.items()) and \
                all(map(groups.holds, record["quoted"])) and \
                _profiles_kept(config, record, published, files):
            count, made = record["entities"], 0
        else:
            store.remove(_PROFILED)  # (until the files below are written)
            store.save()
            count, made, made_from = _make_profiles(config, files, catalog, chunks, groups,
                                                    record, published)
            if made_from is not None:
                store.put(_PROFILED, {**basis, **made_from})
                store.save()
    finally:
        store.close()
    _record(config, "profiles", started, entities=count, entities_profiled=made,
            artifact_rows={name: count for name in files})


def _make_profiles(config: Config, files: list[str], catalog: bytes, chunks: bytes,
                   groups: _ChunkGroups | None, record: dict | None, published: Any
                   ) -> tuple[int, int, dict | None]:
    """Write the staged profile files: the touched profiles made again into the
    previous ones where the record describes them, else every profile. How many
    profiles they hold and how many were made, and what the record keeps of what they
    were made from (None: chunks.parquet's row groups could not be named)."""
    from ..artifacts.arrays import ParquetParts
    from ..artifacts.reader import parse_json
    from ..compile.profiles import (
        DANGLING_KEY,
        Mentions,
        dangling_json,
        entities_table,
        profiles_document,
        profiles_from_table,
    )

    entities = parse_json(catalog)
    keys = _catalog_keys(entities)
    reading: dict[int, tuple[str, list[int]]] = {}
    with ParquetParts(chunks) as table:
        index = Mentions(entities, table)
        previous = _previous_profiles(config, record, keys, published) \
            if groups is not None else None
        only = None if previous is None else _touched_profiles(
            config, index, record, keys, groups, previous.table, reading)
        made = index.profiles(only)
    if only == [] and (previous.table.schema.metadata or {}).get(DANGLING_KEY.encode()) == \
            dangling_json(index.dangling).encode() and \
            _profiles_kept(config, record, published, files):
        outputs = dict(record["outputs"])  # (the same bytes: not written again)
        layout = record.get("layout")
    else:
        fresh = entities_table(made.profiles, index.dangling)
        if only is not None:
            fresh = _spliced_profiles(previous.table, fresh, only)
        layout = _write_entities(staged(config, "entities.parquet"), fresh,
                                 previous if only is not None else None, only or [])
        if "entity-profiles.json" in files:
            write_json(staged(config, "entity-profiles.json"), profiles_document(
                made.profiles if only is None else profiles_from_table(fresh),
                index.dangling))
        written = written_so_far()
        outputs = {name: written[str(staged(config, name))]["sha256"] for name in files}
    if groups is None:
        return len(entities), len(made.profiles), None
    reading.update(zip(range(len(entities)) if only is None else only, zip(
        made.text_digests, made.groups, strict=True), strict=True))
    return len(entities), len(made.profiles), {
        **keys, "entities": len(entities), "outputs": outputs, "layout": layout,
        **_reading_record(record if only is not None else None, reading, groups,
                          len(entities))}


# Rows of entities.parquet per row group, about; an entity that many chunks mention is
# a group of its own (its lists are long), so that a change encodes again only the rows
# of the entities it touches, not the whole file.
ENTITY_GROUP_ROWS = 64
HEAVY_MENTIONS = 256


def _write_entities(path: Path, table, previous: _PreviousProfiles | None,
                    only: list[int]) -> dict | None:
    """entities.parquet in row groups cut by entity id (parquet_splice.heavy_apart_starts:
    each heavily mentioned entity alone): with the previous file and its layout, the
    groups of rows not in `only` (taken from it) are copied and the others encoded; else
    written whole. The same bytes either way. Its layout (parquet_splice.file_record),
    or None (a footer that cannot be spliced)."""
    import numpy as np

    from ..artifacts.io import write_pieces
    from ..artifacts.parquet import parquet_groups_bytes
    from ..artifacts.parquet_splice import heavy_apart_starts, spliced_or_encoded

    keys = table.column("entity_id").to_pylist()
    starts = heavy_apart_starts(keys, table.column("mention_count").fill_null(0).to_numpy(),
                                ENTITY_GROUP_ROWS, HEAVY_MENTIONS)
    touched = np.zeros(len(keys), bool)
    touched[only] = True
    pieces, layout = spliced_or_encoded(
        previous.data if previous is not None else None,
        previous.layout if previous is not None else None, keys, starts,
        lambda start, end: not touched[start:end].any(),
        lambda ranges: parquet_groups_bytes(table.schema, (
            table.slice(start, end - start) for start, end in ranges)))
    write_pieces(path, pieces)
    return layout


def _catalog_keys(entities: list[dict[str, Any]]) -> dict[str, Any]:
    """What the record keeps of the catalog: a digest of its ids and names in order (a
    name shows in the profiles of every entity sharing a chunk with it), and one of each
    entry (its own profile)."""
    import hashlib

    from ..artifacts.io import compact_json

    def digest(value: Any) -> str:
        return hashlib.blake2b(compact_json(value), digest_size=16).hexdigest()

    return {"names": digest([[entity["id"], entity.get("name", entity["id"])]
                             for entity in entities]),
            "entries": [digest(entity) for entity in entities]}


def _profiles_record(record: Any, files: list[str]) -> dict | None:
    """The profiles record when it has the shape this toolchain writes, else None."""
    if not isinstance(record, dict):
        return None
    count, quoted, outputs = record.get("entities"), record.get("quoted"), record.get("outputs")
    entries, mentions = record.get("entries"), record.get("mentions")
    texts = record.get("texts")
    if not (type(count) is int and isinstance(quoted, dict) and isinstance(outputs, dict)
            and isinstance(entries, list) and len(entries) == count
            and isinstance(texts, list) and len(texts) == count
            and isinstance(mentions, list) and isinstance(record.get("names"), str)
            and all(type(outputs.get(name)) is str for name in files)):
        return None
    for indices in quoted.values():
        if not (isinstance(indices, list) and all(
                type(index) is int and 0 <= index < count for index in indices)):
            return None
    return record


def _profiles_kept(config: Config, record: dict, published: Any, files: list[str]) -> bool:
    """Whether the staged files are those the record was written with; they are then
    vouched for to the manifest (artifacts.io.note_written): it need not hash them."""
    from .published import vouched

    for name in files:
        path, sha256 = staged(config, name), record["outputs"][name]
        try:
            info = os.lstat(path)
            if not (stat.S_ISREG(info.st_mode) and (vouched(published, path, info, sha256)
                                                    or sha256_file(path) == sha256)):
                return False
        except OSError:
            return False
    for name in files:
        note_written(staged(config, name), record["outputs"][name])
    return True


@dataclass
class _PreviousProfiles:
    table: Any          # the staged entities table, with its metadata
    data: bytes         # its file's bytes
    layout: Any = None  # the file's layout, as the record keeps it (_write_entities)


def _previous_profiles(config: Config, record: dict | None, keys: dict, published: Any
                       ) -> _PreviousProfiles | None:
    """The staged entities file (its table with its metadata, its bytes, and the layout
    the record keeps of it), when the record describes it and a catalog of the same ids
    and names in the same order (the profiles of the others are then rows of it)."""
    import pyarrow as pa

    from ..artifacts.arrays import ParquetParts
    from ..compile.profiles import entities_table
    from .chunk_rows import recorded_file

    if record is None or record["names"] != keys["names"] or \
            record["entities"] != len(keys["entries"]):
        return None
    data = recorded_file(staged(config, "entities.parquet"),
                         {"sha256": record["outputs"].get("entities.parquet")},
                         published=published)
    if data is None:
        return None
    try:
        with ParquetParts(data) as parts:  # (read_table goes through pyarrow.dataset)
            table = parts.read()
        metadata = table.schema.metadata
        table = table.cast(entities_table([]).schema.remove_metadata().with_metadata(metadata))
    except (ValueError, pa.ArrowException):
        return None
    return _PreviousProfiles(table, data, record.get("layout")) \
        if table.num_rows == record["entities"] else None


def _touched_profiles(config: Config, index, record: dict, keys: dict, groups: _ChunkGroups,
                      previous, reading: dict) -> list[int]:
    """The entities (catalog indices, ascending) whose profiles may differ from their
    rows in `previous`: named by a chunk whose mention columns changed (or, without the
    previous chunks.parquet, named in a row group whose mention columns are new, or
    mentioned by another number of chunks), or their catalog entry changed, or the
    text of the chunks they quote changed. The entities whose text was read again to
    tell are added to `reading` (Mentions.reading)."""
    before = set(record["mentions"])
    fresh = [group for group, digest in enumerate(groups.mentions) if digest not in before]
    gone = _vanished_rows(config, record["mentions"], set(groups.mentions))
    if gone is not None:
        touched = index.named_by_changed_rows(gone, fresh)
    else:  # by row group: every entity a new one names, and those mentioned less
        touched = index.named_in(fresh)
        touched |= index.counts_changed(previous.column("mention_count").to_numpy())
    touched.update(entity for entity, (old, new) in enumerate(zip(
        record["entries"], keys["entries"], strict=True)) if old != new)
    quoting = {entity for group, entities in record["quoted"].items()
               if not groups.holds(group) for entity in entities} - touched
    if quoting:  # the text they read, chunk by chunk, against what they read before
        reading.update(index.reading(sorted(quoting)))
        touched.update(entity for entity in quoting
                       if reading[entity][0] != record["texts"][entity])
    return sorted(touched)


def _vanished_rows(config: Config, digests: list[str], now: set[str]):
    """The MENTION_COLUMNS of the rows in the row groups of the chunks.parquet the
    profiles were made from (its groups' `digests`) that the staged one does not hold
    whole (`now`: its groups' digests), read from the last published chunks.parquet
    when it is that file (those groups' digests checked); else None."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ..artifacts.io import open_no_follow
    from ..artifacts.parquet_splice import SpliceError, group_digests
    from ..artifacts.reader import published_folder
    from ..compile.profiles import MENTION_COLUMNS

    vanished = [group for group, digest in enumerate(digests) if digest not in now]
    try:
        handle = open_no_follow(published_folder(config.build_dir) / "chunks.parquet")
    except (OSError, ValueError):
        return None
    with os.fdopen(handle, "rb") as file:
        def read(start: int, size: int) -> bytes:
            file.seek(start)
            return file.read(size)

        try:
            parquet = pq.ParquetFile(file)
            if parquet.metadata.num_row_groups != len(digests) or group_digests(
                    parquet.metadata, vanished, MENTION_COLUMNS, os.fstat(handle).st_size,
                    read) != [digests[group] for group in vanished]:
                return None
            return parquet.read_row_groups(vanished, columns=list(MENTION_COLUMNS)) \
                if vanished else parquet.schema_arrow.empty_table().select(
                    list(MENTION_COLUMNS))
        except (OSError, SpliceError, pa.ArrowException):
            return None


def _spliced_profiles(previous, fresh, only: list[int]):
    """The entities table of `previous` with the rows `only` replaced by `fresh`'s (in
    order), with fresh's metadata."""
    import numpy as np
    import pyarrow as pa

    order = np.arange(previous.num_rows)
    order[only] = previous.num_rows + np.arange(len(only))
    table = pa.concat_tables([previous.replace_schema_metadata(None),
                              fresh.replace_schema_metadata(None)])
    return table.take(pa.array(order)).combine_chunks().replace_schema_metadata(
        fresh.schema.metadata)


def _reading_record(record: dict | None, reading: dict[int, tuple[str, list[int]]],
                    groups: _ChunkGroups, count: int) -> dict[str, Any]:
    """The record's "texts" (each entity's Mentions.reading digest) and "quoted" (for
    each row group some profile reads, _ChunkGroups.key, the entities reading it): those
    of `record` (None: none) with the entities `reading` holds read now (their row
    groups are of this chunks.parquet, `groups`)."""
    digests = list(record["texts"]) if record is not None else [""] * count
    groups_of: list[list[str]] = [[] for _ in range(count)]
    if record is not None:
        for group, entities in record["quoted"].items():
            for entity in entities:
                groups_of[entity].append(group)
    for entity, (digest, read) in reading.items():
        digests[entity] = digest
        groups_of[entity] = [groups.key(group) for group in read]
    quoted: dict[str, list[int]] = {}
    for entity, keys in enumerate(groups_of):
        for key in keys:
            quoted.setdefault(key, []).append(entity)
    return {"texts": digests, "quoted": dict(sorted(quoted.items()))}


class _ChunkGroups:
    """The row groups of chunks.parquet (its bytes) as the profiles record knows them:
    by a digest of their mention columns, and of their text columns (hashed only when
    asked: the text is most of the file, 0.2 s of hashing at 100,000 documents)."""

    def __init__(self, data: bytes) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        from ..artifacts.parquet_splice import group_digests
        from ..compile.profiles import MENTION_COLUMNS

        self._data = data
        self._metadata = pq.ParquetFile(pa.BufferReader(data)).metadata
        self.mentions = group_digests(self._metadata, range(self._metadata.num_row_groups),
                                      MENTION_COLUMNS, len(data), self._read)
        self._place = {digest: group for group, digest in enumerate(self.mentions)}
        self._texts: dict[int, str] = {}

    def _read(self, start: int, size: int) -> bytes:
        return self._data[start:start + size]

    def key(self, group: int) -> str:
        """The group as the record names it: its mention and text digests."""
        from ..artifacts.parquet_splice import group_digests
        from ..compile.profiles import TEXT_COLUMNS

        if group not in self._texts:
            self._texts[group], = group_digests(self._metadata, [group], TEXT_COLUMNS,
                                                len(self._data), self._read)
        return f"{self.mentions[group]}:{self._texts[group]}"

    def holds(self, key: str) -> bool:
        """Whether a group of this file is the one the record names so (a group's
        mention columns hold its chunk ids: two groups never share that digest)."""
        group = self._place.get(key.partition(":")[0])
        return group is not None and self.key(group) == key


def embedding_cache(config: Config):
    from ..compile.embed import EmbeddingCache

    return EmbeddingCache(config.cache_dir / "embeddings.sqlite")


def stage_embed(run: BuildRun) -> None:
    import pyarrow.parquet as pq

    from ..artifacts.io import write_pieces
    from ..artifacts.vectors import write_vectors
    from ..compile.embed import EmbedStats, embed_texts, skill_text
    from .published import PUBLISHED

    config = run.config
    started = time.perf_counter()
    # The profiles' ids and texts, from entities.parquet: entity-profiles.json holds the
    # same profiles with every mentioned chunk (38 MB of JSON at 100,000 documents).
    # (ParquetFile: read_table imports pyarrow.dataset, 35 ms)
    profiles = pq.ParquetFile(staged(config, "entities.parquet")).read(
        columns=["entity_id", "representation"]).to_pylist()
    skills = pq.ParquetFile(staged(config, "skills.parquet")).read(
        columns=["node_id", "name", "description"]).to_pylist()
    settings = config.build
    cache = embedding_cache(config)
    stats = EmbedStats()
    store = unit_store(config)  # what the staged vectors were made from (owner-checked)
    previous = None  # the previous vectors file, open: its kept groups are copied from it
    try:
        try:
            with cluster_engine(config) as engine:
                vectors, state, unchanged, rows, previous = _chunk_vectors(
                    config, cache, stats, store, store.value(PUBLISHED), engine)
                # one call for both: one batch of cache misses, one model load at most
                matrix, model_id = embed_texts(
                    [p["representation"] for p in profiles] + [skill_text(s) for s in skills],
                    settings.embedding_model, cache, settings.embed_batch_size, stats,
                    device=config.embedding_device, engine=engine)
        except (ImportError, OSError, ValueError) as error:  # a model that cannot load
            raise BuildFailed(f"the embedding model {settings.embedding_model!r} could not "
                              f"be used: {error}") from None
        finally:
            cache.close()
        state["sha256"] = write_pieces(staged(config, "chunk_vectors.parquet"), vectors)
        store.put("embedded", state)  # after the file: a kill between leaves no false record
        store.save()
    finally:
        store.close()
        if previous is not None:
            os.close(previous)
    write_vectors(staged(config, "entity_vectors.parquet"), [p["entity_id"] for p in profiles],
                  matrix[:len(profiles)], model_id, "entity_vectors")
    write_vectors(staged(config, "skill_vectors.parquet"), [s["node_id"] for s in skills],
                  matrix[len(profiles):], model_id, "skill_vectors")
    _record(config, "embed", started, model_id=model_id,
            **_on_engine(config, "ray_actors", engine and engine.actors),
            texts=stats.texts + unchanged, unique_texts=stats.unique,
            cache_hits=stats.cache_hits, embedded=stats.embedded,
            unchanged=unchanged + stats.reused,
            model_loaded=stats.model_loaded,
            artifact_rows={"chunk_vectors.parquet": rows,
                           "entity_vectors.parquet": len(profiles),
                           "skill_vectors.parquet": len(skills)})


@contextlib.contextmanager
def cluster_engine(config: Config):
    """What parses the documents and embeds the texts no cache holds: this process and
    its forked workers (None), or a Ray cluster (`engine = "ray"`: a RayEngine,
    connected when a stage first has work for it). Its failures fail the build."""
    if config.engine != "ray":
        yield None
        return
    from ..compile.ray_engine import RayEngine, RayEngineError

    try:
        engine = RayEngine(config.ray_concurrency)
    except ImportError as error:
        raise BuildFailed(f"the ray engine cannot run here: {error}") from None
    try:
        yield engine
    except RayEngineError as error:
        raise BuildFailed(f"the ray engine failed: {error}") from None
    finally:
        engine.close()


def _on_engine(config: Config, name: str, count: int | None) -> dict[str, Any]:
    """A stage record's engine, and how much of its work (count, as name) the cluster
    did, where it did some."""
    return {"engine": config.engine, **({name: count} if count else {})}


_VECTOR_TEXTS = "vector-texts:"  # + a chunks.parquet group's digest: its rows' text keys


def _chunk_vectors(config: Config, cache, stats, store, published: Any, engine: Any = None
                   ) -> tuple[list, dict[str, Any], int, int, int | None]:
    """chunk_vectors.parquet with one row group per row group of chunks.parquet: a group
    whose chunks group holds the bytes it held at the last embed (the unit store's
    record) is copied from the previous file (artifacts/parquet_splice.py; by the
    kernel, as a span of it); the others are embedded and encoded, taking the vectors of
    texts the replaced groups held from the previous file (_replaced_vectors), the rest
    from the cache by text. The same bytes as embedding every group. Returns them as
    pieces to write end to end, the record to keep, how many vectors were copied, how
    many there are, and the previous file, open (the caller closes it once the pieces
    are written), or None. `published`: the unit store's PUBLISHED record (the previous
    file need not be hashed while it is as published). The chunks groups are found as
    _chunk_groups says."""
    import numpy as np
    import pyarrow as pa

    from ..artifacts.layout import VECTORS_SCHEMA
    from ..artifacts.parquet import parquet_bytes
    from ..artifacts.parquet_splice import (
        Group,
        assemble_pieces,
        copied_from,
        group_bytes,
        group_record,
        read_parts,
    )
    from ..artifacts.vectors import vectors_table
    from ..compile.embed import (
        cache_id_of,
        chunk_text,
        embed_texts,
        get_embedder,
        model_id_of,
        text_keys,
    )

    settings = config.build
    model_id = model_id_of(settings.embedding_model)
    made_by = [__version__, pa.__version__,
               cache_id_of(get_embedder(settings.embedding_model)), VECTORS_SCHEMA]
    recorded = store.value("embedded")
    spans, chunks, source = _chunk_groups(config, store.value("compiled"), published)
    digests = [digest for digest, _ in spans]
    # (the chunks file, when open, is closed once its groups are read)
    with source if source is not None else contextlib.nullcontext():
        previous, dim, found = _previous_vector_groups(config, made_by, recorded, published)
        handle = found[1] if found is not None else None
        try:
            # a kept group must hold as many rows as the chunks group it is filed under
            rows_of = dict(spans)
            kept = {digest: group for digest, group in previous.items()
                    if rows_of.get(digest) == group.rows}
            made: dict[str, list[str]] = {}  # each group embedded: its rows' text keys
            fresh_groups: list[Group] = []
            width = dim

            def embedded(indexes: list[int]):
                """The groups `indexes` of chunks.parquet embedded and encoded, as a file
                of their row groups (read_parts), and the vectors' width."""
                ids: list[str] = []
                texts: list[str] = []
                starts: list[int] = []
                for index in indexes:
                    table = chunks.read_row_group(index,
                                                  columns=["chunk_id", "context", "content"])
                    starts.append(len(ids))
                    ids.extend(table.column("chunk_id").to_pylist())
                    group_texts = [
                        chunk_text({"context": context or "", "content": content})
                        for context, content in zip(table.column("context").to_pylist(),
                                                    table.column("content").to_pylist(),
                                                    strict=True)]
                    made[digests[index]] = text_keys(group_texts)
                    texts.extend(group_texts)
                keys = [key for index in indexes for key in made[digests[index]]]
                known = _replaced_vectors(store, recorded, previous, set(digests), found,
                                          set(keys))
                matrix, model = embed_texts(texts, settings.embedding_model, cache,
                                            settings.embed_batch_size, stats, keys, known,
                                            config.embedding_device, engine)
                if not ids and width:  # every group kept: the footer needs the vectors' type
                    matrix = np.zeros((0, width), np.float32)
                return read_parts(parquet_bytes(
                    vectors_table(ids, matrix, model, "chunk_vectors"), dictionary=False,
                    group_starts=starts)), model, int(matrix.shape[1]) if matrix.ndim == 2 \
                    else 0

            # VECTORS_AT_ONCE rows' texts and vectors at a time: each part's row groups are
            # encoded and its texts and vectors let go (all 700,000 of 100,000 documents at
            # once took the build process to 4.7 GB, in parts 2.7 GB)
            for indexes in _vector_parts([(index, rows_of[digest]) for index, digest
                                          in enumerate(digests) if digest not in kept]):
                fresh, model_id, width = embedded(indexes)
                fresh_groups.extend(fresh.groups)
        except BaseException:
            if handle is not None:
                os.close(handle)
            raise
    for key in store.keys(_VECTOR_TEXTS) - {_VECTOR_TEXTS + digest for digest in digests}:
        store.remove(key)
    for digest, group_keys in made.items():
        store.put_blob(_VECTOR_TEXTS + digest, b"".join(map(bytes.fromhex, group_keys)))
    encoded = iter(fresh_groups)
    vectors, placed = assemble_pieces([kept[d] if d in kept else next(encoded) for d in digests],
                                      fresh.footer,
                                      copied_from(*found) if found is not None else group_bytes)
    # (its sha256 is added once it is written: write_pieces hashes what it writes)
    return vectors, {"made_by": made_by, "dim": width, "groups": digests, "parts": [
                         group_record(Group(b"", *fields)) for fields in placed]}, \
        sum(kept[d].rows for d in digests if d in kept), sum(rows for _, rows in spans), \
        handle


# Rows of chunk_vectors.parquet whose texts and vectors are held at once
VECTORS_AT_ONCE = 100_000


def _vector_parts(groups: list[tuple[int, int]]) -> list[list[int]]:
    """The groups (index, rows) to embed, in parts of up to VECTORS_AT_ONCE rows (a
    larger group alone), in order; one empty part where there are none (the file's
    footer is still made)."""
    parts: list[list[int]] = [[]]
    held = 0
    for index, rows in groups:
        if parts[-1] and held + rows > VECTORS_AT_ONCE:
            parts.append([])
            held = 0
        parts[-1].append(index)
        held += rows
    return parts


def _chunk_groups(config: Config, compiled: Any, published: Any) -> tuple[list, Any, Any]:
    """The staged chunks.parquet's row groups, each as (the sha256 of its bytes, its
    rows), the file, open as Parquet to read groups from, and what to close once done
    (or None). From compile's record of
    the file it wrote (`compiled`, the unit store's) while the file is that one: this
    process wrote it, or it is as the last build published it, with the sha256 the record
    names (reading the file and hashing its groups took 0.3 s at 100,000 documents);
    else from the file's bytes."""
    import hashlib

    import pyarrow as pa
    import pyarrow.parquet as pq

    from ..artifacts.arrays import arrow_reader
    from ..artifacts.io import open_no_follow, read_regular
    from ..artifacts.parquet_splice import SpliceError, group_spans
    from .chunk_rows import compiled_groups
    from .published import vouched

    path = staged(config, "chunks.parquet")
    try:
        handle = open_no_follow(path)
        try:
            info = os.fstat(handle)
            sha256 = compiled.get("sha256") if isinstance(compiled, dict) else None
            groups = compiled_groups(compiled, info.st_size) if isinstance(sha256, str) \
                and vouched(published, path, info, sha256) else None
            if groups is not None:
                source = os.fdopen(handle, "rb")
                handle = None  # (the file object has it)
                try:
                    return groups, pq.ParquetFile(pa.PythonFile(source)), source
                except BaseException:
                    source.close()
                    raise
        finally:
            if handle is not None:
                os.close(handle)
        data = read_regular(path, follow_links=False)[0]
        view = memoryview(data)  # (slices of bytes would copy the file once more)
        return [(hashlib.sha256(view[start:start + size]).hexdigest(), rows)
                for start, size, rows in group_spans(data)], pq.ParquetFile(
            arrow_reader(data)), None
    except (OSError, SpliceError, pa.ArrowException) as error:
        raise BuildFailed(f"{path}: {error}; run `doit clean`, then `doit`") from None


def _replaced_vectors(store, recorded: Any, previous: dict, current: set[str],
                      found: tuple | None, wanted: set[str]) -> dict[str, Any]:
    """The vectors, by text key, of the `wanted` texts that a group of the previous file
    (`previous`, by the digest of its chunks group; `found`, its bytes) no longer in
    chunks.parquet held: an edit rewrites a whole chunks group, most of whose texts are
    as they were (looking each up in the cache took 0.1 s a group of 1,500). Each such
    group's text keys are the unit store's (_VECTOR_TEXTS), kept when it was embedded;
    one whose keys do not fit its rows gives nothing."""
    import numpy as np
    import pyarrow as pa

    from ..artifacts.arrays import ParquetParts

    if found is None or not wanted:
        return {}
    replaced = [(index, digest) for index, digest in enumerate(recorded["groups"])
                if digest not in current]
    blobs = store.blobs([_VECTOR_TEXTS + digest for _, digest in replaced])
    places: dict[str, tuple[int, int]] = {}  # text key -> (group, row) in the old file
    for index, digest in replaced:
        blob = blobs.get(_VECTOR_TEXTS + digest)
        if blob is None or len(blob) != 32 * previous[digest].rows:
            continue
        for row in range(previous[digest].rows):
            key = blob[32 * row:32 * row + 32].hex()
            if key in wanted:
                places.setdefault(key, (index, row))
    if not places:
        return {}
    groups = sorted({group for group, _ in places.values()})
    with ParquetParts(found[0]) as previous_file:
        table = previous_file.read_row_groups(groups, columns=["vector"])
    first, rows = {}, 0  # each group's first row in what was read
    for group in groups:
        first[group] = rows
        rows += previous[recorded["groups"][group]].rows
    column = table.column("vector")
    if not (pa.types.is_fixed_size_list(column.type) and table.num_rows == rows):
        return {}  # (not as the record says: the vectors are made again)
    matrix = np.asarray(column.combine_chunks().flatten().to_numpy(zero_copy_only=False),
                        np.float32).reshape(rows, column.type.list_size)
    return {key: matrix[first[group] + row] for key, (group, row) in places.items()}


def _previous_vector_groups(config: Config, made_by: list[str], state: Any,
                            published: Any) -> tuple[dict, int, tuple | None]:
    """The previous staged chunk_vectors.parquet's row groups by the digest of the chunks
    group each was made from, and its dimension, when it is the file the last embed
    recorded (by sha256: hashed unless it is as published) with this toolchain, Arrow
    and model; else nothing. Its groups are those the record describes (checked against
    its bytes), its footer is not walked. Also the file as chunk_rows.recorded_file gives it
    (its bytes, open: the caller closes it, its groups are copied from it; and its
    stamp), or None with no groups."""
    from ..artifacts.parquet_splice import SpliceError, groups_from_records
    from .chunk_rows import recorded_file

    nothing: tuple[dict, int, tuple | None] = ({}, 0, None)
    if not (isinstance(state, dict) and state.get("made_by") == made_by
            and isinstance(state.get("groups"), list) and type(state.get("dim")) is int
            and all(isinstance(d, str) for d in state["groups"])
            and isinstance(state.get("sha256"), str)):
        return nothing
    found = recorded_file(staged(config, "chunk_vectors.parquet"), state, keep_open=True,
                           published=published)
    if found is None:
        return nothing
    try:
        groups = groups_from_records(found[0], state.get("parts"))
    except (ValueError, SpliceError):
        groups = None
    if groups is None or len(groups) != len(state["groups"]):
        os.close(found[1])
        return nothing
    return dict(zip(state["groups"], groups, strict=True)), state["dim"], found


def _read_vectors(path: Path):
    from ..artifacts.vectors import read_vectors

    try:
        return read_vectors(path)
    except ValueError as error:
        raise BuildFailed(f"{error}; run the embed stage again") from None


def stage_graph(run: BuildRun) -> None:
    from ..artifacts.parquet import write_parquet
    from ..compile.graph import (
        condition_edges,
        edges_table,
        extra_edge,
        graph_document,
        graph_node,
        merge_edges,
        similar_edges,
        skill_state_nodes,
    )
    from ..compile.profiles import read_entities

    config = run.config
    started = time.perf_counter()
    try:
        profiles, dangling = read_entities(staged(config, "entities.parquet"))
    except ValueError as error:
        raise BuildFailed(f"{error}; run the profiles stage again") from None
    ids, matrix, model_id = _read_vectors(staged(config, "entity_vectors.parquet"))
    if ids != [p["id"] for p in profiles]:
        raise BuildFailed("entity vectors do not match the entity profiles; run the embed "
                          "stage again")
    settings = config.build
    mentions = {p["id"]: set(p["mentioned_chunks"]) for p in profiles}
    try:
        similar, found_by = similar_edges(ids, matrix, settings.similar_top_k,
                                          settings.similar_min_score, mentions,
                                          settings.similar_exact_max)
    except ImportError as error:  # the approximate index's package
        raise BuildFailed(f"{len(ids):,} entities are over similar_exact_max "
                          f"({settings.similar_exact_max:,}): {error}") from None
    from ..skills.index import graph_nodes_and_links

    entity_nodes = [graph_node(p) for p in profiles]
    skill_nodes, skill_links = graph_nodes_and_links(
        read_json(staged(config, "skill-index.json"))["skills"], entity_nodes)
    nodes = entity_nodes + skill_nodes
    inferred = condition_edges(nodes)
    extra = [extra_edge(edge) for edge in read_json(staged(config, "extra-edges.json"))]
    nodes += skill_state_nodes(nodes, extra)
    edges = merge_edges(extra, skill_links, inferred, similar)
    document = graph_document(nodes, edges, model_id=model_id, top_k=settings.similar_top_k,
                              min_score=settings.similar_min_score, extra_count=len(extra),
                              inferred_count=len(inferred),
                              dangling=dangling)
    write_json(staged(config, "entity-graph.json"), document)
    write_parquet(staged(config, "edges.parquet"), edges_table(edges))
    counts: dict[str, int] = {}
    for edge in edges:
        counts[edge["relation"]] = counts.get(edge["relation"], 0) + 1
    _record(config, "graph", started, nodes=len(nodes), edges=len(edges),
            edges_by_relation=dict(sorted(counts.items())), similar=found_by,
            artifact_rows={"entity-graph.json": len(nodes), "edges.parquet": len(edges)})


def facts_sources(run: BuildRun) -> tuple[list[str], str]:
    """No files of its own; a configured extractor plugin's new version re-runs it."""
    config = run.config
    if not config.build.facts_extractors:
        return [], ""
    from ..facts.extractors import ExtractionError, extract_version, load_extractors

    try:
        return [], extract_version(load_extractors(config.build.facts_extractors))
    except ExtractionError as error:
        return [], str(error)  # the stage itself reports it


def stage_facts(run: BuildRun) -> None:
    """Semantic facts (docs/facts.md): extract changed sources, invalidate, write the delta."""
    import datetime
    from concurrent.futures import ThreadPoolExecutor

    from ..facts.build import run_facts
    from ..facts.extractors import ExtractionError
    from .published import LEDGER_STAMP, PUBLISHED, read_as_published

    config = run.config
    started = time.perf_counter()
    wall = datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")
    checked = _load_validated(run)
    store = unit_store(config)  # the memo of the facts ledger (facts/memo.py)
    published = store.value(PUBLISHED)
    try:
        # The ledger's copies (here, beside the stages that follow, not when publishing),
        # each in a thread from when its file is written, while the stage goes on: the
        # kernel copies and fsyncs them without the GIL (50 MB at 10,000 documents, 500
        # MB at 100,000). (The pool starts no thread before the first file is written:
        # the extraction's worker processes are forked before that.)
        with ThreadPoolExecutor(len(LEDGER_FILES)) as pool:
            copies = []
            outcome = run_facts(config.root, checked.kb, config.build, staging(config),
                                config.facts_ledger, checked, store,
                                may_let_go=run.beside.in_child,  # (the parent keeps its own)
                                vouched=lambda name, data, info, sha256: read_as_published(
                                    published, LEDGER_STAMP + name, data, info, sha256),
                                on_written=lambda name: copies.append(pool.submit(
                                    copy_atomic, staged(config, name),
                                    staged(config, ledger_copy_name(name)))))
            store.save()
            for copy in copies:
                copy.result()
    except ExtractionError as error:
        raise BuildFailed(str(error)) from None
    finally:
        store.close()
    if outcome.counts["failed"]:
        print(f"ctxfst: facts: {outcome.counts['failed']} source(s) could not be extracted; "
              "their previous facts are kept (see semantic_fact_extraction_runs.parquet)",
              file=sys.stderr)
    finished = datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")
    # Wall-clock times live here, not in the facts artifacts (they carry build_seq).
    rows = {"artifact_rows": outcome.artifact_rows} if outcome.artifact_rows else {}
    _record(config, "facts", started, started_at=wall, finished_at=finished,
            **outcome.counts, **rows)


def _rows(path: Path) -> int:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.ParquetFile(path).metadata.num_rows
    data = read_json(path)
    if isinstance(data, dict) and isinstance(data.get("counts"), dict):
        return sum(data["counts"].values())  # the facts delta: facts it changes
    if isinstance(data, dict):
        for key in ("chunks", "entities", "nodes"):
            if isinstance(data.get(key), list):
                return len(data[key])
    return len(data) if isinstance(data, list) else 1


def stage_manifest(run: BuildRun) -> None:
    from ..compile.embed import model_id_of

    config = run.config
    started = time.perf_counter()
    artifacts = []
    records = {stage: read_json(result_path(config, stage)) for stage in STAGES
               if not BY_NAME[stage].final and not BY_NAME[stage].opt_in
               and result_path(config, stage).is_file()}
    kept = staged(config, MANIFEST_INPUTS)
    _staged_digest(kept, MANIFEST_INPUTS, "validate", records.get("validate"))
    inputs = read_manifest_inputs(read_bytes_no_follow(kept))
    counted: dict[str, Any] = {}
    for record in records.values():
        rows = record.get("artifact_rows")
        counted.update(rows if isinstance(rows, dict) else {})
    from .published import published_rows, remember_published

    store = unit_store(config)
    try:
        counted_before = published_rows(store)  # sha256 -> rows, of the last manifest
    finally:
        store.close()
    lineages: dict[str, Spliced] = {}  # stage -> its artifacts' inputs
    made = artifacts_for(config)
    for name, (stage, version) in made.items():
        path = staged(config, name)
        sha256, size = _staged_digest(path, name, stage, records.get(stage))
        rows = counted.get(name, counted_before.get(sha256))
        if stage not in lineages:
            feeds: list[str | None] = []  # (None: every input)
            for item in BY_NAME[stage].lineage:
                if item == "inputs":
                    feeds.append(None)
                elif item == "inputs:extra-edges":
                    feeds.extend(inputs.edges)
                elif item == "inputs:skills":
                    feeds.extend(inputs.skills)
                else:  # an artifact, or the previous facts state (ledger:, docs/facts.md)
                    feeds.append(item)
            lineages[stage] = inputs.lineage(feeds)
        artifacts.append({"path": name, "stage": stage, "schema_version": version,
                          "sha256": sha256, "bytes": size,
                          "rows": rows if type(rows) is int else _rows(path),
                          "inputs": lineages[stage]})
    manifest = {
        "manifest_version": MANIFEST_VERSION,
        "toolchain": {"name": "ctxfst", "version": __version__},
        "config_hash": config.build.digest(),
        "settings": {"embedding_model": config.build.embedding_model,
                     "similar_top_k": config.build.similar_top_k,
                     "similar_min_score": config.build.similar_min_score,
                     "extra_edges": list(config.build.extra_edges),
                     "json_exports": config.build.json_exports},
        "model": {"id": model_id_of(config.build.embedding_model)},
        "inputs": inputs.inputs,
        "artifacts": artifacts,
    }
    write_pieces(staged(config, MANIFEST), indented_json_pieces(manifest))
    _record(config, "manifest", started, artifacts=len(artifacts))
    records["manifest"] = read_json(result_path(config, "manifest"))
    # (what each stage wrote is in the manifest: the digests and file identities stay here)
    results = {"toolchain": __version__, "stages": [
        {key: value for key, value in records[stage].items() if key != "outputs"}
        for stage in STAGES if stage in records]}
    publish(config, [*made, MANIFEST], results)
    store = unit_store(config)
    try:
        remember_published(store, staging(config), {item["path"]: item["sha256"]
                                                    for item in artifacts},
                           {item["sha256"]: item["rows"] for item in artifacts},
                           config.facts_ledger, LEDGER_FILES)
    finally:
        store.close()


def _staged_digest(path: Path, name: str, stage: str, record: Any) -> tuple[str, int]:
    """sha256 and size of a staged artifact: as its stage recorded them while the file
    keeps the identity it had then, else read again, and then it must match what was
    recorded (a published artifact edited in place edits its staged twin: they are one
    file)."""
    entry = written_entry(record, name)
    info = os.stat(path)
    if entry is None:
        return sha256_file(path), info.st_size
    if entry["identity"] == file_identity(info):
        return entry["sha256"], info.st_size
    found = sha256_file(path)
    if found != entry["sha256"]:
        raise BuildFailed(f"{path} changed after the {stage} stage wrote it (was an "
                          "artifact in build/ edited in place?); run `doit clean`, then "
                          "`doit`")
    return found, info.st_size


def stage_report(run: BuildRun) -> None:
    """build/report.html from the build just published (its world model from the build
    alone, not from a world state: the same sources give the same page)."""
    from ..report import DEFAULT_NAME, ReportError, make_report

    config = run.config
    started = time.perf_counter()
    out = config.build_dir / DEFAULT_NAME
    try:
        page, counts = make_report(config, out, with_world_state=False)
    except ReportError as error:
        raise BuildFailed(str(error)) from None
    write_atomic(out, page)
    _record(config, "report", started, bytes=len(page), **counts)
