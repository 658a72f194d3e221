"""doit's own state (.ctxfst/doit.db), checked before doit reads it.

doit's sqlite3 backend keeps one JSON object per task (no pickle), but reads it without
checks: a damaged or foreign row is a traceback. The file comes with a checkout like the
caches, so one that is not what doit writes is removed (with a warning): every stage then
runs once, from its own caches, and doit writes a fresh state.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from doit.dependency import FileChangedChecker, get_file_md5

from ..artifacts.io import digest_written, sha256_file
from ..artifacts.layout import STAGING
from ..document.source import MAX_FILE_BYTES
from ..files import file_stamp

if TYPE_CHECKING:
    from .run import BuildRun

MAX_ROW_BYTES = 256 * 1024 * 1024  # a 1,000,000-file knowledge base needs about 200 MB
_OBJECTS = [("index", "sqlite_autoindex_doit_1"), ("table", "doit")]
_COLUMNS = [("task_id", "text"), ("task_data", "json")]
# doit's keys of a task's data; any other key is a file dependency, as IdentityChecker
# keeps it: [size, mtime, inode, ctime, md5] (or doit's own md5 checker, in a state from
# an earlier ctxfst: [mtime, size, md5]; doit then sees another checker and re-runs).
_KINDS = {"_values_:": dict, "checker:": str, "deps:": list, "ignore:": str,
          "result:": (str, dict)}


def drop_damaged_state(path: Path, tasks: list[str]) -> None:
    """Remove doit's state file at path when the rows of `tasks` are not what doit
    writes; a missing file is fine (everything runs)."""
    if not path.exists():
        return
    problem = _problem(path, tasks)
    if problem is None:
        return
    sys.stderr.write(f"ctxfst: warning: {path} is not doit's state ({problem}); removed, "
                     "so every stage runs once\n")
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def _problem(path: Path, tasks: list[str]) -> str | None:
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            objects = sorted(db.execute("SELECT type, name FROM sqlite_master"))
            columns = [(row[1], row[2].lower()) for row in db.execute("PRAGMA table_info(doit)")]
            if objects != _OBJECTS or columns != _COLUMNS:
                return "other tables or columns"
            marks = ",".join("?" * len(tasks))
            for task, size, data in db.execute(
                    f"SELECT task_id, length(CAST(task_data AS BLOB)), CAST(task_data AS BLOB) "
                    f"FROM doit WHERE task_id IN ({marks})", tasks):
                if data is None or size > MAX_ROW_BYTES:
                    return f"task {task}: no data, or too much"
                if not _task_data_ok(json.loads(data.decode("utf-8"))):
                    return f"task {task}: data of another shape"
        finally:
            db.close()
    except (sqlite3.Error, ValueError, RecursionError) as error:
        return str(error)
    return None


def _task_data_ok(data: Any) -> bool:
    if type(data) is not dict:
        return False
    for key, value in data.items():
        kind = _KINDS.get(key)
        if kind is None:  # a file dependency
            ours = (type(value) is list and len(value) == 5
                    and all(type(part) is int for part in value[:4]) and type(value[4]) is str)
            md5 = (type(value) is list and len(value) == 3 and type(value[0]) in (int, float)
                   and type(value[1]) is int and type(value[2]) is str)
            if not (ours or md5):
                return False
        elif not isinstance(value, kind) or (key == "deps:" and not all(
                type(item) is str for item in value)):
            return False
    return True


class IdentityChecker(FileChangedChecker):
    """doit's file check, trusting a file's whole identity (size, mtime, inode, ctime),
    as git's index does, where doit's own md5 checker trusts an unchanged mtime alone:
    `cp -p`, `tar x`, `rsync -t` or a checkout keep mtimes across edits, and two files
    with one mtime can swap names. utime() moves ctime, so a put-back mtime is seen.
    Otherwise the content hash decides (a touch re-runs nothing)."""

    def check_modified(self, file_path, file_stat, state) -> bool:
        if not (isinstance(state, (list, tuple)) and len(state) == 5
                and isinstance(state[4], str)):
            return True  # another checker's state
        content = state[4].removeprefix(_RACY)
        if list(state[:4]) == _identity(file_path, file_stat) and content == state[4]:
            return False
        if file_stat.st_size != state[0] or content == _OVERSIZE:
            return True
        if content.startswith(_SHA256):
            # A staged file this process (or a stage it forked) wrote: its sha256 is
            # known (chunks.parquet and the facts files, 0.1-0.2 s each to hash again
            # at 100,000 documents).
            written = _staged_digest(file_path, file_stat)
            if written:
                return content != _SHA256 + written
        return content != _content_hash(file_path, content.startswith(_SHA256))

    def get_state(self, dep, current_state):
        from ..files import RACY_NS

        info = os.stat(dep)
        identity = _identity(dep, info)
        if (current_state and list(current_state[:4]) == identity
                and not str(current_state[4]).startswith(_RACY)):
            return None
        # A file changed a moment ago may change again within one clock tick and keep its
        # identity (git's "racily clean" entries): its hash is marked, so the next run
        # compares its content even when its identity is unchanged.
        racy = time.time_ns() - max(info.st_mtime_ns, identity[2]) < RACY_NS  # (ctime)
        # A staged file a stage of this process wrote has its sha256 already (150 MB to
        # hash again at 10,000 documents); staged files are only ever replaced, never
        # edited in place (see _identity).
        written = _staged_digest(dep, info)
        if written:
            content = _SHA256 + written
        elif info.st_size > MAX_FILE_BYTES and _STAGED not in str(dep):
            content = _OVERSIZE  # a source validation refuses unread: never hashed
        else:
            content = get_file_md5(dep)
        return [*identity, (_RACY if racy else "") + content]


_SHA256 = "sha256:"
_OVERSIZE = "oversize"  # a source over MAX_FILE_BYTES: its identity alone is kept


def _staged_digest(path, info: os.stat_result) -> str | None:
    """The sha256 of a staged file this process (or a stage it forked) wrote, while it
    keeps its identity; None for any other file."""
    return digest_written(path, info) if _STAGED in str(path) else None


def _content_hash(path, sha256: bool) -> str:
    """A file's content hash as a state holds it: sha256 (marked) or doit's md5."""
    if not sha256:
        return get_file_md5(path)
    return _SHA256 + sha256_file(path)


_RACY = "racy:"


_STAGED = f"{os.sep}{STAGING}{os.sep}"


def _identity(path, info: os.stat_result) -> list[int]:
    """file_stamp(), but a staged file's ctime is left out: it is only ever replaced (a
    new file renamed into place), never edited, and publishing links it, which moves
    its ctime."""
    stamp = list(file_stamp(info))
    if _STAGED in str(path):
        stamp[2] = 0
    return stamp


def inputs_state(run: BuildRun, paths: list[str], refused: list[str]) -> str:
    """The inputs as doit keeps them (JSON): a digest of the paths and their identities
    (BuildRun.identity; any change re-runs validate, which hashes again the inputs whose identity
    changed), what the walk refused, and the sha256 of each file changed within a clock
    tick of now: it could change again and keep its identity (git's "racily clean"
    entries), so states_match compares its content next time."""
    import hashlib

    from ..files import RACY_NS

    now = time.time_ns()
    racy: dict[str, str] = {}
    loaded, stamps = run.loaded_stats, run.loaded_stamps = {}, {}
    lstat, is_regular = os.lstat, stat.S_ISREG
    lines: list[str] = []  # each path and its identity (one line per input: 100,000 at once)
    for path in paths:
        try:
            info = lstat(path)
        except OSError:
            info = None
        if info is not None and is_regular(info.st_mode):
            loaded[path] = info
            # (the unit stamp of BuildRun.identity's file_stamp, inline: a call or two
            # per input was a third of this loop's time beside the lstat)
            mtime, ctime = info.st_mtime_ns, info.st_ctime_ns
            stamps[path] = stamp = f"{info.st_size}:{mtime}:{ctime}:{info.st_ino}"
            lines.append(f"{path}\0{stamp}\n")
            if now - max(mtime, ctime) < RACY_NS:
                racy[path] = _content_sha256(path)
                stamps[path] = None
            continue
        identity = run.identity(path)  # (a link: its target's)
        lines.append(f"{path}\0{identity}\n")
        if identity is not None and now - max(identity[1:3]) < RACY_NS:
            racy[path] = _content_sha256(path)
    digest = hashlib.sha256("".join(lines).encode("utf-8", "surrogateescape"))
    return json.dumps({"inputs": digest.hexdigest(), "refused": refused, "racy": racy},
                      ensure_ascii=False)


def _content_sha256(path: str) -> str:
    from ..artifacts.io import sha256_file_and_size

    try:  # (one over the limit is never read: validation refuses it, CTX004)
        return sha256_file_and_size(Path(path), MAX_FILE_BYTES)[0]
    except OSError:
        return ""


def states_match(saved: Any, current: str) -> bool:
    """Whether a stage's sources state saved by the last run still holds. Plain states
    (Stage.sources) must be equal; inputs_state ones must have equal digests, and each
    file they mark racy the same content now (a file racy now and not then: no)."""
    if saved == current:
        return True
    if type(saved) is not str:  # (doit's state comes with a checkout too)
        return False
    try:
        old, new = json.loads(saved), json.loads(current)
    except (ValueError, RecursionError):
        return False
    if not (isinstance(old, dict) and isinstance(new, dict) and
            isinstance(old.get("racy"), dict) and isinstance(new.get("racy"), dict)):
        return False
    if (old.get("inputs"), old.get("refused")) != (new["inputs"], new["refused"]) or \
            not set(new["racy"]) <= set(old["racy"]):
        return False
    for path, sha in old["racy"].items():  # (JSON keys: strings)
        now = new["racy"][path] if path in new["racy"] else _content_sha256(path)
        if now != sha:
            return False
    return True


def racy_state(state: str) -> bool:
    """Whether an inputs_state marks files that had just changed."""
    try:
        found = json.loads(state)
    except (ValueError, RecursionError):
        return False
    return isinstance(found, dict) and bool(found.get("racy"))


def settled_state(loaded: str, now: str) -> str:
    """The state to save once a stage has run from `loaded` (an inputs_state that marked
    racy files): `now` when it only drops marks (the same identities, and the files
    still racy the same contents), so the next run need not look again; else `loaded`,
    which the next run will not find (a file that changed while the stage ran is seen)."""
    try:
        old, new = json.loads(loaded), json.loads(now)
        same = ((old["inputs"], old["refused"]) == (new["inputs"], new["refused"])
                and all(old["racy"].get(path) == sha for path, sha in new["racy"].items())
                # a file settled since: its content still the one hashed then
                and all(_content_sha256(path) == sha for path, sha in old["racy"].items()
                        if path not in new["racy"]))
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return loaded
    return now if same else loaded
