"""Edits to a document's YAML frontmatter that keep everything else as it was: comments,
key order, quoting, flow or block style, line endings.

Each edit is made on the file's lines at the places the parser's source map gives, and
applied to a copy of the parsed data too; the edited text is parsed again and must give
that data exactly, or the edit is refused (EditRefused) and the file is left alone.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
from typing import Any

from .markdown import split_lines

# A plain scalar that reads back as the same string in block and flow context alike: it
# starts with a letter, holds no flow indicator or comment, and is no YAML 1.1 keyword.
_PLAIN_SAFE = re.compile(r"[A-Za-z][A-Za-z0-9_.:/+()' -]*[A-Za-z0-9_.+)/-]|[A-Za-z]")
_RESERVED = frozenset("true false yes no on off null y n".split())


class EditRefused(ValueError):
    """The edit cannot be made without touching more than it should."""


def scalar_text(value: str) -> str:
    """A string as YAML: plain where that reads back the same, else double-quoted."""
    if _PLAIN_SAFE.fullmatch(value) and value.lower() not in _RESERVED \
            and ": " not in value and "  " not in value:
        return value
    return json.dumps(value, ensure_ascii=False)


def flow_list(values: list[str]) -> str:
    return "[" + ", ".join(scalar_text(value) for value in values) + "]"


class FrontmatterEditor:
    def __init__(self, raw: str, doc) -> None:
        self.lines = split_lines(raw)
        self.newline = "\r\n" if "\r\n" in raw else "\n"
        self.source = doc.source_map
        self.path = doc.path
        self.data = copy.deepcopy(doc.frontmatter)
        self.original = doc.frontmatter
        # (line index, column index, end column index or None for an insert of a line,
        # new text): applied from the end of the text to its start
        self._edits: list[tuple[int, int, int | None, str]] = []

    # -- places ---------------------------------------------------------------------------

    def _value_pos(self, key_path: tuple) -> tuple[int, int]:
        found = self.source.values.get(key_path)
        if found is None:
            raise EditRefused(f"no place for {key_path}")
        return found[0] - 1, found[1] - 1

    def _is_flow(self, container: tuple) -> bool:
        line, column = self._value_pos(container)
        return self.lines[line][column:column + 1] in ("[", "{")

    def _token_end(self, line: int, column: int, flow: bool) -> int:
        text = self.lines[line].rstrip("\r\n")
        if column >= len(text):
            return column
        quote = text[column]
        if quote in "\"'":
            index = column + 1
            while index < len(text):
                if quote == '"' and text[index] == "\\":
                    index += 2
                    continue
                if text[index] == quote:
                    if quote == "'" and text[index + 1:index + 2] == "'":
                        index += 2
                        continue
                    return index + 1
                index += 1
            raise EditRefused("a quoted value runs over its line")
        end = len(text)
        comment = text.find(" #", column)
        if comment >= 0:
            end = comment
        if flow:
            stops = [i for i in (text.find(c, column) for c in ",]}") if i >= 0]
            end = min([end, *stops])
        return len(text[:end].rstrip())

    # -- edits ----------------------------------------------------------------------------

    def set_scalar(self, key_path: tuple, value: str) -> None:
        """Replace the single-line scalar at key_path."""
        line, column = self._value_pos(key_path)
        key = self.source.keys.get(key_path)
        if key is not None and key[0] - 1 != line:
            raise EditRefused(f"the value of {key_path} is not on its key's line")
        end = self._token_end(line, column, self._is_flow(key_path[:-1]))
        quote = self.lines[line][column:column + 1]
        if quote == '"':  # the value keeps its quoting
            text = json.dumps(value, ensure_ascii=False)
        elif quote == "'":
            text = "'" + value.replace("'", "''") + "'"
        else:
            text = scalar_text(value)
        if self.lines[line][:column].endswith(":"):  # `key:` with nothing after it
            text = " " + text
        self._edits.append((line, column, end, text))
        _set(self.data, key_path, value)

    def delete_item(self, key_path: tuple) -> None:
        """Remove a single-line item from a list (flow: with its comma)."""
        container = key_path[:-1]
        line, column = self._value_pos(key_path)
        if self._is_flow(container):
            text = self.lines[line]
            end = self._token_end(line, column, True)
            after = text[end:]
            gap = len(after) - len(after.lstrip(" "))
            if after[gap:gap + 1] == ",":  # "a, " goes with the item
                rest = after[gap + 1:]
                end += gap + 1 + len(rest) - len(rest.lstrip(" "))
            else:  # the last item: its comma before goes
                before = text[:column].rstrip(" ")
                if before.endswith(","):
                    column = len(before) - 1
            self._edits.append((line, column, end, ""))
        else:
            text = self.lines[line].rstrip("\r\n")
            if not text[:column].strip() == "-":
                raise EditRefused(f"list item {key_path} shares its line")
            self._edits.append((line, 0, -1, ""))  # the whole line
        _parent(self.data, key_path).pop(key_path[-1])

    def insert_key(self, mapping: tuple, key: str, value_text: str, value: Any,
                   after: str = "id") -> None:
        """Add `key: value` to a mapping: a line under its `after` key (block style), or
        first inside the braces (flow style)."""
        anchor = self.source.keys.get((*mapping, after))
        if anchor is None:
            raise EditRefused(f"no {after!r} key to place {key!r} by")
        line, column = anchor[0] - 1, anchor[1] - 1
        if self._is_flow(mapping):
            self._edits.append((line, column, column, f"{key}: {value_text}, "))
        else:
            self._edits.append((line, column, None, f"{' ' * column}{key}: {value_text}"))
        _get(self.data, mapping)[key] = value

    def append_items(self, key: str, items: list[dict[str, str]]) -> None:
        """Append mappings of plain strings to the top-level block list `key` (made when
        missing), after its last line."""
        if not items:
            return
        rendered = ", ".join
        if key not in self.data:
            last = self._closing_line()
            lines = [f"{key}:"] + [
                "  - {" + rendered(f"{k}: {scalar_text(v)}" for k, v in item.items()) + "}"
                for item in items]
            self._edits.append((last - 1, 0, None, self.newline.join(lines)))
            self.data[key] = list(items)
            return
        if not isinstance(self.data[key], list) or not self.data[key] or self._is_flow((key,)):
            raise EditRefused(f"{key} is not a block list to append to")
        first_line, column = self._value_pos((key, 0))
        dash = self.lines[first_line].rfind("-", 0, column + 1)
        if dash < 0:
            raise EditRefused(f"no '-' before the first item of {key}")
        end = self._block_end(self.source.keys[(key,)][0] - 1)
        lines = [" " * dash + "- {" + rendered(f"{k}: {scalar_text(v)}" for k, v in item.items())
                 + "}" for item in items]
        self._edits.append((end, 0, None, self.newline.join(lines)))
        self.data[key].extend(items)

    def replace_text(self, line: int, start: int, end: int, new: str) -> None:
        """Replace columns start:end of a line outside the frontmatter (a body tag)."""
        if line <= self._closing_line():
            raise EditRefused("replace_text is for the body")
        self._edits.append((line, start, end, new))

    def _closing_line(self) -> int:
        for index in range(1, len(self.lines)):
            if self.lines[index].rstrip("\r\n").rstrip() in ("---", "..."):
                return index
        raise EditRefused("the frontmatter is not closed")

    def _block_end(self, key_line: int) -> int:
        """The last line of a top-level key's block (its indented lines, comments and
        blank lines between them)."""
        last = key_line
        closing = self._closing_line()
        for index in range(key_line + 1, closing):
            text = self.lines[index].rstrip("\r\n")
            if not text.strip() or text.lstrip().startswith("#"):
                continue
            if text[0] in " -\t":
                last = index
                continue
            break
        return last

    # -- the result -----------------------------------------------------------------------

    @property
    def changed(self) -> bool:
        return bool(self._edits)

    def text(self) -> str:
        lines = list(self.lines)
        for line, column, end, new in sorted(self._edits, key=lambda e: (e[0], e[1]),
                                             reverse=True):
            if end is None:  # a new line after `line`
                if not lines[line].endswith(("\n", "\r")):
                    lines[line] += self.newline
                lines.insert(line + 1, new + self.newline)
            elif end == -1:
                lines[line] = ""
            else:
                lines[line] = lines[line][:column] + new + lines[line][end:]
        result = "".join(lines)
        self._check(result)
        return result

    def _check(self, text: str) -> None:
        from ..document.parse import load_frontmatter

        found: list = []
        after, _, _ = load_frontmatter(text.replace("\r\n", "\n").replace("\r", "\n"),
                                       self.path, found)
        if after is None or _plain(after) != _plain(self.data):
            raise EditRefused("the edit would change more than it should")


def reorder_items(raw: str, doc, key: str, order: list[int]) -> str:
    """raw with the items of the top-level block list `key` in `order` (indexes into the
    list), each item moved whole: its lines and the comment lines right above it."""
    editor = FrontmatterEditor(raw, doc)
    items = doc.frontmatter.get(key)
    if not isinstance(items, list) or sorted(order) != list(range(len(items))):
        raise EditRefused(f"{key}: not a list to reorder")
    if len(items) < 2 or editor._is_flow((key,)):
        raise EditRefused(f"{key} is not a block list to reorder")
    lines = editor.lines
    starts: list[int] = []
    for index in range(len(items)):
        line, column = editor._value_pos((key, index))
        dash = lines[line].rfind("-", 0, column + 1)
        if dash < 0 or lines[line][:dash].strip():
            raise EditRefused(f"{key} item {index} does not start its line")
        while line > 0 and lines[line - 1].lstrip().startswith("#") \
                and (not starts or line - 1 > starts[-1]):
            line -= 1  # the comments right above go with the item
        starts.append(line)
    end = editor._block_end(editor.source.keys[(key,)][0] - 1) + 1
    if starts != sorted(starts):
        raise EditRefused(f"{key} items are not in the order they are written")
    spans = [lines[start:stop] for start, stop in itertools.pairwise([*starts, end])]
    for index, span in enumerate(spans):  # the last line of each item ends a line
        if span and not span[-1].endswith(("\n", "\r")):
            spans[index] = [*span[:-1], span[-1] + editor.newline]
    new = lines[:starts[0]] + [line for index in order for line in spans[index]] + lines[end:]
    text = "".join(new)
    editor.data[key] = [items[index] for index in order]
    editor._check(text)
    return text


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def _get(data: Any, key_path: tuple) -> Any:
    for key in key_path:
        data = data[key]
    return data


def _parent(data: Any, key_path: tuple) -> Any:
    return _get(data, key_path[:-1])


def _set(data: Any, key_path: tuple, value: Any) -> None:
    _parent(data, key_path)[key_path[-1]] = value
