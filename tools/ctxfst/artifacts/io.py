"""Deterministic, atomic artifact I/O."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import secrets
import shutil
import stat
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..files import file_identity, file_stamp

_written: list[dict[str, dict[str, Any]]] = []  # open recording_writes() scopes
# Every file this process wrote inside a scope: path -> (identity, sha256).
_digests: dict[str, tuple[list[int], str]] = {}


@contextlib.contextmanager
def recording_writes():
    """Within it, write_atomic remembers what it wrote: path -> sha256, size, mtime and
    inode of the file (the digest of bytes already in memory, so that a reader that
    finds the same identity need not read the file again)."""
    written: dict[str, dict[str, Any]] = {}
    _written.append(written)
    try:
        yield written
    finally:
        _written.remove(written)


def written_so_far() -> dict[str, dict[str, Any]]:
    """What the innermost recording_writes() scope has seen written ({} outside one)."""
    return _written[-1] if _written else {}


def write_atomic(path: Path, data: bytes, sha256: str | None = None
                 ) -> Callable[[], str]:
    """Write data to path so that readers see the old file or the new one, never half.

    Temp file in the same directory, fsync, rename, fsync the directory. A new file gets
    the mode the umask gives (the kernel applies it: mkstemp's 0600 would not); a file
    rewritten keeps its permissions. sha256: data's, when the caller has it already.
    Returns how to get data's sha256 (computed once, when first asked).
    """
    def write(out) -> Callable[[], str]:
        if sha256 is None and _written and len(data) >= HASH_BESIDE_BYTES:
            hashed = _hash_beside([data])  # (asked for below: recording_writes())
            out.write(data)
            return hashed
        out.write(data)
        return lambda: sha256 or hashlib.sha256(data).hexdigest()  # (hashed when asked)

    return _replace(path, write)


# From this size on, a file's sha256 is computed in a thread while it is written and
# synced: hashlib lets go of the GIL over a large buffer, and so does the kernel's I/O.
HASH_BESIDE_BYTES = 1 << 22


_HASHED_ALONE = 1 << 16  # a buffer this large is hashed as it is


def _hash_beside(buffers: list) -> Callable[[], str]:
    """The sha256 of the buffers (or FileSpans, read) put end to end, computed in a
    thread; the function returned waits for it. (The thread ends by itself: one whose
    caller failed is left to finish, holding nothing.)"""
    digest = hashlib.sha256()
    failed: list[OSError] = []

    def run() -> None:
        # Small buffers (a first build's chunks.json is 140,000 rows) are hashed in
        # batches: hashlib holds the GIL over less than 2 KB, and the writer waits.
        small = bytearray()
        for buffer in buffers:
            if isinstance(buffer, FileSpan):
                digest.update(small)
                small.clear()
                try:
                    for block in buffer.blocks():
                        digest.update(block)
                except OSError as error:
                    failed.append(error)
                    return
                continue
            if len(buffer) >= _HASHED_ALONE:
                if small:
                    digest.update(small)
                    small.clear()
                digest.update(buffer)
                continue
            small += buffer
            if len(small) >= _HASHED_ALONE:
                digest.update(small)
                small.clear()
        digest.update(small)

    thread = threading.Thread(target=run, name="ctxfst-sha256", daemon=True)
    thread.start()

    def result() -> str:
        thread.join()
        if failed:
            raise failed[0]
        return digest.hexdigest()

    return result


@dataclass(frozen=True)
class Span:
    """Bytes of an open file that a file being written repeats at this point: the kernel
    copies them (copy_file_range), with no pass through this process."""

    fd: int
    offset: int  # where they lie in that file
    data: memoryview  # the same bytes, for the digest (and written where no copy can be)
    stamp: tuple = ()  # file_stamp() of the file when `data` was read from it


@dataclass
class FileSpan:
    """Bytes of a file this process made to hold them (a temporary file, its own): the
    kernel copies them, and they are hashed by reading them a block at a time, never
    mapped, so they are never held in this process's memory. It keeps `file` open."""

    file: Any  # an open binary file
    offset: int
    size: int

    def blocks(self, block: int = 1 << 20) -> Iterable[bytes]:
        at, end = self.offset, self.offset + self.size
        while at < end:
            data = os.pread(self.file.fileno(), min(block, end - at), at)
            if not data:
                raise OSError(errno.EIO, "a temporary file ended early")
            yield data
            at += len(data)


def write_pieces(path: Path, pieces: Iterable[bytes | memoryview | Span | FileSpan]) -> str:
    """write_atomic() of the pieces put end to end; their sha256. A file of mostly
    unchanged spans of another (the previous chunks.json) costs a copy in the kernel,
    some five times faster here than writing the bytes."""
    pieces = list(pieces)

    def write(out) -> Callable[[], str]:
        # (hashed beside the copies, which the kernel does)
        digest = _hash_beside([piece.data if isinstance(piece, Span) else piece
                               for piece in pieces])
        sources = {}
        for piece in pieces:
            if isinstance(piece, Span):
                out.flush()
                _copy_span(piece, out.fileno())
                sources[piece.fd] = piece.stamp
            elif isinstance(piece, FileSpan):
                out.flush()
                copied = _kernel_copy(piece.file.fileno(), piece.offset, piece.size,
                                      out.fileno())
                for block in FileSpan(piece.file, piece.offset + copied,
                                      piece.size - copied).blocks():
                    out.write(block)  # (what the kernel did not copy)
            else:
                out.write(piece)
        # A source written since its bytes were read (in place: a published twin) gave
        # the kernel other bytes than those hashed: all are written from memory instead.
        if any(file_stamp(os.fstat(fd)) != stamp for fd, stamp in sources.items()):
            out.seek(0)
            out.truncate()
            for piece in pieces:
                if isinstance(piece, FileSpan):
                    for block in piece.blocks():
                        out.write(block)
                else:
                    out.write(piece.data if isinstance(piece, Span) else piece)
        return digest

    return _replace(path, write)()


def copy_atomic(source: Path, path: Path) -> None:
    """write_atomic() of source's bytes (a regular file, not a link), copied by the kernel
    where it can."""
    handle = open_no_follow(source)
    try:
        size = os.fstat(handle).st_size

        def write(out) -> Callable[[], str]:
            out.flush()
            copied = _kernel_copy(handle, 0, size, out.fileno())
            while True:
                block = os.pread(handle, 1 << 20, copied)
                if not block:
                    break
                out.write(block)
                copied += len(block)
            # A source this process wrote, unchanged since (checked after the copy), has
            # the digest noted then; else the copy is hashed, when asked.
            known = digest_written(source, os.fstat(handle))
            return lambda: known or sha256_file(path)

        _replace(path, write)
    finally:
        os.close(handle)


def _copy_span(span: Span, into: int) -> None:
    view = span.data[_kernel_copy(span.fd, span.offset, len(span.data), into):]
    while view:  # (what the kernel did not copy)
        view = view[os.write(into, view):]


def _kernel_copy(source: int, offset: int, size: int, into: int) -> int:
    """Copy size bytes of source from offset to into's position, in the kernel; how many
    were copied (fewer where the file is shorter, none on a file system or system that
    cannot): the caller writes the rest."""
    copied = 0
    try:
        while copied < size:
            done = os.copy_file_range(source, into, size - copied, offset + copied)
            if done == 0:
                break
            copied += done
    except (OSError, AttributeError):  # another file system, or no such call here
        pass
    return copied


def _replace(path: Path, write: Callable[[Any], Callable[[], str]]) -> Callable[[], str]:
    """Put a new file at path atomically: write(binary file) fills it and returns how to
    get the sha256 of what it wrote (asked only within recording_writes(), which
    remembers it), which is returned."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        existing = os.lstat(path)
        mode = stat.S_IMODE(existing.st_mode) & 0o777 if stat.S_ISREG(existing.st_mode) \
            else None
    except FileNotFoundError:
        mode = None
    handle, temp = _create_temp(path)
    try:
        with os.fdopen(handle, "wb") as out:
            if mode is not None:
                os.fchmod(out.fileno(), mode)
            sha256 = _once(write(out))
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except FileNotFoundError:
            pass
        raise
    sync_folder(path.parent)
    if _written:
        note_written(path, sha256())
    return sha256


def note_written(path: Path, sha256: str) -> None:
    """Within recording_writes(): path holds bytes of this sha256, as written now or as
    checked unchanged (a stage that keeps its output vouches for it as if it wrote it),
    while it keeps its present identity."""
    entry = {"sha256": sha256, "identity": file_identity(os.stat(path))}
    for written in _written:
        written[str(path)] = entry
    _digests[str(path)] = (entry["identity"], entry["sha256"])


def _once(compute: Callable[[], str]) -> Callable[[], str]:
    found: list[str] = []

    def result() -> str:
        if not found:
            found.append(compute())
        return found[0]

    return result


def digests_written() -> dict[str, tuple[list[int], str]]:
    """Every file this process wrote in a recording_writes() scope: path -> (identity,
    sha256), a copy (for a forked stage to hand back to its parent: remember_written)."""
    return dict(_digests)


def remember_written(digests: dict[str, Any]) -> None:
    """Take another process's digests_written() as this one's: a file written there is
    then not hashed again here while it keeps its identity."""
    for path, (identity, sha256) in digests.items():
        _digests[path] = (list(identity), sha256)


def digest_written(path, info: os.stat_result) -> str | None:
    """The sha256 of a file this process wrote (in a recording_writes() scope), while it
    keeps the identity it had then; else None."""
    known = _digests.get(str(path))
    return known[1] if known is not None and known[0] == file_identity(info) else None


def link_atomic(source: Path, path: Path, sync: bool = True) -> None:
    """Make path the same file as source (a hard link, renamed into place, so readers see
    the old file or the new one), copying where links cannot be made (another file
    system). Source must be a regular file, not a link. sync: False leaves the folder's
    fsync to the caller (once for several links: each one costs a journal commit)."""
    info = os.lstat(source)
    if not stat.S_ISREG(info.st_mode):
        raise NotAFile(errno.EINVAL, "not a regular file", str(source))
    try:
        if os.path.samestat(info, os.lstat(path)):
            return  # already it (linking again would only touch its ctime)
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = os.path.join(path.parent, f".{path.name}.{secrets.token_hex(6)}.tmp")
    try:
        os.link(source, temp, follow_symlinks=False)
    except OSError:
        write_atomic(path, read_bytes_no_follow(source))
        return
    try:
        os.replace(temp, path)
    except BaseException:
        os.unlink(temp)
        raise
    if sync:
        sync_folder(path.parent)


def remove_detached(paths: list[Path]) -> None:
    """Remove these folders in a process detached from this one (its own session, no
    open file of ours: not the build lock, not the pipes a caller reads our output
    from), so that the caller ends without waiting for the kernel to free them (the
    unique files of a 100,000-document build, some 800 MB, took 0.5-1 s). The remover
    is a new interpreter (vfork and exec), not a fork: copying a 100,000-document
    build's process took 0.05-0.13 s. Where none can be started, they are removed here."""
    import subprocess

    _removers[:] = [remover for remover in _removers if remover.poll() is None]
    try:
        _removers.append(subprocess.Popen(
            [sys.executable, "-I", "-c", _REMOVER, *map(os.fspath, paths)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            close_fds=True, start_new_session=True))
    except (OSError, ValueError):  # (no interpreter to start)
        for path in paths:
            shutil.rmtree(path, ignore_errors=True)


# The removers this process started, until a later call finds them ended (and so reaps
# them: a long-lived process keeps no zombie).
_removers: list = []
_REMOVER = """
import os, shutil, sys
os.nice(10)
for path in sys.argv[1:]:
    shutil.rmtree(path, ignore_errors=True)
"""


def sync_folder(folder: Path) -> None:
    directory = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def _create_temp(path: Path) -> tuple[int, str]:
    """A new temp file beside path, created 0666 so that the umask decides its mode."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    while True:
        temp = os.path.join(path.parent, f".{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(temp, flags, 0o666), temp
        except FileExistsError:
            continue


class NotAFile(OSError):
    """A path that names a link (where none may be), a FIFO, a device or a folder."""


class FileTooLarge(OSError):
    """A file over the size its reader accepts (checked before anything is read)."""

    def __init__(self, path: Path, size: int, limit: int) -> None:
        super().__init__(errno.EFBIG, f"{size:,} bytes, over the limit of {limit:,}",
                         str(path))
        self.size = size


def open_regular(path: Path, flags: int = os.O_RDONLY, mode: int = 0o666,
                 follow_links: bool = True) -> int:
    """os.open for what must be a regular file. O_NONBLOCK, then a check: a FIFO or a
    device planted where a file belongs is an error, never an open or read that blocks
    for ever. With follow_links=False a link as the last component is refused too, so a
    planted link never makes us read, append to or truncate a file elsewhere."""
    flags |= os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_links else os.O_NOFOLLOW)
    try:
        handle = os.open(path, flags, mode)
    except OSError as error:
        if error.errno == errno.ELOOP and not follow_links:
            raise NotAFile(errno.ELOOP, "a link, not a file", str(path)) from None
        if error.errno == errno.ENXIO:  # a FIFO opened for writing with no reader
            raise NotAFile(errno.ENXIO, "not a regular file", str(path)) from None
        raise
    if not stat.S_ISREG(os.fstat(handle).st_mode):
        os.close(handle)
        raise NotAFile(errno.EINVAL, "not a regular file", str(path))
    os.set_blocking(handle, True)
    return handle


def open_no_follow(path: Path, flags: int = os.O_RDONLY, mode: int = 0o666) -> int:
    return open_regular(path, flags, mode, follow_links=False)


def read_regular(path: Path, limit: int | None = None, follow_links: bool = True
                 ) -> tuple[bytes, os.stat_result]:
    """A regular file's bytes and the stat of what was read (one open file). A file over
    limit bytes is FileTooLarge before any of it is read: a sparse 1 TB file is refused,
    not loaded."""
    with os.fdopen(open_regular(path, follow_links=follow_links), "rb") as handle:
        info = os.fstat(handle.fileno())
        if limit is not None and info.st_size > limit:
            raise FileTooLarge(path, info.st_size, limit)
        if limit is None:
            return handle.read(), info
        # Read what the stat says (and a byte more): read(limit + 1) would allocate the
        # limit for every file, and glibc keeps each such buffer as its own memory map
        # (100,000 files exhaust the process's 65,530 maps).
        want = min(info.st_size, limit) + 1
        data = handle.read(want)
        if len(data) == want:  # it grew since the stat: read on, to the limit
            data += handle.read(limit + 1 - len(data))
        if len(data) > limit:  # it grew while we read
            raise FileTooLarge(path, len(data), limit)
        return data, info


def map_regular(path: Path, follow_links: bool = True) -> tuple[bytes | Any, os.stat_result]:
    """read_regular()'s bytes, mapped rather than read (map_open)."""
    handle = open_regular(path, follow_links=follow_links)
    try:
        info = os.fstat(handle)
        return map_open(handle, info), info
    finally:
        os.close(handle)  # (the map holds the file)


def map_open(handle: int, info: os.stat_result) -> bytes | Any:
    """An open regular file's bytes (info: its stat), mapped rather than read (an mmap;
    b"" for an empty file): only the pages a caller touches are read, and a view of them
    handed to a write is copied from the page cache, not read into this process first
    (the facts ledger: an edit reads a few row groups of it and copies the others; the
    staged Parquet artifacts a stage reads a few groups of). For files that are
    replaced, never written in place: one cut short in place while mapped stops the
    process at the next touch of a page it lost (SIGBUS)."""
    import mmap

    if not info.st_size:
        return b""
    try:
        return mmap.mmap(handle, info.st_size, access=mmap.ACCESS_READ)
    except ValueError:  # (cut short since its stat)
        raise OSError(errno.ESTALE, "the file changed while it was mapped") from None


def read_bytes_no_follow(path: Path, limit: int | None = None) -> bytes:
    return read_regular(path, limit, follow_links=False)[0]


def json_bytes(payload: Any, compact: bool = False) -> bytes:
    """Canonical JSON text: stable key order as built, UTF-8, trailing newline.

    compact uses json's C encoder (indenting forces the slow pure-Python one).
    """
    if compact:
        return compact_json(payload) + b"\n"
    return (indented_json(payload) + "\n").encode("utf-8")


@dataclass(frozen=True)
class Spliced:
    """A value indented_json_pieces puts in as it is: its JSON text, UTF-8, already
    indented for the place it goes (a member at `indent`, the line break and spaces
    before it), as pieces that write_pieces takes."""

    pieces: tuple[bytes | memoryview, ...]
    indent: str


def indented_json(value: Any, indent: str = "\n") -> str:
    """Exactly json.dumps(value, ensure_ascii=False, allow_nan=False, indent=2), some 5x
    faster: the strings go through json's own C encoder, the nesting is joined here
    (json indents in pure Python, a generator per level: a 10,000-document manifest took
    a quarter of a second). indent: where value goes, for text put inside another
    document (a member of a top-level object is at "\n  ")."""
    return "".join(_indented_parts(value, indent))


def indented_json_pieces(value: Any) -> list[bytes | memoryview]:
    """json_bytes(value) as pieces for write_pieces, where value may hold Spliced values
    (each must be at the indent it names)."""
    pieces: list[bytes | memoryview] = []
    text: list[str] = []
    for part in _indented_parts(value, "\n"):
        if isinstance(part, Spliced):
            pieces.append("".join(text).encode("utf-8"))
            pieces.extend(part.pieces)
            text = []
        else:
            text.append(part)
    text.append("\n")
    pieces.append("".join(text).encode("utf-8"))
    return pieces


def _indented_parts(value: Any, indent: str) -> list[str | Spliced]:
    """indented_json's text in parts, Spliced values among them."""
    from json.encoder import encode_basestring

    parts: list[str | Spliced] = []
    add = parts.append
    said: dict[tuple[int, str], str] = {}  # (a list of strings, indent) -> its text

    def key_text(key: Any) -> str:
        if isinstance(key, str):
            return encode_basestring(key)
        if isinstance(key, float) or key is True or key is False or key is None \
                or isinstance(key, int):
            return encode_basestring(json.dumps(key, allow_nan=False))
        raise TypeError(f"keys must be str, int, float, bool or None, not "
                        f"{key.__class__.__name__}")

    def encode(item: Any, indent: str) -> None:
        if isinstance(item, str):
            add(encode_basestring(item))
        elif item is None:
            add("null")
        elif item is True:
            add("true")
        elif item is False:
            add("false")
        elif isinstance(item, int):
            add(int.__repr__(item))
        elif isinstance(item, float):
            add(json.dumps(item, allow_nan=False))  # (json's rules: nan is refused)
        elif isinstance(item, (list, tuple)):
            if not item:
                add("[]")
                return
            inner = indent + "  "
            if all(type(member) is str for member in item):  # (ids: most of the lists)
                key = (id(item), indent)  # (one list in many places: a manifest's inputs)
                if key not in said:
                    said[key] = "[" + inner + ("," + inner).join(
                        map(encode_basestring, item)) + indent + "]"
                add(said[key])
                return
            if all(type(member) is dict and member and _FLAT.issuperset(
                    map(type, member.values())) for member in item):
                add(_flat_records(item, indent))
                return
            opening = "[" + inner
            for member in item:
                add(opening)
                opening = "," + inner
                encode(member, inner)
            add(indent + "]")
        elif isinstance(item, dict):
            if not item:
                add("{}")
                return
            inner = indent + "  "
            opening = "{" + inner
            for key, member in item.items():
                if type(member) is str:
                    add(opening + key_text(key) + ": " + encode_basestring(member))
                else:
                    add(opening + key_text(key) + ": ")
                    encode(member, inner)
                opening = "," + inner
            add(indent + "}")
        elif isinstance(item, Spliced):
            if item.indent != indent:
                raise ValueError(f"text indented for {item.indent!r} put at {indent!r}")
            add(item)
        else:
            json.dumps(item)  # raises json's TypeError for what it cannot encode
            raise TypeError(f"{item.__class__.__name__} is not JSON serializable")

    encode(value, indent)
    return parts


_FLAT = {str, int, float, bool, type(None)}


def _flat_records(items: list | tuple, indent: str) -> str:
    """indented_json of a list of non-empty dicts of scalars (a manifest's inputs), by
    json's C encoder with the dicts' indent as its item separator; the list's own
    breaks are put in after. Exact: a newline is never inside an encoded string, a
    record ends in "}" and begins with "{" (a key begins with a quote), so `},` + break
    + `{` is found only between two records."""
    inner = indent + "  "
    member = inner + "  "
    text = json.JSONEncoder(ensure_ascii=False, allow_nan=False,
                            separators=("," + member, ": ")).encode(list(items))
    body = text[2:-2].replace("}," + member + "{", inner + "}," + inner + "{" + member)
    return "[" + inner + "{" + member + body + inner + "}" + indent + "]"


# (one encoder for every call: json.dumps with options makes one each time, 1 µs)
_COMPACT = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def compact_json(value: Any) -> bytes:
    """JSON with no spaces and no newline, UTF-8: how caches keep values (UnitStore)."""
    return compact_json_text(value).encode("utf-8")


def compact_json_text(value: Any) -> str:
    """compact_json() as text."""
    return _COMPACT.encode(value)


def write_json(path: Path, payload: Any, compact: bool = False) -> None:
    write_atomic(path, json_bytes(payload, compact))


def read_json(path: Path) -> Any:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


class JsonRefused(ValueError):
    """JSON ctxfst does not read: not UTF-8, not JSON, a NaN or infinite number, or a lone
    surrogate. The message says where (line:column)."""


_NON_FINITE = re.compile(r"-?(?:NaN|Infinity)|-?[0-9]+(?:\.[0-9]+)?[eE][+-]?[0-9]{3,}")
_LONE_ESCAPE = re.compile(r"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
                          r"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}")
_SURROGATE = re.compile("[\ud800-\udfff]")


def strict_json(data: bytes | str) -> Any:
    """JSON as ctxfst reads every file and request of a stranger: UTF-8, finite numbers
    only (NaN, Infinity and 1e999 are refused), no lone surrogate (escaped or raw), so
    what it reads can always be written back and compared. JsonRefused says where."""
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise JsonRefused(f"{_place(data[:error.start].decode('utf-8', 'replace'))}: "
                              f"not UTF-8 (byte 0x{data[error.start]:02x})") from None
    else:
        text = data
    try:
        value = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except _NotFinite:
        found = _NON_FINITE.search(text)
        where = _place(text[:found.start()]) if found else "1:1"
        raise JsonRefused(f"{where}: {found.group() if found else 'a number'} is not a "
                          "finite number") from None
    except json.JSONDecodeError as error:
        raise JsonRefused(f"{error.lineno}:{error.colno}: {error.msg}") from None
    except RecursionError:
        raise JsonRefused("1:1: nested too deeply") from None
    if _SURROGATE.search(text) or ("\\u" in text and _has_surrogate(value)):
        found = _LONE_ESCAPE.search(text) or _SURROGATE.search(text)
        where = _place(text[:found.start()]) if found else "1:1"
        raise JsonRefused(f"{where}: a lone surrogate is no character")
    return value


class _NotFinite(ValueError):
    pass


def _refuse_constant(name: str) -> Any:
    raise _NotFinite(name)


def _finite_float(text: str) -> float:
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):
        raise _NotFinite(text)
    return value


def _has_surrogate(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _place(before: str) -> str:
    """line:column of the character after `before`."""
    line = before.count("\n") + 1
    return f"{line}:{len(before) - (before.rfind(chr(10)) + 1) + 1}"


def sha256_file(path: Path) -> str:
    return sha256_file_and_size(path)[0]


def sha256_file_and_size(path: Path, limit: int | None = None) -> tuple[str, int]:
    """A file's sha256 and the number of bytes it was computed over. A file over limit
    raises FileTooLarge before a byte of it is read."""
    digest, size = hashlib.sha256(), 0
    with os.fdopen(open_regular(path), "rb") as handle:
        if limit is not None and (found := os.fstat(handle.fileno()).st_size) > limit:
            raise FileTooLarge(path, found, limit)
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
            size += len(block)
    return digest.hexdigest(), size


def is_sha256(value: Any) -> bool:
    """A sha256 as this toolchain writes it: 64 lowercase hex digits."""
    return type(value) is str and _SHA256.fullmatch(value) is not None


_SHA256 = re.compile(r"[0-9a-f]{64}")
