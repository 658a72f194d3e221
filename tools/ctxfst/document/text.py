"""Language-aware text helpers: tokens and lengths for English and CJK text alike."""

from __future__ import annotations

import re
import unicodedata

# Scripts tokenised as character bigrams (no spaces between words to split on).
CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af"
# (possessive: a word never gives back characters, so no backtracking to try)
_WORD = r"[a-z0-9][a-z0-9+#]*+(?:[._-][a-z0-9+#]++)*+"
_TOKEN = re.compile(rf"{_WORD}|[{CJK}]+")
_ASCII_WORD = re.compile(_WORD)  # ASCII text has no CJK run to try at each character
_CJK_RUN = re.compile(rf"[{CJK}]")
_STOPWORDS = frozenset(
    "a an and are as at be by for from has have in into is it its of on or that the "
    "this to was were with which we you i my our your not but can".split()
)


def normalize(text: str) -> str:
    """NFKC + casefold + collapsed whitespace: the form entity names, tags and fact
    values are compared and stored in (document.mentions finds names in this form)."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def is_cjk_token(token: str) -> bool:
    """A token of tokens() that is CJK (a character or a bigram), not a Latin word."""
    return token[0] > "\u2fff"  # the token regex yields CJK runs only above U+3000


def tokens(text: str) -> list[str]:
    """Words for Latin-script text, character bigrams for CJK runs (no segmenter needed)."""
    folded = text.lower() if text.isascii() else unicodedata.normalize("NFKC", text).casefold()
    if folded.isascii():  # no CJK run: words only
        return [t for t in _ASCII_WORD.findall(folded) if len(t) > 1 and t not in _STOPWORDS]
    found: list[str] = []
    for token in _TOKEN.findall(folded):
        if is_cjk_token(token):
            if len(token) == 1:
                found.append(token)
            else:
                found.extend(token[i:i + 2] for i in range(len(token) - 1))
        elif len(token) > 1 and token not in _STOPWORDS:
            found.append(token)
    return found


def script_mix(text: str) -> tuple[int, int]:
    """(Latin-script words, CJK characters) in text."""
    latin = 0
    cjk = 0
    for match in _TOKEN.finditer(text.casefold()):
        token = match.group()
        if _CJK_RUN.match(token):
            cjk += len(token)
        else:
            latin += 1
    return latin, cjk


def word_count(text: str) -> int:
    """Length in word-equivalents: a Latin word is one, two CJK characters are one."""
    latin, cjk = script_mix(text)
    return latin + (cjk + 1) // 2


def jaccard(first: set, second: set) -> float:
    if not first or not second:
        return 0.0
    shared = len(first & second)
    return shared / (len(first) + len(second) - shared)
