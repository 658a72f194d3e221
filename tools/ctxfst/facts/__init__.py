"""Semantic facts read model: extraction (build stage only), store, query (docs/facts.md)."""
