"""The `ray` engine: the build's per-document parsing and its embedding cache misses
run as Ray Data pipelines.

Parsing: the driver (the build) reads each document it has no parse-cache row for and
hands its bytes to the cluster; a task parses it and returns the row the local engine
would have cached (document/kb.py), which the driver decodes, caches and links.

Embedding: the driver cuts the texts into batches of `embed_batch_size`, in the order the
local engine embeds them; each batch goes whole to one actor, which loads the model
once and embeds its texts as the local engine does (one text at a time), so a text's
vector does not depend on where it was made. The vectors come back to the driver, which
fills the embedding cache.

Linking, checking and publishing stay on the driver. Nothing imports Ray unless the
engine is `ray`, and nothing connects to a cluster until a stage has enough work for it.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..parallel import PARALLEL_THRESHOLD, forked_map, usable_cores
from .extras import require_extra


class RayEngineError(RuntimeError):
    """The cluster could not be reached, or the pipeline failed; the message says how."""


class _Encoder:
    """One actor: the model, loaded once, and the batches given to it."""

    def __init__(self, spec: str, device: str, batch_size: int) -> None:
        from .embed import get_embedder

        self.embedder = get_embedder(spec, device)
        self.batch_size = batch_size

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        vectors = []
        for texts in batch["texts"]:
            made = np.ascontiguousarray(
                self.embedder.encode([str(text) for text in texts], self.batch_size, False),
                np.float32)
            vectors.append(made.tobytes())
        return {"batch": batch["batch"], "vectors": np.array(vectors, dtype=object)}


THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def _thread_settings() -> dict[str, str]:
    """The thread pools this process's numerical libraries would use, for the actors:
    a model's floats depend on how many threads split its sums (by 1e-7 with torch),
    and Ray gives an actor of one CPU one thread. (Vectors made on a GPU, or another
    kind of CPU, differ anyway: docs/scale.md.)"""
    return {name: os.environ.get(name) or str(usable_cores()) for name in THREAD_VARIABLES}


def _apply(batch: dict[str, np.ndarray], function: Callable[[Any], Any]
           ) -> dict[str, np.ndarray]:
    """One task's share of RayEngine.map: function of each item, with its place."""
    results = np.empty(len(batch["item"]), dtype=object)
    results[:] = [function(item) for item in batch["item"]]
    return {"index": batch["index"], "result": results}


class RayEngine:
    """A connection to a Ray cluster for one stage: the one RAY_ADDRESS names, else a
    local one started for it (and stopped by close()), made when the stage first has
    work for it. `concurrency`: embedding actors at once; 0 is one for each GPU of the
    cluster, or, where it has none, as many as its CPUs hold (each actor takes as many
    CPUs as the threads it runs)."""

    def __init__(self, concurrency: int = 0) -> None:
        require_extra("ray", "ray")  # (missing: an ImportError now, before any work)
        self.concurrency = concurrency
        self.actors = 0  # embedding actors the stage ran
        self.mapped = 0  # items the stage's map() sent to the cluster
        self._ray: Any = None

    def _connect(self) -> None:
        ray = require_extra("ray", "ray")
        if not ray.is_initialized():
            address = os.environ.get("RAY_ADDRESS") or None
            try:
                ray.init(address=address, include_dashboard=False, log_to_driver=False,
                         logging_level=logging.ERROR, configure_logging=True)
            except (ConnectionError, RuntimeError, ValueError) as error:
                where = f"the cluster at RAY_ADDRESS={address}" if address else \
                    "a local cluster"
                raise RayEngineError(f"could not start or reach {where}: {error}") from None
            self._ray = ray
        os.environ.setdefault("RAY_DATA_DISABLE_PROGRESS_BARS", "1")
        import ray.data  # (configures its logger: quieted after)

        logging.getLogger("ray.data").setLevel(logging.ERROR)
        ray.data.DataContext.get_current().print_on_execution_start = False

    def close(self) -> None:
        if self._ray is not None:
            self._ray.shutdown()  # (a cluster it connected to keeps running)
            self._ray = None

    def map(self, function: Callable[[Any], Any], items: Sequence[Any],
            threshold: int = PARALLEL_THRESHOLD) -> list[Any]:
        """[function(item) for item in items], as Ray tasks over the cluster's CPUs, in
        the items' order. function and items travel pickled, so function must be
        importable where it runs (a module's function, or a partial of one). Fewer than
        threshold items (the local engine's own): the driver's forked workers, with no
        cluster."""
        if len(items) < threshold:
            return forked_map(function, items, threshold)
        self._connect()
        import ray

        # a few blocks for each CPU: a slow block does not hold the others back
        blocks = max(1, min(len(items), 4 * int(ray.cluster_resources().get("CPU", 1))))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                rows = ray.data.from_items(
                    [{"index": index, "item": item} for index, item in enumerate(items)],
                    override_num_blocks=blocks) \
                    .map_batches(_apply, fn_kwargs={"function": function},
                                 batch_size=None).take_all()
        except ray.exceptions.RayError as error:
            raise RayEngineError(f"a pipeline over the documents failed: {error}") from None
        if sorted(row["index"] for row in rows) != list(range(len(items))):
            raise RayEngineError("the pipeline did not return every item once")
        self.mapped += len(items)
        return [row["result"] for row in sorted(rows, key=lambda row: row["index"])]

    def encode(self, spec: str, device: str, texts: list[str], batch_size: int) -> np.ndarray:
        """The texts' vectors, in their order, as the local engine makes them."""
        if not texts:
            return np.zeros((0, 0), np.float32)
        self._connect()
        import ray

        threads = _thread_settings()
        # An actor on CPUs gets as many as the threads it runs (the local engine's).
        per_actor = int(threads["OMP_NUM_THREADS"])
        resources = ray.cluster_resources()
        gpus = int(resources.get("GPU", 0))
        ask = {"num_gpus": 1} if gpus else {"num_cpus": per_actor}
        self.actors = self.concurrency or max(
            1, gpus or int(resources.get("CPU", 1)) // per_actor)
        batches = [{"batch": number, "texts": texts[start:start + batch_size]}
                   for number, start in enumerate(range(0, len(texts), batch_size))]
        try:
            with warnings.catch_warnings():
                # Ray's notes: fewer batches than actors (not wrong); max_restarts passed
                # as the remote argument Ray itself documents for it (deprecated in 2.60)
                warnings.simplefilter("ignore", UserWarning)
                warnings.simplefilter("ignore", DeprecationWarning)
                rows = ray.data.from_items(batches, override_num_blocks=len(batches)) \
                    .map_batches(_Encoder, fn_constructor_kwargs={
                        "spec": spec, "device": device, "batch_size": batch_size},
                        batch_size=1, compute=ray.data.ActorPoolStrategy(size=self.actors),
                        # a failed actor fails the build (it is run again), not restarted
                        max_restarts=0, runtime_env={"env_vars": threads}, **ask).take_all()
        except ray.exceptions.RayError as error:
            raise RayEngineError(f"the embedding pipeline failed: {error}") from None
        if sorted(row["batch"] for row in rows) != list(range(len(batches))):
            raise RayEngineError("the pipeline did not return every batch once")
        parts = [np.frombuffer(row["vectors"], np.float32)
                 for row in sorted(rows, key=lambda row: row["batch"])]
        matrix = np.concatenate(parts)
        if matrix.size % len(texts):
            raise RayEngineError("the pipeline returned vectors of unequal sizes")
        return matrix.reshape(len(texts), matrix.size // len(texts))
