"""The embedders' vectors, as the build stores them."""

from __future__ import annotations


def test_the_hash_embedder_gives_each_text_its_own_vector_however_many_are_encoded():
    """Many texts are encoded in forked workers, in slices: each row is the vector the
    text gets alone, byte for byte."""
    import random

    import numpy as np

    from ctxfst.compile.embed import _HASH_PARALLEL_TEXTS, HashEmbedder

    rng = random.Random(3)
    words = ["graph", "vector", "ranking", "知識", "圖譜", "檢索", "a", "the", "c++", "x.y-z"]
    texts = [" ".join(rng.choice(words) for _ in range(rng.randrange(0, 12)))
             for _ in range(_HASH_PARALLEL_TEXTS + 321)]
    embedder = HashEmbedder(64)
    together = embedder.encode(texts)
    assert together.shape == (len(texts), 64) and together.dtype == np.float32
    for index in [0, 1, *rng.sample(range(len(texts)), 40), len(texts) - 1]:
        assert together[index].tobytes() == embedder.encode([texts[index]])[0].tobytes()
