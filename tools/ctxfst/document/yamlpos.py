"""YAML loading that keeps the position of every key and value.

PyYAML's loaders drop positions, silently keep the last of two duplicate keys, expand
alias bombs without limit, and (the C composer) crash on very deep nesting. This module
builds Python values straight from libyaml's event stream instead: one pass, iterative,
with positions, duplicate-key detection, a nesting limit and an alias-expansion budget.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import datetime as _dt
import math
import sys
from array import array
from dataclasses import dataclass
from typing import Any, NamedTuple

import yaml
from yaml import events as ev
from yaml.constructor import SafeConstructor
from yaml.nodes import ScalarNode
from yaml.resolver import Resolver

from ..diagnostics import Diagnostic, diag

MAX_DEPTH = 64
# Nodes that aliases may add on top of the text's own; alias bombs exceed it at once.
MAX_ALIAS_EXPANSION = 100_000

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_resolver = Resolver()
_constructor = SafeConstructor()
_MERGE_TAG = "tag:yaml.org,2002:merge"
_STR_TAG = "tag:yaml.org,2002:str"
_MISSING = object()
# Plain scalars repeat (ids, types, booleans); resolving each once saves most of the time.
_PLAIN_CACHE_SIZE = 100_000
_plain_cache: dict[str, Any] = {}
_MAP_TAGS = {None, "!", "tag:yaml.org,2002:map"}
_SEQ_TAGS = {None, "!", "tag:yaml.org,2002:seq"}

Path = tuple  # a path of mapping keys (str) and sequence indexes (int)


class Pos(NamedTuple):
    line: int
    column: int


class SourceMap:
    """Where each key and value came from (1-based file lines and columns).

    A deferred map is made only when first asked: valid documents, the common case,
    never pay for positions nobody looks at. It is made from the marks the load kept
    (packed_marks) where it has them, else by reading the YAML again.
    """

    default = Pos(1, 1)

    def __init__(self) -> None:
        self._keys: dict[Path, tuple] = {}
        self._values: dict[Path, tuple] = {}
        self._pending: tuple[str, str, int] | None = None
        self._marked: tuple[str, Any] | None = None  # (packed marks, the loaded value)

    @classmethod
    def deferred(cls, text: str, path: str, line_offset: int, marks: str | None = None,
                 value: Any = None) -> SourceMap:
        smap = cls()
        smap._pending = (text, path, line_offset)
        if marks is not None:
            smap._marked = (marks, value)
        return smap

    @property
    def packed_marks(self) -> str | None:
        """The marks a deferred map is made from (a parse cache row keeps them)."""
        return self._marked[0] if self._marked is not None else None

    def _materialize(self) -> None:
        if self._pending is not None:
            text, path, line_offset = self._pending
            marked, self._pending, self._marked = self._marked, None, None
            # (without marks that fit: aliases, anchors and merge keys, or a stranger's
            # cache row, the YAML is read again)
            found = _positions_from_marks(text, line_offset, *marked) \
                if marked is not None else None
            if found is None:
                built = load_yaml(text, path, line_offset, positions=True).source_map
                found = built._keys, built._values
            self._keys, self._values = found

    def alias(self, path: Path, source: Path) -> None:
        """Locate path where source is (a field lifted from elsewhere in the YAML)."""
        found = self.values.get(source) or self.keys.get(source)
        if found:
            self._values[path] = found

    @property
    def keys(self) -> dict[Path, tuple]:
        self._materialize()
        return self._keys

    @property
    def values(self) -> dict[Path, tuple]:
        self._materialize()
        return self._values

    def key(self, path: Path) -> Pos:
        """Position of the key at path, else of its nearest located ancestor."""
        while path:
            found = self.keys.get(path) or self.values.get(path)
            if found:
                return Pos(*found)
            path = path[:-1]
        return self.default

    def value(self, path: Path) -> Pos:
        """Position of the value at path, else of its key, else of an ancestor."""
        found = self.values.get(path)
        return Pos(*found) if found else self.key(path)


_YAML_ONLY_BREAKS = ("\u0085", "\u2028", "\u2029")


def _line_starts(text: str) -> list[int]:
    starts = [0]
    index = text.find("\n")
    while index >= 0:
        starts.append(index + 1)
        index = text.find("\n", index + 1)
    return starts


def _locate(line_starts: list[int], index: int, line_offset: int) -> tuple[int, int]:
    """(file line, column) of a character index into the YAML text."""
    line = bisect.bisect_right(line_starts, index)
    return (line + line_offset, index - line_starts[line - 1] + 1)


class _Refused(Exception):
    def __init__(self, code: str, message: str, mark: Any) -> None:
        super().__init__(message)
        self.code, self.message, self.mark = code, message, mark


class _NeedPositions(Exception):
    """Raised by a fast (position-less) load that found something to report."""


class _Frame:
    __slots__ = ("container", "path", "mark", "anchor", "size", "pending_key",
                 "pending_merge", "explicit", "is_key")

    def __init__(self, container, path, mark, anchor, is_key):
        self.container = container
        self.path = path
        self.mark = mark
        self.anchor = anchor
        self.size = 1
        self.pending_key = None
        self.pending_merge = False
        self.explicit: set = set()
        self.is_key = is_key


_NO_KEY = object()


class _Builder:
    def __init__(self, path: str, line_offset: int, positions: bool, text: str = "") -> None:
        self.record = positions
        self.file = path
        # libyaml also breaks lines at NEL, LS and PS; files do not. Locate by index then.
        self.line_starts = _line_starts(text) if any(c in text for c in _YAML_ONLY_BREAKS) \
            else None
        self.line_offset = line_offset
        self.smap = SourceMap()
        self.diagnostics: list[Diagnostic] = []
        self.stack: list[_Frame] = []
        self.anchors: dict[str, tuple[Any, int]] = {}
        self.open_anchors: set[str] = set()
        self.alias_expansion = 0
        self.root: Any = None
        self.have_root = False
        self.merged = False  # a merge key (<<) took its items from elsewhere

    def pos(self, mark) -> Pos:
        if self.line_starts is not None:
            return _locate(self.line_starts, mark.index, self.line_offset)
        return (mark.line + 1 + self.line_offset, mark.column + 1)  # a Pos, built cheaply

    # The path a new value gets, and whether it is a mapping key.
    def _slot(self) -> tuple[Path, bool]:
        if not self.stack:
            return (), False
        parent = self.stack[-1]
        if isinstance(parent.container, list):
            return parent.path + (len(parent.container),), False
        if parent.pending_key is _NO_KEY:
            return parent.path, True
        return parent.path + (parent.pending_key,), False

    def start(self, container, event) -> None:
        if len(self.stack) >= MAX_DEPTH:
            raise _Refused("CTX015", f"YAML nesting deeper than {MAX_DEPTH} levels",
                           event.start_mark)
        path, is_key = self._slot()
        frame = _Frame(container, path, event.start_mark, event.anchor, is_key)
        if isinstance(container, dict):
            frame.pending_key = _NO_KEY
        if event.anchor:
            self.open_anchors.add(event.anchor)
        self.stack.append(frame)

    def end(self) -> None:
        frame = self.stack.pop()
        if frame.anchor:
            self.open_anchors.discard(frame.anchor)
        if frame.is_key:
            raise _Refused("CTX017", "a mapping key must be a plain value, not a "
                           "list or mapping", frame.mark)
        self.emit(frame.container, frame.size, frame.mark, frame.anchor, raw=None)

    def alias(self, event) -> None:
        name = event.anchor
        if name in self.open_anchors:
            raise _Refused("CTX015", f"recursive alias *{name}", event.start_mark)
        if name not in self.anchors:
            raise _Refused("CTX012", f"unknown alias *{name}", event.start_mark)
        value, size = self.anchors[name]
        self.alias_expansion += size
        if self.alias_expansion > MAX_ALIAS_EXPANSION:
            raise _Refused("CTX015", "aliases expand to more than "
                           f"{MAX_ALIAS_EXPANSION:,} YAML nodes (an alias bomb?)",
                           event.start_mark)
        self.emit(value, size, event.start_mark, None, raw=None)

    def scalar(self, event) -> None:
        self.emit(_scalar_value(event), 1, event.start_mark, event.anchor, event.value)

    @staticmethod
    def _construct(tag: str, event) -> Any:
        if tag == _STR_TAG:
            return event.value
        if tag == _MERGE_TAG:
            return _MERGE
        constructor = SafeConstructor.yaml_constructors.get(tag)
        if constructor is None:
            raise _Refused("CTX012", f"unsupported YAML tag {event.tag}", event.start_mark)
        node = ScalarNode(tag, event.value, event.start_mark, event.end_mark, event.style)
        try:
            value = constructor(_constructor, node)
        except Exception as error:  # PyYAML raises KeyError/IndexError/... on odd tagged input
            raise _Refused("CTX012", f"cannot read {event.value!r} as {tag.rsplit(':', 1)[-1]}"
                           f": {type(error).__name__} {error}".rstrip(), event.start_mark) from None
        # Keep to what JSON can carry: the frontmatter ends up in JSON artifacts.
        if isinstance(value, (_dt.date, _dt.datetime)):
            return value.isoformat()
        if isinstance(value, float) and not math.isfinite(value):
            raise _Refused("CTX105", f"{event.value!r} is not a finite number",
                           event.start_mark)
        if isinstance(value, (bytes, bytearray)):
            raise _Refused("CTX012", "binary (!!binary) values are not supported",
                           event.start_mark)
        if not isinstance(value, (str, int, float, type(None))):
            # A collection tag on a scalar (`!!set x`, `!!omap x`): PyYAML returns a
            # generator, which no later stage can read or write.
            raise _Refused("CTX012", f"the tag {event.tag} cannot apply to a plain value",
                           event.start_mark)
        return value

    def emit(self, value, size, mark, anchor, raw) -> None:
        if anchor:
            self.anchors[anchor] = (value, size)
        if not self.stack:
            self.root, self.have_root = value, True
            return
        parent = self.stack[-1]
        parent.size += size
        container = parent.container
        if isinstance(container, list):
            if self.record:
                self.smap._values[parent.path + (len(container),)] = self.pos(mark)
            container.append(value)
            return
        if parent.pending_key is _NO_KEY:
            self._key(parent, value, mark, raw)
            return
        key = parent.pending_key
        parent.pending_key = _NO_KEY
        if parent.pending_merge:
            parent.pending_merge = False
            self._merge(parent, value, mark)
            return
        container[key] = value
        if self.record:
            self.smap._values[parent.path + (key,)] = self.pos(mark)

    def _key(self, parent: _Frame, value, mark, raw) -> None:
        if value is _MERGE:
            parent.pending_key, parent.pending_merge = "<<", True
            self.merged = True
            return
        if isinstance(value, (dict, list)):
            raise _Refused("CTX017", "a mapping key must be a plain value, not a "
                           "list or mapping", mark)
        key = _key_text(value, raw)
        if key in parent.explicit:
            if not self.record:
                raise _NeedPositions
            path = parent.path + (key,)
            first_line = self.smap._keys[path][0]
            line, column = self.pos(mark)
            self.diagnostics.append(diag(
                "CTX014", f"duplicate key '{key}' (first at line {first_line}); "
                "YAML would silently keep only the last one", self.file, line, column))
        parent.explicit.add(key)
        if self.record:
            self.smap._keys[parent.path + (key,)] = self.pos(mark)
        parent.pending_key = key

    def _merge(self, parent: _Frame, value, mark) -> None:
        sources = value if isinstance(value, list) else [value]
        for source in sources:
            if not isinstance(source, dict):
                raise _Refused("CTX012", "a merge key (<<) needs a mapping or a list of "
                               "mappings", mark)
            for key, item in source.items():
                if key not in parent.explicit and key not in parent.container:
                    parent.container[key] = item


def _scalar_value(event) -> Any:
    """The value a scalar event stands for (_Refused when it cannot be read)."""
    tag = event.tag
    if tag is None or tag == "!":
        if not event.implicit[0]:
            return event.value  # a quoted scalar without a tag is always a string
        cached = _plain_cache.get(event.value, _MISSING)
        if cached is not _MISSING:
            return cached
        tag = _resolver.resolve(ScalarNode, event.value, event.implicit)
    value = _Builder._construct(tag, event)
    if event.tag is None and len(_plain_cache) < _PLAIN_CACHE_SIZE:
        _plain_cache[event.value] = value  # results are immutable: str, int, date...
    return value


def _key_text(value: Any, raw: str | None) -> str:
    # YAML 1.1 reads keys like `on` or `2024` as bool/int; keep the text as written.
    return value if isinstance(value, str) else (raw if raw is not None else str(value))


class _MergeMarker:
    __repr__ = lambda self: "<<"  # noqa: E731


_MERGE = _MergeMarker()


@dataclass
class YamlResult:
    value: Any
    source_map: SourceMap
    diagnostics: list[Diagnostic]
    ok: bool


def load_yaml(text: str, path: str, line_offset: int = 0, positions: bool = False
              ) -> YamlResult:
    """Load one YAML document, with positions shifted by line_offset lines.

    A refused or malformed document gives ok=False and a located diagnostic. Without
    `positions`, the source map is deferred: built on first use.
    """
    if not positions:
        try:
            result, marks = _load(text, path, line_offset, False)
        except _NeedPositions:
            return load_yaml(text, path, line_offset, positions=True)
        result.source_map = SourceMap.deferred(text, path, line_offset, marks, result.value)
        return result
    return _load(text, path, line_offset, True)[0]


def _load(text: str, path: str, line_offset: int, positions: bool
          ) -> tuple[YamlResult, str | None]:
    """The load, and without positions the marks of its events (_pack_marks), where
    the value it built lays them out (no alias, anchor or merge key; the text's lines
    are the file's): where the facts stage finds its positions without reading the
    YAML again."""
    builder = _Builder(path, line_offset, positions, text)
    # each value's event: its line, and its column * 4 + 0 (a scalar), 1 (a mapping)
    # or 2 (a sequence)
    marks: list[int] | None = [] if not positions and builder.line_starts is None else None
    documents = 0
    try:
        for event in yaml.parse(text, Loader=_Loader):
            kind = event.__class__
            if kind is ev.ScalarEvent:
                builder.scalar(event)
                code = 0
            elif kind is ev.MappingStartEvent:
                if event.tag not in _MAP_TAGS:
                    raise _Refused("CTX012", f"unsupported YAML tag {event.tag}",
                                   event.start_mark)
                builder.start({}, event)
                code = 1
            elif kind is ev.SequenceStartEvent:
                if event.tag not in _SEQ_TAGS:
                    raise _Refused("CTX012", f"unsupported YAML tag {event.tag}",
                                   event.start_mark)
                builder.start([], event)
                code = 2
            else:
                if kind is ev.MappingEndEvent or kind is ev.SequenceEndEvent:
                    builder.end()
                elif kind is ev.AliasEvent:
                    builder.alias(event)
                    marks = None
                elif kind is ev.DocumentStartEvent:
                    documents += 1
                    if documents > 1:
                        raise _Refused("CTX012", "more than one YAML document in the "
                                       "frontmatter", event.start_mark)
                continue
            if marks is not None:  # (a value's event)
                mark = event.start_mark
                marks += (mark.line, mark.column << 2 | code)
    except _Refused as refused:
        line, column = builder.pos(refused.mark)
        builder.diagnostics.append(diag(refused.code, refused.message, path, line, column))
        return YamlResult(None, builder.smap, builder.diagnostics, False), None
    except yaml.YAMLError as error:
        builder.diagnostics.append(_syntax_error(error, text, path, line_offset))
        return YamlResult(None, builder.smap, builder.diagnostics, False), None
    if marks is not None and (builder.merged or builder.anchors):
        marks = None
    return (YamlResult(builder.root, builder.smap, builder.diagnostics, True),
            _pack_marks(marks) if marks is not None else None)


def _pack_marks(marks: list[int]) -> str | None:
    """Marks as text (a parse cache row is JSON): little-endian 16-bit numbers in
    base64; None when one does not fit (a frontmatter of 65,536 lines, say)."""
    try:
        packed = array("H", marks)
    except OverflowError:
        return None
    if sys.byteorder == "big":
        packed.byteswap()
    return base64.b64encode(packed.tobytes()).decode("ascii")


class _MarksDoNotFit(Exception):
    pass


def _positions_from_marks(text: str, line_offset: int, packed: Any, value: Any
                          ) -> tuple[dict, dict] | None:
    """The keys' and values' positions the full load records, from the marks of the
    load that built value, laid out on it; None when they do not fit it or lie outside
    the text (a cache row is a stranger's)."""
    if type(packed) is not str:
        return None
    try:
        data = base64.b64decode(packed, validate=True)
    except (binascii.Error, ValueError):
        return None
    if len(data) % 4:
        return None
    packed_marks = array("H")
    packed_marks.frombytes(data)
    if sys.byteorder == "big":
        packed_marks.byteswap()
    marks = packed_marks.tolist()
    if marks and (max(marks[0::2]) > text.count("\n") or max(marks[1::2]) >> 2 > len(text)):
        return None
    count = len(marks)
    keys: dict[Path, tuple] = {}
    values: dict[Path, tuple] = {}
    at = 0
    first = line_offset + 1

    def lay(node: Any, path: Path) -> None:
        """Lays out the container node's items; its own mark is taken."""
        nonlocal at
        if type(node) is dict:
            for key, child in node.items():
                if at + 4 > count or marks[at + 1] & 3:
                    raise _MarksDoNotFit
                inner = path + (key,)
                keys[inner] = (marks[at] + first, (marks[at + 1] >> 2) + 1)
                code = marks[at + 3]
                values[inner] = (marks[at + 2] + first, (code >> 2) + 1)
                at += 4
                if code & 3 != _KIND.get(type(child), 0):
                    raise _MarksDoNotFit
                if code & 3:
                    lay(child, inner)
        else:
            for index, child in enumerate(node):
                if at + 2 > count:
                    raise _MarksDoNotFit
                inner = path + (index,)
                code = marks[at + 1]
                values[inner] = (marks[at] + first, (code >> 2) + 1)
                at += 2
                if code & 3 != _KIND.get(type(child), 0):
                    raise _MarksDoNotFit
                if code & 3:
                    lay(child, inner)

    if not count or marks[1] & 3 != _KIND.get(type(value), 0):
        return None
    at = 2
    try:
        if marks[1] & 3:
            lay(value, ())
    except (_MarksDoNotFit, RecursionError):
        return None
    return (keys, values) if at == count else None


_KIND = {dict: 1, list: 2}  # a value's kind in its mark (0: a scalar)


def _syntax_error(error: yaml.YAMLError, text: str, path: str, line_offset: int) -> Diagnostic:
    if isinstance(error, yaml.reader.ReaderError):  # no marks: a character position only
        line, column = _locate(_line_starts(text), error.position, line_offset)
        return diag("CTX012", f"invalid YAML: {error.reason} (character "
                    f"{error.character!r})", path, line, column)
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    line = (mark.line + 1 + line_offset) if mark else 1 + line_offset
    column = (mark.column + 1) if mark else 1
    problem = getattr(error, "problem", None) or str(error)
    context = getattr(error, "context", None)
    message = f"{context}: {problem}" if context else str(problem)
    context_mark = getattr(error, "context_mark", None)
    if context and context_mark is not None and context_mark is not mark:
        message += f" (it started at line {context_mark.line + 1 + line_offset})"
    lines = text.split("\n")
    index = line - 1 - line_offset
    # Tabs are the commonest cause; name them instead of the scanner's wording.
    for candidate in (index, index - 1):
        if 0 <= candidate < len(lines):
            source_line = lines[candidate]
            indent = source_line[: len(source_line) - len(source_line.lstrip(" \t"))]
            if "\t" in indent:
                return diag("CTX016", "tab character in indentation; YAML indents with "
                            "spaces only", path, candidate + 1 + line_offset,
                            indent.index("\t") + 1)
    if "nesting depth" in str(problem):
        return diag("CTX015", f"YAML nesting too deep: {problem}", path, line, column)
    return diag("CTX012", f"invalid YAML: {message}", path, line, column)
