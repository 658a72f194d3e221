"""Plain Markdown as blocks: headings, paragraphs, lists, quotes, tables and code.

Only what chunking needs: where each block starts and ends (in lines, endings kept, so
the blocks put back together are the text byte for byte), headings with their level and
text, and a list's top-level items (the places a long list may be cut). A fence, table or
indented code block is one block that is never cut.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")
_ATX = re.compile(r" {0,3}(#{1,6})(?=[ \t]|$)")
_SETEXT = re.compile(r" {0,3}(=+|-+)[ \t]*$")
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})(.*)$")
_LIST_ITEM = re.compile(r"( {0,3})([-*+]|\d{1,9}[.)])(?:[ \t]|$)")
_QUOTE = re.compile(r" {0,3}>")
# (possessive: a hostile line of spaces costs one pass, not one per start)
_TABLE_RULE = re.compile(r"[ \t]*+\|?+[ \t]*+:?+-++:?+[ \t]*+"
                         r"(?:\|[ \t]*+:?+-++:?+[ \t]*+)*+\|?+[ \t]*+$")
_THEMATIC = re.compile(r" {0,3}([-*_])([ \t]*\1){2,}[ \t]*$")
_INDENTED = re.compile(r"(?: {4}|\t)")
_CHUNK_MARKER = re.compile(r"</?chunk\b|%%\s*chunk-(?:start|end)\b", re.IGNORECASE)


@dataclass
class Block:
    kind: str            # heading, paragraph, list, quote, table, code, rule
    start: int           # first line (0-based)
    end: int             # one past the last line
    level: int = 0       # headings: 1-6
    title: str = ""      # headings: the text
    items: list[int] = field(default_factory=list)  # lists: the lines items start on
    unclosed: bool = False  # a code fence that runs to the end of the text


def split_lines(text: str) -> list[str]:
    """Lines with their endings (LF, CRLF or CR), so "".join() gives text back."""
    return _LINE.findall(text)


def _bare(line: str) -> str:
    return line.rstrip("\r\n")


def _blank(line: str) -> bool:
    return not line.strip()


def _starts_other_block(line: str) -> bool:
    """A line that ends a paragraph: a heading, a fence, a quote, a list, a rule."""
    bare = _bare(line)
    return bool(_ATX.match(bare) or _FENCE.match(bare) or _QUOTE.match(bare)
                or _LIST_ITEM.match(bare) or _THEMATIC.match(bare))


def blocks(lines: list[str]) -> list[Block]:
    """The blocks of a Markdown body, in order; blank lines belong to no block."""
    out: list[Block] = []
    index, count = 0, len(lines)
    while index < count:
        line = _bare(lines[index])
        if _blank(line):
            index += 1
            continue
        start = index
        heading = _ATX.match(line)
        fence = _FENCE.match(line)
        if fence:  # (as the CtxFST parser sees fences: its chunk tags obey them)
            index, closed = _fence_end(lines, index, fence.group(1))
            out.append(Block("code", start, index, unclosed=not closed))
        elif heading:
            out.append(Block("heading", start, index + 1, len(heading.group(1)),
                             _atx_title(line[heading.end():])))
            index += 1
        elif _THEMATIC.match(line):
            out.append(Block("rule", start, index + 1))
            index += 1
        elif _INDENTED.match(line) and (not out or out[-1].end < start):
            index = _indented_end(lines, index)
            out.append(Block("code", start, index))
        elif _QUOTE.match(line):
            while index < count and not _blank(lines[index]):
                index += 1
            out.append(Block("quote", start, index))
        elif _LIST_ITEM.match(line):
            index, items = _list_end(lines, index)
            out.append(Block("list", start, index, items=items))
        elif ("|" in line and index + 1 < count and "|" in lines[index + 1] + line
              and _TABLE_RULE.match(_bare(lines[index + 1])) and "-" in lines[index + 1]):
            index += 2
            while index < count and not _blank(lines[index]) and "|" in lines[index]:
                index += 1
            out.append(Block("table", start, index))
        else:
            index += 1
            while index < count and not _blank(lines[index]):
                bare = _bare(lines[index])
                underline = _SETEXT.match(bare)
                if underline:  # the paragraph is a heading's text
                    level = 1 if underline.group(1)[0] == "=" else 2
                    title = " ".join(_bare(text).strip() for text in lines[start:index])
                    out.append(Block("heading", start, index + 1, level, title))
                    index += 1
                    break
                if _starts_other_block(bare):
                    break
                index += 1
            else:
                out.append(Block("paragraph", start, index))
                continue
            if not out or out[-1].start != start:
                out.append(Block("paragraph", start, index))
    return out


def _atx_title(rest: str) -> str:
    """An ATX heading's text: without its closing run of #s (one after a space)."""
    text = rest.strip(" \t")
    bare = text.rstrip("#")
    if bare != text and (not bare or bare[-1] in " \t"):
        text = bare.rstrip(" \t")
    return text


def _fence_end(lines: list[str], index: int, marker: str) -> tuple[int, bool]:
    """One past a fenced block's closing line, and whether it has one (else the block
    runs to the end of the text). A closing line is the fence's character alone, at
    least as many times: the rule the CtxFST parser follows."""
    for close in range(index + 1, len(lines)):
        bare = _bare(lines[close]).strip()
        if len(bare) >= len(marker) and bare == marker[0] * len(bare):
            return close + 1, True
    return len(lines), False


def _indented_end(lines: list[str], index: int) -> int:
    end = index + 1
    for probe in range(index + 1, len(lines)):
        if _blank(lines[probe]):
            continue
        if not _INDENTED.match(lines[probe]):
            break
        end = probe + 1
    return end


def _list_end(lines: list[str], index: int) -> tuple[int, list[int]]:
    """One past a list, and where its top-level items start. A list goes on through
    blank lines while what follows is indented or another item at its level."""
    first = _LIST_ITEM.match(_bare(lines[index]))
    assert first is not None
    indent = len(first.group(1))
    items = [index]
    end = index + 1
    fence: str | None = None
    for probe in range(index + 1, len(lines)):
        bare = _bare(lines[probe])
        if fence is not None:  # a fence inside an item is part of it, blank lines too
            end = probe + 1
            if bare.strip() and bare.strip() == fence[0] * len(bare.strip()) \
                    and len(bare.strip()) >= len(fence):
                fence = None
            continue
        if _blank(bare):
            continue
        lead = len(bare) - len(bare.lstrip(" "))
        item = _LIST_ITEM.match(bare)
        inner_fence = _FENCE.match(bare.lstrip(" "))
        if item and len(item.group(1)) <= indent + 1 and lead <= indent + 1:
            items.append(probe)
        elif lead > indent:
            pass  # a continuation or a nested item
        elif end == probe:  # a lazy continuation line right after the item's text
            if _starts_other_block(bare):
                break
        else:
            break
        if inner_fence and lead > indent:
            fence = inner_fence.group(1)
        end = probe + 1
    return end, items


def chunk_marker_line(lines: list[str], parts: list[Block] | None = None) -> int | None:
    """The first line (0-based) outside code with a chunk tag or marker in it, if any:
    a note with one would not survive being wrapped in chunks. parts: blocks(lines)."""
    code = {line for block in (parts if parts is not None else blocks(lines))
            if block.kind == "code"
            for line in range(block.start, block.end)}
    for number, line in enumerate(lines):
        if number in code:
            continue
        outside_spans = re.sub(r"`+[^`]*`+", "", line)
        if _CHUNK_MARKER.search(outside_spans):
            return number
    return None
