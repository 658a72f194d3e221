"""Retrieval over the build artifacts."""

# Here, not in search.py: the command line lists them without importing numpy.
MODES = ("vector", "lexical", "keyword-graph", "graph", "hybrid")
