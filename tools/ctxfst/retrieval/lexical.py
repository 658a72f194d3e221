"""Lexical scoring shared by retrieval and the facts fallback: Okapi BM25 over the
linter's tokens (words and CJK bigrams), and a deterministic top-k."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def lexical_text(chunk: dict[str, Any]) -> str:
    """What lexical search reads of a chunk: its context, content and tags."""
    return " ".join([chunk.get("context") or "", chunk.get("content") or "",
                     " ".join(chunk.get("tags") or [])])


def top_rows(values: np.ndarray, count: int) -> list[int]:
    """Rows of the `count` largest values, best first; ties by row (ids are sorted)."""
    count = min(count, len(values))
    if count <= 0:
        return []
    if count < len(values):
        kth = np.partition(values, len(values) - count)[len(values) - count]
        candidates = np.nonzero(values >= kth)[0]
    else:
        candidates = np.arange(len(values))
    order = np.lexsort((candidates, -values[candidates]))
    return [int(row) for row in candidates[order][:count]]


def top_positive_rows(values: np.ndarray, count: int) -> list[int]:
    """top_rows among the rows with a value above zero (BM25: the chunks a query's words
    reach), ranked over those rows alone."""
    rows = np.flatnonzero(values > 0)
    return [int(rows[slot]) for slot in top_rows(values[rows], count)]


class BM25:
    """Okapi BM25 with postings as flat arrays: a query adds a few array slices into one
    score vector, so its cost follows the postings it touches, not Python loops."""

    K1, B = 1.5, 0.75

    def __init__(self, terms: list[str], idf: np.ndarray, starts: np.ndarray,
                 rows: np.ndarray, weights: np.ndarray, size: int) -> None:
        self.term_ids = {term: number for number, term in enumerate(terms)}
        self.terms, self.idf, self.starts = terms, idf, starts
        self.rows, self.weights, self.size = rows, weights, size

    @classmethod
    def build(cls, documents: list[list[str]]) -> BM25:
        """The index of tokenised documents. Terms are numbered in order of first
        appearance; each term's postings list its documents in ascending order. (One
        flat pass in Python, then numpy: a Counter a document took 2 s at 70,000.)"""
        size = len(documents)
        lengths = np.fromiter((len(doc) for doc in documents), np.int64, size)
        vocabulary: dict[str, int] = {}
        number = vocabulary.setdefault
        ids = np.fromiter((number(term, len(vocabulary)) for doc in documents for term in doc),
                          np.int64, int(lengths.sum()))
        owners = np.repeat(np.arange(size, dtype=np.int64), lengths)
        # each (term, document) pair once, with its count, ordered by term then document
        pairs, tf = np.unique(ids * max(size, 1) + owners, return_counts=True)
        ids, rows = pairs // max(size, 1), (pairs % max(size, 1)).astype(np.int32)
        tf = tf.astype(np.float64)
        average = float(lengths.mean()) if size else 0.0
        norm = tf + cls.K1 * (1 - cls.B + cls.B * lengths[rows] / (average or 1.0))
        frequency = np.bincount(ids, minlength=len(vocabulary)).astype(np.float64)
        idf = np.log(1 + (size - frequency + 0.5) / (frequency + 0.5))
        starts = np.concatenate([[0], np.cumsum(frequency)]).astype(np.int64)
        terms = list(vocabulary)  # (in number order: a dict keeps insertion order)
        return cls(terms, idf, starts, rows, (tf * (cls.K1 + 1) / norm).astype(np.float32),
                   size)

    def save(self, path: Path) -> None:
        import io

        from ..artifacts.io import write_atomic

        buffer = io.BytesIO()
        np.savez(buffer, terms=np.array(self.terms, dtype=str), idf=self.idf,
                 starts=self.starts, rows=self.rows, weights=self.weights,
                 size=np.array([self.size]))
        write_atomic(path, buffer.getvalue())

    @classmethod
    def load(cls, path: Path, size: int) -> BM25:
        """A saved index for `size` documents; ValueError when the file is not one that
        save() wrote: the cache folder may come with a stranger's knowledge base."""
        import zipfile

        try:
            # save() stores members uncompressed; a compressed one could inflate to any size.
            with zipfile.ZipFile(path) as archive:
                if any(info.compress_type != zipfile.ZIP_STORED for info in archive.infolist()):
                    raise ValueError("compressed members")
            with np.load(path, allow_pickle=False) as data:
                terms, idf, starts = data["terms"], data["idf"], data["starts"]
                rows, weights, saved = data["rows"], data["weights"], int(data["size"][0])
        except Exception as error:  # truncated, foreign or damaged: the caller rebuilds
            raise ValueError(f"{path}: not a lexical index ({error})") from None
        arrays = (terms, idf, starts, rows, weights)
        consistent = ("".join(array.dtype.kind for array in arrays) == "Ufiif"  # as saved
                      and all(array.ndim == 1 for array in arrays) and saved == size
                      and len(starts) == len(terms) + 1 == len(idf) + 1
                      and int(starts[0]) == 0 and int(starts[-1]) == len(rows) == len(weights)
                      and bool(np.all(np.diff(starts) >= 0))
                      and bool(np.all(np.isfinite(idf))) and bool(np.all(np.isfinite(weights)))
                      and (len(rows) == 0 or 0 <= int(rows.min()) <= int(rows.max()) < size))
        if not consistent:
            raise ValueError(f"{path}: a lexical index of another shape")
        return cls(terms.tolist(), idf, starts, rows, weights, saved)

    def scores(self, query: list[str]) -> np.ndarray:
        # The query's postings in one pass (bincount), terms in a fixed order: each row
        # sums its terms in that order, so the floats do not depend on hashing.
        numbers = [self.term_ids[term] for term in sorted(set(query)) if term in self.term_ids]
        if not numbers:
            return np.zeros(self.size, np.float64)
        spans = [slice(self.starts[number], self.starts[number + 1]) for number in numbers]
        rows = np.concatenate([self.rows[span] for span in spans])
        weights = np.concatenate([self.idf[number] * self.weights[span]
                                  for number, span in zip(numbers, spans, strict=True)])
        return np.bincount(rows, weights, minlength=self.size)
