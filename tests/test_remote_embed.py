"""An embedding model behind an OpenAI-compatible endpoint (openai-compatible:MODEL@URL):
a build and queries through a fake server on 127.0.0.1, cached like the built-in models;
bad replies fail the build cleanly; settings cannot send text to another machine."""

from __future__ import annotations

import json

import pytest

from ctxfst.compile.embed import HashEmbedder
from ctxfst.pipeline.runner import run_build

from .conftest import JsonService, copy_example


class EmbeddingServer(JsonService):
    """An embeddings endpoint whose vectors are the hash embedder's (in any order)."""

    def __init__(self) -> None:
        self.inputs: list[list[str]] = []
        self.auth: list[str | None] = []
        self.broken = False  # answer one vector short
        self.hasher = HashEmbedder(48)
        super().__init__()
        self.spec = f"openai-compatible:fake-embed@{self.base}"

    def answer(self, path, body, headers):
        assert path == "/v1/embeddings" and body["model"] == "fake-embed"
        self.inputs.append(body["input"])
        self.auth.append(headers.get("Authorization"))
        vectors = self.hasher.encode(body["input"]).tolist()
        data = [{"object": "embedding", "index": i, "embedding": v}
                for i, v in reversed(list(enumerate(vectors)))]
        if self.broken:
            data = data[:-1]
        return 200, json.dumps({"object": "list", "data": data}).encode()

    @property
    def texts(self) -> int:
        return sum(len(batch) for batch in self.inputs)


@pytest.fixture
def server():
    running = EmbeddingServer()
    yield running
    running.close()


def test_build_and_query_through_the_server_cached_like_any_model(tmp_path, server, cli,
                                                                  monkeypatch):
    monkeypatch.setenv("CTXFST_EMBEDDING_API_KEY", "emb-key-123")
    kb = copy_example(tmp_path, model=server.spec)
    assert run_build(kb, [], quiet=True) == 0
    first = server.texts
    assert first > 20 and set(server.auth) == {"Bearer emb-key-123"}
    manifest = json.loads((kb / "build" / "manifest.json").read_text())
    assert server.spec in json.dumps(manifest)
    assert "emb-key-123" not in (kb / "build" / "manifest.json").read_text()
    (kb / "build" / "manifest.json").unlink()  # a full rebuild: every text from the cache
    import shutil

    shutil.rmtree(kb / "build")
    assert run_build(kb, [], quiet=True) == 0
    assert server.texts == first
    result = cli("query", "Hono on Cloudflare Workers", "--mode", "vector", "--format",
                 "json", cwd=kb)
    assert result.code == 0, result.err
    assert server.inputs[-1] == ["Hono on Cloudflare Workers"]
    assert result.json()["results"]


def test_a_bad_reply_fails_the_build_with_a_clear_error(tmp_path, server, cli):
    server.broken = True
    kb = copy_example(tmp_path, model=server.spec)
    result = cli("build", "--root", kb)
    assert result.code != 0
    err = result.out + result.err
    assert "could not be used" in err and "vectors for" in err and "Traceback" not in err
    assert not (kb / "build" / "manifest.json").exists()


def test_settings_cannot_send_text_to_another_machine(tmp_path, cli, monkeypatch):
    spec = "openai-compatible:bge-m3@https://embed.example.com/v1"
    kb = copy_example(tmp_path, model=spec)
    result = cli("validate", cwd=kb)
    assert result.code == 2 and "CTX803" in result.err and "CTXFST_EMBEDDING_HOSTS" in result.err
    monkeypatch.setenv("CTXFST_EMBEDDING_HOSTS", "embed.example.com")
    assert cli("validate", cwd=kb).code == 0
    bad = copy_example(tmp_path / "bad", model="openai-compatible:x@ftp://127.0.0.1/v1")
    assert cli("validate", cwd=bad).code == 2
