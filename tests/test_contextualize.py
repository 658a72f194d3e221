"""`ctxfst contextualize` against a fake OpenAI-compatible server on 127.0.0.1: contexts
written with the frontmatter kept, a cache that makes reruns free, retries, failures that
leave files untouched, keys that never leak."""

from __future__ import annotations

import json
import re
import sys
import time

import jsonschema
import pytest

from .conftest import REPO, JsonService, make_project, write

KEY = "sk-test-secret-0123456789"
DOC = """\
---
title: "Guide"
# a comment the edit keeps
entities:
  - {id: entity:hono, name: Hono, type: framework}
chunks:
  - id: guide:setup      # setup first
    tags: [Setup]
    entities: [entity:hono]
  - {id: guide:deploy, tags: [Deploy]}
  - id: guide:done
    context: "Already has one, and it stays as it is"
  - id: guide:empty
    context: ""
---

<Chunk id="guide:setup">
Install Hono and create the app.
</Chunk>

<Chunk id="guide:deploy">
Deploy the app to the edge.
</Chunk>

<Chunk id="guide:done">
Done.
</Chunk>

<Chunk id="guide:empty">
Empty context before.
</Chunk>
"""


class FakeServer(JsonService):
    """A chat endpoint whose answer names the passage; script: what the next requests
    get instead ("sleep", s), ("status", code), ("malformed",)."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.script: list[tuple] = []
        super().__init__()
        self.url = self.base

    def answer(self, path, body, headers):
        self.requests.append({"path": path, "body": body,
                              "auth": headers.get("Authorization")})
        action = self.script.pop(0) if self.script else ("ok",)
        if action[0] == "sleep":
            time.sleep(action[1])
        if action[0] == "status":
            return action[1], b'{"error": {"message": "slow down"}}'
        if action[0] == "malformed":
            return 200, b"not json {"
        prompt = body["messages"][-1]["content"]
        passage = prompt.split("<passage>\n", 1)[1].split("\n</passage>", 1)[0]
        text = f"  The guide's step: {passage.split('.')[0]}.\n"
        if path == "/v1/messages":  # the Anthropic Messages API
            assert headers["anthropic-version"] and body["system"]
            self.requests[-1]["auth"] = headers.get("x-api-key")
            return 200, json.dumps({"content": [{"type": "text", "text": text}]}).encode()
        return 200, json.dumps({"choices": [{"message": {"content": text}}]}).encode()


@pytest.fixture
def fake():
    server = FakeServer()
    yield server
    server.close()


@pytest.fixture
def kb(tmp_path, monkeypatch):
    root = make_project(tmp_path)
    write(root, "content/guide.ctxfst.md", DOC)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    return root


def ask(cli, kb, fake, *extra):
    return cli("contextualize", "--base-url", fake.url, "--model", "tiny", "--timeout", "2",
               *extra, cwd=kb)


def test_contexts_are_written_with_the_frontmatter_kept_and_a_rerun_asks_nothing(kb, fake,
                                                                                 cli):
    result = ask(cli, kb, fake)
    assert result.code == 0, result.err
    assert len(fake.requests) == 3  # setup, deploy, empty; `done` has one
    assert fake.requests[0]["path"] == "/v1/chat/completions"
    assert fake.requests[0]["auth"] == f"Bearer {KEY}"
    assert fake.requests[0]["body"]["model"] == "tiny"
    text = (kb / "content" / "guide.ctxfst.md").read_text()
    added = [line for line in text.splitlines() if line not in DOC.splitlines()]
    assert added == ['    context: "The guide\'s step: Install Hono and create the app."',
                     '  - {context: "The guide\'s step: Deploy the app to the edge.", '
                     'id: guide:deploy, tags: [Deploy]}',
                     '    context: "The guide\'s step: Empty context before."']
    assert "# a comment the edit keeps" in text and "# setup first" in text
    assert cli("validate", cwd=kb).code == 0
    again = ask(cli, kb, fake)
    assert again.code == 0 and len(fake.requests) == 3
    cache = (kb / ".ctxfst" / "cache" / "contexts.sqlite").read_bytes()
    assert KEY.encode() not in cache
    for output in (result.out, result.err, again.out, again.err):
        assert KEY not in output


def test_the_cache_is_keyed_by_model_and_passage(kb, fake, cli):
    assert ask(cli, kb, fake, "--dry-run").code == 0
    assert fake.requests == []  # a dry run asks nothing and writes nothing
    assert (kb / "content" / "guide.ctxfst.md").read_text() == DOC
    dry = ask(cli, kb, fake, "--dry-run", "--format", "json").json()
    jsonschema.validate(dry, json.loads((REPO / "schemas" / "contextualize-output.schema.json")
                                        .read_text()))
    assert [c["chunk_id"] for c in dry["chunks"]] == ["guide:setup", "guide:deploy",
                                                      "guide:empty"]
    assert all(c["prompt_chars"] > 100 and not c["cached"] for c in dry["chunks"])
    assert ask(cli, kb, fake).code == 0
    path = kb / "content" / "guide.ctxfst.md"
    path.write_text(DOC.replace("Deploy the app", "Ship the app"))
    assert ask(cli, kb, fake).code == 0
    # the document changed: a context situates its passage in it, so all are asked again
    assert len(fake.requests) == 6
    assert ask(cli, kb, fake).code == 0 and len(fake.requests) == 6
    other = cli("contextualize", "--base-url", fake.url, "--model", "bigger", "--dry-run",
                "--format", "json", cwd=kb).json()
    assert not any(c["cached"] for c in other["chunks"])


def test_rate_limits_are_retried(kb, fake, cli):
    fake.script = [("status", 429), ("status", 503)]
    result = ask(cli, kb, fake, "--jobs", "1")
    assert result.code == 0, result.err
    assert len(fake.requests) == 5


def test_failures_leave_the_file_untouched_and_name_the_chunks(kb, fake, cli):
    write(kb, "content/other.ctxfst.md", """\
        ---
        chunks:
          - id: other:one
        ---
        <Chunk id="other:one">
        One passage.
        </Chunk>
        """)
    fake.script = [("malformed",)]
    result = ask(cli, kb, fake, "--jobs", "1", "--retries", "0")
    assert result.code == 1
    assert re.search(r"guide\.ctxfst\.md:1:1: error CTX905: .*guide:setup", result.err)
    assert (kb / "content" / "guide.ctxfst.md").read_text() == DOC
    assert "context:" in (kb / "content" / "other.ctxfst.md").read_text()  # it succeeded
    assert ask(cli, kb, fake).code == 0  # the rest came from the cache
    assert len(fake.requests) == 4 + 1


def test_a_timeout_and_a_refused_status_fail_cleanly(kb, fake, cli):
    fake.script = [("sleep", 1.5)]
    result = cli("contextualize", "--base-url", fake.url, "--model", "tiny", "--timeout",
                 "0.5", "--retries", "0", "--jobs", "1", cwd=kb)
    assert result.code == 1 and "CTX905" in result.err and "Traceback" not in result.err
    fake.script = [("status", 401)]
    result = ask(cli, kb, fake, "--jobs", "1")
    assert result.code == 1 and "HTTP 401: slow down" in result.out
    assert (kb / "content" / "guide.ctxfst.md").read_text() == DOC


def test_a_command_provider_and_usage_errors(kb, cli, tmp_path):
    script = write(tmp_path, "ask.py", """\
        import json, sys
        request = json.load(sys.stdin)
        passage = request["prompt"].split("<passage>")[1].split("</passage>")[0].strip()
        print(json.dumps({"text": "About: " + passage[:12]}))
        """)
    result = cli("contextualize", "--provider", "command", "--command",
                 f"{sys.executable} {script}", cwd=kb)
    assert result.code == 0, result.err
    assert 'context: "About: Install Hono"' in (kb / "content" / "guide.ctxfst.md").read_text()
    assert cli("contextualize", "--provider", "command", cwd=kb).code == 2
    assert cli("contextualize", "--model", "x", cwd=kb).code == 2  # no --base-url
    assert cli("contextualize", "--base-url", "file:///etc", "--model", "x", cwd=kb).code == 2
    assert cli("contextualize", "--provider", "anthropic", "--model", "x",
               "--api-key-env", "CTXFST_NO_SUCH_KEY", cwd=kb).code == 2


def test_the_anthropic_provider(kb, fake, cli, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "ant-secret-42")
    result = cli("contextualize", "--provider", "anthropic", "--model", "claude-x",
                 "--base-url", fake.base.removesuffix("/v1"), cwd=kb)
    assert result.code == 0, result.err
    assert {r["path"] for r in fake.requests} == {"/v1/messages"}
    assert {r["auth"] for r in fake.requests} == {"ant-secret-42"}
    assert 'context: "The guide\'s step: Install Hono and create the app."' in \
        (kb / "content" / "guide.ctxfst.md").read_text()
    assert "ant-secret-42" not in result.out + result.err


def test_an_empty_context_and_crlf_line_endings(kb, fake, cli):
    doc = kb / "content" / "win.ctxfst.md"
    doc.write_bytes(b"---\r\nchunks:\r\n  - id: win:one\r\n    context: ''  # to do\r\n"
                    b"    tags: [a]\r\n---\r\n<Chunk id=\"win:one\">\r\nWindows text.\r\n"
                    b"</Chunk>\r\n")
    assert ask(cli, kb, fake, "content/win.ctxfst.md").code == 0
    assert doc.read_bytes() == (b"---\r\nchunks:\r\n  - id: win:one\r\n"
                                b"    context: 'The guide''s step: Windows text.'  # to do\r\n"
                                b"    tags: [a]\r\n---\r\n<Chunk id=\"win:one\">\r\n"
                                b"Windows text.\r\n</Chunk>\r\n")
