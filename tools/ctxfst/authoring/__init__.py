"""Authoring: plain Markdown notes into CtxFST (chunk), contexts from a language model
(contextualize), and the safe mechanical fixes (lint --fix).

This module stays light: the command line reads its defaults on every run.
"""

from __future__ import annotations

import re

DEFAULT_MAX_TOKENS = 256  # MiniLM reads 256 word pieces; e5-small 512
DEFAULT_MIN_TOKENS = 40   # a smaller section joins the next one
DEFAULT_CATEGORY = "note"
_CATEGORY = re.compile(r"[a-z0-9]+")


def check_category(category: str) -> str:
    """A chunk id's first part as `ctxfst chunk --category` takes it."""
    if not _CATEGORY.fullmatch(category):
        raise ValueError("a category is lowercase ASCII letters and digits, such as note")
    return category
