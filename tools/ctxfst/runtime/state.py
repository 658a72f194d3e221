"""The world-state store: a JSON snapshot in upstream's world-state shape, and beside it
an append-only event log from which the snapshot can always be rebuilt.

Every change, under an exclusive lock: append the event to the log (fsync), then write
the snapshot atomically. A crash between the two leaves a snapshot one event behind its
log; loading replays the log, so what loads always equals the replay of the log. A log
whose last line was cut off by a crash loads with that line dropped and reported.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import functools
import json
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..artifacts.io import (
    json_bytes,
    open_no_follow,
    read_bytes_no_follow,
    strict_json,
    write_atomic,
)
from ..locks import LockBusy, exclusive

STATE_SCHEMA_VERSION = "1.0.0"
RESULTS = ("success", "failed", "partial")


class StateError(Exception):
    """A change to the state that could not be made (a lock held, a concurrent write):
    failed work (exit 1); the message says why."""


class StateFileError(StateError):
    """A state file that is missing, damaged, of an unknown version, or not a file, or
    one that `state init` would replace without --force: bad input (exit 2)."""


def _file_error(error: OSError, fallback: Path) -> StateFileError:
    name = error.filename or fallback
    if error.errno == errno.ELOOP:
        return StateFileError(f"{name} is a symbolic link; state files are never "
                              "followed through links")
    return StateFileError(f"cannot use the world state file {name}: "
                          f"{error.strerror or error}")


def _state_files(method):
    """A method whose OSError (a folder where a file belongs, no permission) becomes a
    clear StateFileError instead of an internal error."""

    @functools.wraps(method)
    def checked(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except OSError as error:
            raise _file_error(error, self.path) from None

    return checked


def check_schema_version(data: dict[str, Any], path: Path) -> None:
    """Refuse a snapshot written by a ctxfst whose format this one does not know (rewriting
    it would lose what the newer format holds). Upstream snapshots carry none."""
    version = data.get("schema_version")
    if version is None:
        return
    supported = STATE_SCHEMA_VERSION.split(".")[0]
    if not isinstance(version, str) or version.split(".")[0] != supported:
        raise StateFileError(f"{path} has schema_version {version!r}; this ctxfst reads "
                             f"world states of version {supported}.x only")


def now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="microseconds")


@dataclass
class WorldState:
    session_id: str
    lineage: str
    goal: str
    active_states: list[str] = field(default_factory=list)
    completed_skills: list[dict[str, Any]] = field(default_factory=list)
    current_subgraph: dict[str, Any] = field(default_factory=lambda: {"nodes": [], "edges": []})
    created_at: str = ""
    updated_at: str = ""
    serial: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"schema_version": STATE_SCHEMA_VERSION, "session_id": self.session_id,
                "lineage": self.lineage, "serial": self.serial, "goal": self.goal,
                "active_states": self.active_states,
                "completed_skills": self.completed_skills,
                "current_subgraph": self.current_subgraph,
                "created_at": self.created_at, "updated_at": self.updated_at}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> WorldState:
        try:
            return cls(session_id=data["session_id"], lineage=data["lineage"],
                       goal=data["goal"], active_states=list(data["active_states"]),
                       completed_skills=list(data["completed_skills"]),
                       current_subgraph=data.get("current_subgraph") or {"nodes": [],
                                                                          "edges": []},
                       created_at=data.get("created_at", ""),
                       updated_at=data.get("updated_at", ""), serial=int(data["serial"]))
        except (KeyError, TypeError, ValueError) as error:
            raise StateFileError(f"not a ctxfst world state (missing or bad {error})") \
                from None

    @property
    def reached(self) -> bool:
        return self.goal in self.active_states


_IDS = "a list of ids"
# Each event type's fields (required, optional) and their kinds; every event also has
# type, serial, lineage (init included) and at.
_EVENT_FIELDS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "init": ({"session_id": str, "goal": str, "seeds": _IDS}, {}),
    "add": ({"states": _IDS}, {}),
    "remove": ({"states": _IDS}, {}),
    "complete": ({"skill": str, "result": str}, {"summary": str, "added": _IDS,
                                                 "removed": _IDS}),
    "subgraph": ({"subgraph": dict}, {}),
    # world-state.json rewritten by another tool (the reference runtime): what it holds
    "external": ({"goal": str, "active_states": _IDS, "completed_skills": list,
                  "subgraph": dict}, {}),
    "step_started": ({"step_id": int, "skill": str}, {}),
    "step_finished": ({"step_id": int, "skill": str}, {"status": str}),
}


def _fits(value: Any, kind: Any) -> bool:
    if kind == _IDS:
        return isinstance(value, list) and all(isinstance(item, str) for item in value)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def _check_event(event: Any) -> None:
    """Refuse an event whose fields are missing or of the wrong kind (a damaged or hostile
    log), before it changes anything."""
    if not isinstance(event, dict):
        raise StateFileError("an event must be a JSON object")
    kind = event.get("type")
    if not isinstance(kind, str) or kind not in _EVENT_FIELDS:
        raise StateFileError(f"unknown event type {kind!r}")
    required, optional = _EVENT_FIELDS[kind]
    fields = {"serial": int, "lineage": str, "at": str, **required}
    for key, expected in {**fields, **optional}.items():
        if key not in event:
            if key in fields:
                raise StateFileError(f"{kind} event without '{key}'")
            continue
        if not _fits(event[key], expected):
            what = expected if expected == _IDS else f"a {expected.__name__}"
            raise StateFileError(f"{kind} event: '{key}' must be {what}")
    if kind == "complete" and event["result"] not in RESULTS:
        raise StateFileError(f"complete event: result {event['result']!r} is not one of "
                             f"{', '.join(RESULTS)}")
    if kind in ("subgraph", "external"):
        subgraph = event["subgraph"]
        if not (_fits(subgraph.get("nodes", []), _IDS)
                and isinstance(subgraph.get("edges", []), list)
                and all(isinstance(edge, dict) for edge in subgraph.get("edges", []))):
            raise StateFileError(f"{kind} event: 'subgraph' must hold a nodes list of ids "
                                 "and an edges list of objects")
    if kind == "external":
        for number, record in enumerate(event["completed_skills"], 1):
            if not (isinstance(record, dict) and isinstance(record.get("skill"), str)
                    and record.get("result") in RESULTS
                    and isinstance(record.get("timestamp", ""), str)
                    and isinstance(record.get("summary", ""), str)):
                raise StateFileError(f"external event: completed skill {number} needs a "
                                     f"`skill` name and a `result` ({', '.join(RESULTS)})")


def apply(state: WorldState | None, event: dict[str, Any]) -> WorldState:
    """The one definition of what each event does (used live and in replay)."""
    _check_event(event)
    kind = event["type"]
    if kind == "init" and state is not None:
        raise StateFileError("an init event after the start of the log")
    expected = 1 if state is None else state.serial + 1
    if event["serial"] != expected and (state is not None or kind == "init"):
        raise StateFileError(f"event serial {event['serial']} where {expected} belongs; "
                             "the log is out of order")
    if kind == "init":
        state = WorldState(session_id=event["session_id"], lineage=event["lineage"],
                           goal=event["goal"], active_states=sorted(set(event["seeds"])),
                           created_at=event["at"])
    elif state is None:
        raise StateFileError("the event log does not start with an init event")
    elif event["lineage"] != state.lineage:
        raise StateFileError(f"event {event['serial']} belongs to lineage "
                             f"{event['lineage']}, not {state.lineage}")
    elif kind == "add":
        state.active_states = sorted(set(state.active_states) | set(event["states"]))
    elif kind == "remove":
        state.active_states = sorted(set(state.active_states) - set(event["states"]))
    elif kind == "complete":
        record = {"skill": event["skill"], "timestamp": event["at"], "result": event["result"]}
        if event.get("summary"):
            record["summary"] = event["summary"]
        state.completed_skills.append(record)
        state.active_states = sorted((set(state.active_states) - set(event.get("removed", [])))
                                     | set(event.get("added", [])))
    elif kind == "subgraph":
        state.current_subgraph = event["subgraph"]
    elif kind == "external":
        state.goal = event["goal"]
        state.active_states = sorted(set(event["active_states"]))
        state.completed_skills = [dict(record) for record in event["completed_skills"]]
        state.current_subgraph = event["subgraph"]
    # step_started, step_finished: the agent loop's journal, no change to the world itself
    state.serial = event["serial"]
    state.updated_at = event["at"]
    return state


@dataclass
class Replay:
    state: WorldState | None
    events: list[dict[str, Any]]
    dropped: str | None  # a cut-off last line, dropped
    from_log: bool = True  # False: adopted from a snapshot that has no log

    def content_at(self, serial: Any) -> str | None:
        """content() of the state the log passed through at `serial` (events replayed
        again: only a snapshot that differs from the log's end asks)."""
        state = None
        for event in self.events:
            if type(serial) is not int or event["serial"] > serial:
                break
            state = apply(state, event)
        return _state_content(state) if state is not None and state.serial == serial else None


def content(goal: Any, active: Any, completed: Any, subgraph: Any) -> str:
    """What a world state says, as one comparable text: its goal, active states (a set),
    completed skills and subgraph; not its serial or times."""
    if isinstance(active, list) and all(isinstance(item, str) for item in active):
        active = sorted(set(active))
    return json.dumps([goal, active, completed, subgraph or {"nodes": [], "edges": []}],
                      sort_keys=True, ensure_ascii=False)


def _state_content(state: WorldState) -> str:
    return content(state.goal, state.active_states, state.completed_skills,
                   state.current_subgraph)


def _exclusive(path: Path, timeout: float, busy: Any):
    """The state's locks: a holder that outlives the timeout is a StateError."""

    @contextlib.contextmanager
    def held() -> Iterator[None]:
        taken = False
        try:
            with exclusive(path, timeout, busy):
                taken = True
                yield
        except LockBusy as error:
            raise StateError(str(error)) from None
        except OSError as error:  # the lock file cannot be made (a folder in its place...)
            if taken:
                raise
            raise _file_error(error, path) from None

    return held()


class StateStore:
    """One world state: PATH (snapshot), PATH.events.jsonl (log), PATH.lock (lock)."""

    def __init__(self, path: Path, lock_timeout: float = 10.0) -> None:
        self.path = path
        self.log = path.with_name(path.name + ".events.jsonl")
        self.lock_path = path.with_name(path.name + ".lock")
        self.lock_timeout = lock_timeout
        self.notes: list[str] = []  # things loading had to repair, for the user
        self._pending: dict[str, Any] | None = None  # an outside edit adopted, not yet logged

    @property
    def exists(self) -> bool:
        return self.log.exists() or self.path.exists()

    def locked(self):
        """An exclusive lock for one change; the kernel releases it if this process dies."""
        return _exclusive(self.lock_path, self.lock_timeout,
                          lambda owner: f"{self.path} is locked by {owner}; it is released "
                                        "when that process ends")

    def _adopted(self) -> list[dict[str, Any]]:
        """Events equivalent to an upstream world-state.json that has no event log."""
        try:
            data = strict_json(read_bytes_no_follow(self.path))
            if isinstance(data, dict):
                check_schema_version(data, self.path)
            session, goal = data["session_id"], data["goal"]
            active = data["active_states"]
            completed = data.get("completed_skills", [])
            lineage = data.get("lineage") or str(uuid.uuid5(uuid.NAMESPACE_URL, str(session)))
            if not (isinstance(session, str) and isinstance(goal, str)
                    and isinstance(lineage, str) and isinstance(active, list)
                    and all(isinstance(item, str) for item in active)
                    and isinstance(completed, list)
                    and all(isinstance(item, dict) for item in completed)):
                raise TypeError("wrong field types")
        except OSError as error:
            raise _file_error(error, self.path) from None
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
            raise StateFileError(f"{self.path} is not a world state ctxfst can read (upstream "
                             "shape: session_id, goal, active_states list, completed_skills "
                             "list), and it has no event log to rebuild it from") from None
        at = str(data.get("created_at") or now())
        events = [{"type": "init", "serial": 1, "lineage": lineage, "session_id": session,
                   "goal": goal, "seeds": active, "at": at, "adopted": True}]
        for record in completed:  # their effects are already in active_states
            events.append({"type": "complete", "serial": len(events) + 1, "lineage": lineage,
                           "skill": str(record.get("skill", "")),
                           "result": str(record.get("result", "success")),
                           "summary": str(record.get("summary", "")),
                           "added": [], "removed": [],
                           "at": str(record.get("timestamp") or at)})
        subgraph = data.get("current_subgraph")
        if isinstance(subgraph, dict) and (subgraph.get("nodes") or subgraph.get("edges")):
            events.append({"type": "subgraph", "serial": len(events) + 1, "lineage": lineage,
                           "subgraph": subgraph, "at": str(data.get("updated_at") or at)})
        return events

    def run_lock(self):
        """Held by `ctxfst run` for its whole life: one agent loop per state at a time."""
        return _exclusive(self.path.with_name(self.path.name + ".run.lock"), 0.0,
                          lambda owner: f"another `ctxfst run` is working on {self.path} "
                                        f"({owner})")

    @_state_files
    def replay(self) -> Replay:
        if not self.log.exists():
            if self.path.exists():  # an upstream world state: adopt it as its events
                events = self._adopted()
                state = None
                for number, event in enumerate(events, 1):
                    try:
                        state = apply(state, event)
                    except StateError as error:
                        raise StateFileError(f"{self.path}: completed skill {number - 1}: "
                                             f"{error}") from None
                return Replay(state, events, None, from_log=False)
            raise StateFileError(f"no world state at {self.path} (run `ctxfst state init`)")
        raw = read_bytes_no_follow(self.log)
        lines = raw.split(b"\n")
        dropped = None
        if lines and lines[-1] == b"":
            lines.pop()
        elif lines:
            dropped = lines.pop().decode("utf-8", "replace")  # cut off mid-write by a crash
        events = []
        state = None
        for number, line in enumerate(lines, 1):
            try:
                event = strict_json(line)
                state = apply(state, event)
            except StateError as error:
                raise StateFileError(f"{self.log}:{number}: {error}") from None
            except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as error:
                raise StateFileError(f"{self.log}:{number}: not a valid event "
                                     f"({type(error).__name__} {error}); the log is "
                                     "corrupted") from None
            events.append(event)
        return Replay(state, events, dropped)

    @_state_files
    def load(self) -> WorldState:
        replay = self.replay()
        if replay.state is None:
            raise StateFileError(f"{self.log} holds no events")
        if replay.dropped is not None:
            self.notes.append(f"dropped a cut-off last line of {self.log.name}: "
                              f"{replay.dropped[:80]!r}")
        snapshot = self._check_snapshot(replay.state)
        self._pending = None
        if snapshot is not None and replay.from_log:
            outside = self._outside_edit(snapshot, replay)
            if outside is not None:  # adopted here; written with the next change
                self._pending = outside
                self.notes.append(
                    f"{self.path.name} was changed outside ctxfst after serial "
                    f"{replay.state.serial} (by the reference runtime, or by hand): its goal, "
                    "active states, completed skills and subgraph are adopted as event "
                    f"{outside['serial']}, recorded with the next change")
                return apply(replay.state, outside)
        return replay.state

    def _outside_edit(self, snapshot: dict[str, Any], replay: Replay) -> dict[str, Any] | None:
        """The event that adopts a snapshot another tool rewrote, or None when the snapshot
        is one ctxfst wrote: the log's state at the snapshot's serial (a crash may leave
        it behind the log) or at its end. The reference rewrites the file without
        touching `serial`."""
        said = content(snapshot.get("goal"), snapshot.get("active_states"),
                       snapshot.get("completed_skills"), snapshot.get("current_subgraph"))
        serial = snapshot.get("serial")
        final = replay.state
        assert final is not None
        if said == _state_content(final) or (serial != final.serial
                                             and said == replay.content_at(serial)):
            return None
        event = {"type": "external", "serial": final.serial + 1, "lineage": final.lineage,
                 "at": now(), "goal": snapshot.get("goal"),
                 "active_states": snapshot.get("active_states"),
                 "completed_skills": snapshot.get("completed_skills", []),
                 "subgraph": snapshot.get("current_subgraph") or {"nodes": [], "edges": []}}
        try:
            _check_event(event)
        except StateFileError as error:
            raise StateFileError(
                f"{self.path} was changed outside ctxfst into something that is no world "
                f"state ({error}); fix it, or run `ctxfst state replay --discard-outside` "
                f"to rewrite it from {self.log.name}") from None
        return event

    def _check_snapshot(self, state: WorldState) -> dict[str, Any] | None:
        """The snapshot beside the log must be of a known version and the same lineage;
        the snapshot, when there is a readable one."""
        if not os.path.lexists(self.path):
            return None
        try:
            snapshot = strict_json(read_bytes_no_follow(self.path))
        except (ValueError, RecursionError):
            snapshot = None
            self.notes.append(f"{self.path.name} was unreadable; rebuilt from the log")
        if not isinstance(snapshot, dict):
            return None
        check_schema_version(snapshot, self.path)
        if snapshot.get("lineage") is not None and str(
                snapshot.get("lineage")) != state.lineage:
            raise StateFileError(f"{self.path} belongs to lineage {snapshot.get('lineage')} "
                                 f"but its log to {state.lineage}: they are from "
                                 "different sessions")
        return snapshot

    def _append(self, event: dict[str, Any]) -> None:
        if not self.log.exists() and self.path.exists() and event["type"] != "init":
            for adopted in self._adopted():  # the log starts with the adopted history
                self._write_event(adopted)
        self._write_event(event)

    def _write_event(self, event: dict[str, Any]) -> None:
        self._trim_cut_line()
        with os.fdopen(open_no_follow(self.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT),
                       "ab") as out:
            out.write(json.dumps(event, ensure_ascii=False, sort_keys=True).encode() + b"\n")
            out.flush()
            os.fsync(out.fileno())

    def _trim_cut_line(self) -> None:
        """Drop a last line a crash cut off, so the next event starts on its own line."""
        if not self.log.exists():
            return
        with os.fdopen(open_no_follow(self.log, os.O_RDWR), "rb+") as handle:
            size = handle.seek(0, os.SEEK_END)
            if size == 0:
                return
            handle.seek(size - 1)
            if handle.read(1) == b"\n":
                return
            handle.seek(0)
            data = handle.read()
            handle.truncate(data.rfind(b"\n") + 1)
            handle.flush()
            os.fsync(handle.fileno())

    def _commit(self, state: WorldState | None, event: dict[str, Any]) -> WorldState:
        new = apply(state, event)
        self._append(event)
        write_atomic(self.path, json_bytes(new.to_json()))
        return new

    @_state_files
    def init(self, goal: str, seeds: list[str], force: bool = False) -> WorldState:
        with self.locked():
            if self.exists and not force:
                raise StateFileError(f"{self.path} already exists; use --force to start "
                                     "over")
            for path in (self.log, self.path):
                path.unlink(missing_ok=True)
            event = {"type": "init", "serial": 1, "lineage": str(uuid.uuid4()),
                     "session_id": str(uuid.uuid4()), "goal": goal, "seeds": seeds,
                     "at": now()}
            return self._commit(None, event)

    @_state_files
    def change(self, kind: str, expected_serial: int | None = None, **data: Any) -> WorldState:
        """Record one event. With expected_serial, refuse if someone wrote since."""
        with self.locked():
            state = self.load()
            if self._pending is not None:  # an outside edit: recorded before this change
                self._append(self._pending)
                self._pending = None
            if expected_serial is not None and expected_serial != state.serial:
                raise StateError(f"stale write refused: this change was made against serial "
                                 f"{expected_serial}, but the state is at serial "
                                 f"{state.serial}; reload and try again")
            event = {"type": kind, "serial": state.serial + 1, "lineage": state.lineage,
                     "at": now(), **data}
            return self._commit(state, event)

    @_state_files
    def rebuild(self, discard_outside: bool = False) -> WorldState:
        """`ctxfst state replay`: rewrite the snapshot from the log (and trim a cut line).
        A snapshot another tool changed is adopted first, unless `discard_outside`."""
        with self.locked():
            replay = self.replay()
            if replay.state is None:
                raise StateFileError(f"{self.log} holds no events")
            snapshot = self._check_snapshot(replay.state)
            if replay.dropped is not None:
                good = b"".join(json.dumps(e, ensure_ascii=False, sort_keys=True).encode()
                                + b"\n" for e in replay.events)
                write_atomic(self.log, good)
            state = replay.state
            if snapshot is not None and replay.from_log and not discard_outside:
                outside = self._outside_edit(snapshot, replay)
                if outside is not None:
                    self._append(outside)
                    state = apply(state, outside)
                    self.notes.append(f"{self.path.name} was changed outside ctxfst: "
                                      f"adopted as event {outside['serial']}")
            write_atomic(self.path, json_bytes(state.to_json()))
            return state

    def history(self) -> list[dict[str, Any]]:
        return self.replay().events
