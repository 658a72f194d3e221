"""What the last publication recorded of the staged files (their stamps with the sha256
the manifest vouched for, and the rows it counted), so that the next build need not hash
or count them again while they keep those stamps."""


from __future__ import annotations

import os
from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..artifacts.io import digest_written
from ..files import file_stamp

if TYPE_CHECKING:
    from .units import UnitStore

PUBLISHED = "published"  # staged file -> its stamp and sha256 when last published
PUBLISHED_ROWS = "published_rows"  # sha256 -> rows, of the artifacts last published
LEDGER_STAMP = "ledger:"  # + a facts ledger file's name, in the PUBLISHED record


def remember_published(store: UnitStore, staging: Path, digests: dict[str, str],
                       rows: dict[str, int], ledger: Path, ledger_files: Collection[str]
                       ) -> None:
    """After publishing: each staged file's stamp now (publishing links it, which moves
    its ctime) with the sha256 the manifest vouched for, so that the next compile need
    not hash the previous chunk files again while they keep that stamp, and likewise the
    facts ledger's copies (LEDGER_STAMP + name: the next facts stage's prior state); and
    the rows the manifest counted in each artifact, by its sha256, so that the next one
    need not count them again in the artifacts that did not change (published_rows)."""
    stamps = {}
    places = [(name, staging / name, sha256) for name, sha256 in digests.items()]
    places += [(LEDGER_STAMP + name, ledger / name, digests[name])
               for name in ledger_files if name in digests]
    for name, path, sha256 in places:
        try:
            stamps[name] = [*file_stamp(os.lstat(path)), sha256]
        except OSError:
            continue
    store.put(PUBLISHED, stamps)
    store.put(PUBLISHED_ROWS, rows)
    store.save()


def as_published(published: Any, name: str, info: os.stat_result, sha256: str) -> bool:
    """Whether a staged file (its stat) is as the last build published it with this
    sha256 (`published`: the unit store's PUBLISHED record, remember_published), so that
    it need not be hashed again."""
    known = published.get(name) if isinstance(published, dict) else None
    return known == [*file_stamp(info), sha256]


def vouched(published: Any, path: Path, info: os.stat_result, sha256: str) -> bool:
    """Whether a staged file (its stat) holds the bytes of this sha256 without hashing
    them: this process wrote it (artifacts.io.digest_written), or it is as the last build
    published it (as_published)."""
    return digest_written(path, info) == sha256 or as_published(published, path.name, info,
                                                                sha256)


def read_as_published(published: Any, name: str, data: bytes, info: os.stat_result,
                      sha256: str) -> bool:
    """as_published() for bytes read from the file whose stat was taken before the
    read: they must also be the whole file (no writer in between)."""
    return as_published(published, name, info, sha256) and len(data) == info.st_size


def published_rows(store: UnitStore) -> dict[str, int]:
    """remember_published's rows, by sha256 (what does not read back is left out)."""
    found = store.value(PUBLISHED_ROWS)
    if not isinstance(found, dict):
        return {}
    return {sha256: rows for sha256, rows in found.items()
            if type(rows) is int and rows >= 0}
