"""Retrieval over the build artifacts."""

# Here, not in search.py: the command line lists them without importing numpy.
MODES = ("vector", "lexical", "keyword-graph", "graph", "hybrid")
# The halves of an evaluation set (retrieval/evaluate.py: a seeded hash of each id).
HALVES = ("dev", "test")
