"""The artifact writers' encodings: the same text as the standard library's."""

from __future__ import annotations

import enum
import json
import math

import pytest
from hypothesis import given, settings, strategies as st

from ctxfst.artifacts.io import indented_json, json_bytes

_SCALARS = (st.none() | st.booleans() | st.integers() | st.text()
            | st.floats(allow_nan=False, allow_infinity=False))
_KEYS = st.text() | st.integers() | st.booleans() | st.none() | \
    st.floats(allow_nan=False, allow_infinity=False)
_VALUES = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=5)
                       | st.tuples(inner, inner)
                       | st.dictionaries(_KEYS, inner, max_size=5), max_leaves=40)


@settings(max_examples=400, deadline=None)
@given(_VALUES)
def test_indented_json_is_the_standard_librarys_text(value):
    assert indented_json(value) == json.dumps(value, ensure_ascii=False, allow_nan=False,
                                              indent=2)
    assert json_bytes(value) == (json.dumps(value, ensure_ascii=False, allow_nan=False,
                                            indent=2) + "\n").encode("utf-8")


class _Level(enum.IntEnum):
    HIGH = 3


def test_subclasses_encode_as_their_base_type():
    value = {"level": _Level.HIGH, "lines": ["a", _Level.HIGH, "\u2028"], _Level.HIGH: "x"}
    assert indented_json(value) == json.dumps(value, ensure_ascii=False, indent=2)


@pytest.mark.parametrize("bad", [math.nan, [math.inf], {"x": -math.inf}])
def test_non_finite_numbers_are_refused(bad):
    with pytest.raises(ValueError):
        indented_json(bad)


@pytest.mark.parametrize("bad", [{1, 2}, [object()], {"x": b"bytes"}, {(1, 2): "tuple key"}])
def test_what_json_cannot_encode_is_refused(bad):
    with pytest.raises(TypeError):
        indented_json(bad)
