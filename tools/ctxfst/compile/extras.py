"""The packages the embedding models come in, which the core install leaves out."""

from __future__ import annotations

import importlib
from typing import Any


def require_extra(module: str, extra: str) -> Any:
    """A model's package, or an ImportError that names the extra that installs it (the
    core install has no torch: docs/hooks.md)."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as error:
        raise ImportError(f"{error.name} is not installed: pip install 'ctxfst[{extra}]' "
                          "(a hash-N embedding_model needs no extra)") from None
