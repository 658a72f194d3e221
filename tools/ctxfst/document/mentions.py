"""Entity names in text: the one rule the facts extractor and graph retrieval share.

Text and names are compared as document.text.normalize gives them (NFKC, casefolded;
any run of whitespace matches the space in a name), and offsets index the text as given.
An edge of a name that is a letter or digit of a script that puts spaces between words
must not run on into a word of the text: "Go" is not found in "good" or "Go2", but is
in "Go," and in "用Go寫". An edge that is punctuation needs nothing ("C++" is found in
"C++17"), and a name in a script written without spaces (Chinese, Japanese, Korean
with its particles, Thai, ...) is found inside text of that script.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from functools import lru_cache
from itertools import chain, repeat

from .text import CJK

# Scripts written without spaces between words: a name's edge in one needs no boundary,
# and a character of one next to a name never continues the name's word.
UNSPACED = CJK + "\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff"  # + Thai, Lao, Myanmar, Khmer
_WORD_CHAR = re.compile(rf"[^\W_{UNSPACED}]")  # a letter or digit of a spaced script
_WORD = re.compile(r"[a-z0-9]+")
MIN_LENGTH = 2  # a one-character name would be found nearly everywhere
MAX_CLUSTER = 32  # characters folded together at most: a hostile run of marks stays linear
_OTHER_BLANK = re.compile(r"[^\S ]")  # whitespace becomes a space, one for one
# A text longer than this many times the names' distinct first pairs is searched for
# each pair; a shorter one is cut into its pairs (a Python loop over the text).
PAIR_SCAN_RATIO = 4


def _nfkc(text: str) -> str:
    return unicodedata.normalize("NFKC", text)


@lru_cache(maxsize=65536)
def _fold_char(char: str) -> str:
    return _nfkc(char).casefold()


def fold(text: str) -> tuple[str, list[int] | None]:
    """text as normalize() compares it, but whitespace kept (each character as a space)
    so offsets hold, and where each folded character comes from: None when folded[i]
    comes from text[i], else one index into text each, plus len(text) at the end."""
    if text.isascii():
        return _OTHER_BLANK.sub(" ", text.lower()), None
    if unicodedata.is_normalized("NFKC", text):
        whole = text.casefold()
        if len(whole) == len(text):
            return _OTHER_BLANK.sub(" ", whole), None
        pieces = [char.casefold() for char in text]  # ß is ss
    else:
        whole = _nfkc(text).casefold()
        pieces = list(map(_fold_char, text))
        if "".join(pieces) != whole:  # characters compose across (a decomposed accent)
            return _fold_clusters(text)
        if len(whole) == len(text):
            return _OTHER_BLANK.sub(" ", whole), None
    origin = list(chain.from_iterable(repeat(i, len(p)) for i, p in enumerate(pieces)))
    return _OTHER_BLANK.sub(" ", whole), origin + [len(text)]


def _fold_clusters(text: str) -> tuple[str, list[int]]:
    """fold() for text where characters compose (a decomposed accent, a half-width
    voiced mark): folded one cluster at a time, a cluster being what composes together."""
    clusters: list[tuple[int, str]] = []  # (start, characters)
    for index, char in enumerate(text):
        if clusters and len(clusters[-1][1]) < MAX_CLUSTER:
            start, chars = clusters[-1]
            if (unicodedata.combining(unicodedata.normalize("NFKD", char)[0])
                    or _nfkc(chars + char) != _nfkc(chars) + _nfkc(char)):
                clusters[-1] = (start, chars + char)  # a mark, or a jamo that composes
                continue
        clusters.append((index, char))
    folded: list[str] = []
    origin: list[int] = []
    for start, chars in clusters:
        piece = _nfkc(chars).casefold()
        folded.append(piece)
        origin.extend(repeat(start, len(piece)))
    return _OTHER_BLANK.sub(" ", "".join(folded)), origin + [len(text)]


def name_pattern(name: str) -> re.Pattern:
    """The pattern that finds a normalised name in folded text."""
    first, *rest = [re.escape(part) for part in name.split(" ")]
    body = first
    if _WORD_CHAR.match(name[0]):  # checked behind the first word: a literal start is
        body += rf"(?<!{_WORD_CHAR.pattern}{first})"  # searched for many times faster
    body += "".join(" +" + part for part in rest)
    if _WORD_CHAR.match(name[-1]):
        body += rf"(?!{_WORD_CHAR.pattern})"
    return re.compile(body)


class NameFinder:
    """Where names (normalised) occur in texts. Each name is tried only after a cheap
    filter: one with an ASCII word when its first such word occurs in the text, any
    other when its first two characters do; so thousands of names cost little a text."""

    def __init__(self, names: Iterable[str]) -> None:
        self.by_word: dict[str, list[str]] = {}
        self.other: dict[str, list[str]] = {}  # first two characters -> names
        self._patterns: dict[str, re.Pattern] = {}
        for name in sorted(set(names)):
            if len(name) < MIN_LENGTH:
                continue
            first = _WORD.search(name)
            if first is None:
                self.other.setdefault(name[:2], []).append(name)
            else:
                self.by_word.setdefault(first.group(), []).append(name)

    def _pattern(self, name: str) -> re.Pattern:
        pattern = self._patterns.get(name)
        if pattern is None:
            pattern = self._patterns[name] = name_pattern(name)
        return pattern

    def find(self, text: str) -> list[tuple[int, int, str]]:
        """(start, end, name) of every occurrence of a name in text, offsets into text."""
        if not (self.by_word or self.other):
            return []
        folded, origin = fold(text)
        candidates = [name for word in set(_WORD.findall(folded))
                      for name in self.by_word.get(word, ())]
        if self.other:
            if len(self.other) * PAIR_SCAN_RATIO < len(folded):
                # few first pairs against a long text: each one searched for (in C)
                pairs = [pair for pair in self.other if pair in folded]
            else:
                pairs = {folded[i:i + 2] for i in range(len(folded))} & self.other.keys()
            candidates += [name for pair in pairs for name in self.other[pair]
                           if " " in name or name in folded]
        found = []
        for name in candidates:
            for match in self._pattern(name).finditer(folded):
                start, end = match.span()
                if origin is not None:
                    start, end = origin[start], origin[end]
                found.append((start, end, name))
        return found

    def mentions(self, text: str) -> list[tuple[int, int, str]]:
        """The occurrences that read as mentions: leftmost first, the longest name at a
        position, no overlaps."""
        out: list[tuple[int, int, str]] = []
        end = -1
        by_place = sorted(self.find(text), key=lambda f: (f[0], f[0] - f[1], f[2]))
        for start, stop, name in by_place:  # the longest first at a start
            if start >= end:
                end = stop
                out.append((start, stop, name))
        return out
