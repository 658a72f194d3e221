"""The packages the embedding models (and the ray engine, and the SIMILAR index) come
in, which the core install leaves out."""

from __future__ import annotations

import importlib
from typing import Any

MODEL_EXTRAS = ("embed", "multilingual", "e5")


def require_extra(module: str, extra: str) -> Any:
    """A model's package, or an ImportError that names the extra that installs it (the
    core install has no torch: docs/hooks.md)."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as error:
        model_note = " (a hash-N embedding_model needs no extra)" if extra in MODEL_EXTRAS \
            else ""
        raise ImportError(f"{error.name} is not installed: pip install "
                          f"'ctxfst[{extra}]'{model_note}") from None
