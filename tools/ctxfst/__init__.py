"""ctxfst: a make-style compiler, validator and linter for CtxFST knowledge bases."""

__version__ = "0.1.0"
