"""A project's build opened for answering: the freshness policy, the retrieval index and
the embedding model, loaded once. A CLI command opens one per process; `ctxfst serve`
keeps one per published build and opens the next when the build's manifest changes."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .config import Config, find_project
from .files import WalkMemory
from .retrieval.search import Index, Result, RetrievalError, load_skill_graph, search


@dataclass
class QueryRequest:
    """One query's arguments, as `ctxfst query` and the server take them."""

    text: str
    mode: str = "graph"
    top_k: int = 5
    hops: int = 2
    bridge_model: str = "use-multilingual"


@dataclass
class Workspace:
    config: Config | None
    build_dir: Path
    _index: Index | None = field(default=None, repr=False)
    _embedder: Any = field(default=None, repr=False)
    _embed_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    # the project's listings, kept between staleness checks (a server asks every ten seconds)
    walks: WalkMemory = field(default_factory=WalkMemory, repr=False)

    @classmethod
    def open(cls, cwd: Path, build: Path | None = None) -> Workspace:
        """The project at or above cwd (its build folder, or `build`); RetrievalError
        when there is neither."""
        config = find_project(cwd)
        build_dir = build or (config.build_dir if config else None)
        if build_dir is None:
            raise RetrievalError("no ctxfst project here; pass --build DIR")
        return cls(config, build_dir)

    @property
    def cache_dir(self) -> Path | None:
        return self.config.cache_dir if self.config else None

    @property
    def is_project_build(self) -> bool:
        return self.config is not None and \
            self.build_dir.resolve() == self.config.build_dir.resolve()

    def stale_reason(self) -> str | None:
        """Why the project's own build does not reflect its sources (None when it does,
        or when the build folder is another one: there are no sources to compare)."""
        if not self.is_project_build:
            return None
        from .freshness import stale_reason

        return stale_reason(self.config, self.build_dir, self.walks)

    def check_fresh(self) -> None:
        reason = self.stale_reason()
        if reason:
            raise RetrievalError(f"{reason} (or pass --allow-stale)")

    @property
    def model_spec(self) -> str:
        """The configured embedding model, or the one the vectors were made with."""
        if self.config is not None:
            return self.config.build.embedding_model
        return self.index.model_id

    @property
    def index(self) -> Index:
        if self._index is None:
            from .compile.embed import model_id_of

            model = self.config.build.embedding_model if self.config else None
            self._index = Index(self.build_dir, model_id_of(model) if model else None,
                                self.cache_dir)
        return self._index

    @property
    def embedder(self):
        if self._embedder is None:
            from .compile.embed import get_embedder

            self._embedder = get_embedder(self.model_spec, self.config.embedding_device
                                          if self.config else "auto")
        return self._embedder

    def embed(self, texts: list[str]):
        """Questions' vectors (the build embeds its texts as passages)."""
        try:
            with self._embed_lock:  # one model, many server threads
                return self.embedder.encode_queries(texts)
        except (ImportError, OSError, ValueError) as error:  # a model that cannot load
            raise RetrievalError(f"the embedding model {self.model_spec!r} could not be "
                                 f"used: {error}") from None

    def bridge_for(self, text: str, bridge_model: str):
        if bridge_model == "none":
            return None
        return self.index.bridge(text, self.embedder.readable_fraction(text), bridge_model,
                                 self.cache_dir)

    def skill_graph(self, path: Path | None) -> dict[str, Any] | None:
        """The hand-made skill graph for keyword-graph mode: the given file, else the
        project's skill-graph.json when there is one."""
        graph_file = path or (self.config.root / "skill-graph.json" if self.config else None)
        if graph_file is None or not (path or graph_file.is_file()):
            return None
        return load_skill_graph(graph_file)

    def query(self, request: QueryRequest, skill_graph: dict[str, Any] | None = None
              ) -> tuple[Result, float]:
        """The query's result, and the seconds spent embedding it."""
        import time

        started = time.perf_counter()
        index = self.index
        vector = None if request.mode in ("lexical", "keyword-graph") else \
            self.embed([request.text])[0]
        bridge = self.bridge_for(request.text, request.bridge_model) \
            if request.mode in ("graph", "hybrid") else None
        embedded = time.perf_counter() - started
        return search(index, request.text, vector, request.mode, request.top_k, request.hops,
                      skill_graph, bridge), embedded
