"""ctxfst: a make-style compiler, validator and linter for CtxFST knowledge bases."""

from .version import __version__

__all__ = ["__version__"]
