"""The one entity-name matcher (document.mentions) the facts extractor and graph retrieval
share: word boundaries where a name's edge is a letter or digit of a spaced script, none
at punctuation or in CJK text, compared normalised (case, full-width forms, line breaks)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxfst.document.mentions import NameFinder, fold
from ctxfst.document.text import normalize
from ctxfst.facts.extractors import Catalog

NAMES = ["Go", "C++", ".NET", "Node.js", "東京", "서울", "New York", "York", "Python",
         "café", "Straße", "x"]


def found(text: str) -> list[str]:
    """The names found in text, as written there."""
    finder = NameFinder(normalize(name) for name in NAMES)
    return [text[start:end] for start, end, _ in finder.mentions(text)]


@pytest.mark.parametrize("text, expected", [
    ("a good day", []),                          # Go is not in "good"
    ("Go2 and goto", []),                        # nor runs on into a word or a number
    ("I write Go, daily", ["Go"]),
    ("用Go寫程式", ["Go"]),                        # Latin next to CJK: still a word edge
    ("C++17 beats c++ and xC++", ["C++", "c++"]),  # punctuation edges need no boundary
    ("ASP.NET and Node.jsx vs Node.js", [".NET", "Node.js"]),
    ("我住在東京都", ["東京"]),                      # CJK names inside CJK text
    ("서울에서 왔어요", ["서울"]),                    # Korean, particle attached
    ("PYTHON or python, not pythonic", ["PYTHON", "python"]),  # any case
    ("ＧＯ ｇｏ", ["ＧＯ", "ｇｏ"]),                 # full-width forms
    ("from New\n  York", ["New\n  York"]),        # a name wrapped across lines
    ("cafés, or a cafe\u0301", ["cafe\u0301"]),   # boundaries for accented Latin too
    ("STRASSE", ["STRASSE"]),                     # casefolded: ß is ss
    ("x marks", []),                              # one-character names are not tried
])
def test_names_are_found_on_one_rule(text, expected):
    assert found(text) == expected


def test_mentions_are_leftmost_longest_and_find_is_every_occurrence():
    finder = NameFinder(["new york", "york"])
    assert finder.mentions("New York, York") == [(0, 8, "new york"), (10, 14, "york")]
    assert sorted(finder.find("New York")) == [(0, 8, "new york"), (4, 8, "york")]


@pytest.mark.parametrize("text", ["plain ascii\ttext", "用Go寫程式，好嗎？", "Ｇｏ…ok ß ﬁne",
                                  "cafe\u0301 ｶﾞｷﾞ", "\u00a0nbsp\u3000space"])
def test_fold_is_normalize_with_offsets_kept(text):
    folded, origin = fold(text)
    assert " ".join(folded.split()) == normalize(text)
    if origin is None:
        assert len(folded) == len(text)
    else:
        assert len(origin) == len(folded) + 1 and origin[-1] == len(text)
        assert origin == sorted(origin)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=24))  # below MAX_CLUSTER: a longer run of marks is cut there
def test_fold_agrees_with_normalize_on_any_text(text):
    folded, origin = fold(text)
    assert " ".join(folded.split()) == normalize(text)
    assert origin is None or (origin == sorted(origin) and origin[-1] == len(text))


def test_the_facts_catalog_uses_the_finder():
    catalog = Catalog.build({"entity:go": ["Go", "Golang"], "entity:tokyo": ["東京"]})
    passage = "Golang is good; 用Go在東京"
    assert catalog.mentions(passage) == [(0, 6, "entity:go"), (17, 19, "entity:go"),
                                         (20, 22, "entity:tokyo")]
    assert Catalog().mentions(passage) == []


_ALPHABET = "ab東京서울 ,.Gg"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(_ALPHABET, min_size=1, max_size=5), max_size=8),
       st.text(_ALPHABET, max_size=60))
def test_names_are_found_the_same_whether_a_text_is_cut_into_pairs_or_searched(
        names, text):
    """A long text is searched for each name's first pair, a short one cut into its
    pairs: both find every occurrence of every name."""
    from unittest import mock

    from ctxfst.document import mentions

    finder = NameFinder(normalize(name) for name in names)
    answers = []
    for ratio in (0, 10 ** 9):  # always searched; always cut
        with mock.patch.object(mentions, "PAIR_SCAN_RATIO", ratio):
            answers.append(sorted(finder.find(text)))
    assert answers[0] == answers[1]
