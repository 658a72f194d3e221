"""doit's own state (.ctxfst/doit.db), checked before doit reads it.

doit's sqlite3 backend keeps one JSON object per task (no pickle), but reads it without
checks: a damaged or foreign row is a traceback. The file comes with a checkout like the
caches, so one that is not what doit writes is removed (with a warning): every stage then
runs once, from its own caches, and doit writes a fresh state.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

MAX_ROW_BYTES = 256 * 1024 * 1024  # a 1,000,000-file knowledge base needs about 200 MB
_OBJECTS = [("index", "sqlite_autoindex_doit_1"), ("table", "doit")]
_COLUMNS = [("task_id", "text"), ("task_data", "json")]
# doit's keys of a task's data; any other key is a file dependency: [mtime, size, md5].
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
            if type(value) is not list or len(value) != 3:
                return False
        elif not isinstance(value, kind) or (key == "deps:" and not all(
                type(item) is str for item in value)):
            return False
    return True
