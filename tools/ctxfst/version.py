"""ctxfst's version: in every manifest, cache key and output it writes."""

__version__ = "0.1.0"
