"""`ctxfst serve`: the warm local server, over real HTTP, against real builds."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import jsonschema
import pytest

from ctxfst.artifacts.reader import published_folder
from ctxfst.pipeline.runner import run_build
from ctxfst.serve import MAX_BODY_BYTES, Service, make_server

from .conftest import REPO, copy_example, run_process


@pytest.fixture
def project(built_example):
    return built_example


SCHEMA_OF = {"/health": "serve-health-output", "/query": "query-output",
             "/facts/ask": "facts-ask-output", "/plan": "plan-output", "/state": "world-state"}


class Running:
    """A Service behind a real HTTP server on a free port, in this process."""

    def __init__(self, root: Path, **options) -> None:
        self.log: list[str] = []
        self.service = Service(root, log=self.log.append, **options)
        self.service.start()
        self.server = make_server(self.service, 0)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def call(self, method: str, path: str, body=None, raw: bytes | None = None,
             headers: dict | None = None) -> tuple[int, dict]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        data = raw if raw is not None else (None if body is None else json.dumps(body))
        sent = {"Content-Type": "application/json"} if method == "POST" else {}
        connection.request(method, path, data, {**sent, **(headers or {})})
        response = connection.getresponse()
        payload = json.loads(response.read())
        connection.close()
        name = SCHEMA_OF.get(path.split("?")[0]) if response.status == 200 else \
            "serve-error-output"
        if name:  # every answer, error or not, is the shape its schema says
            jsonschema.validate(payload, json.loads(
                (REPO / "schemas" / f"{name}.schema.json").read_text()))
        return response.status, payload

    def wait_for(self, check, seconds: float = 20.0):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            value = check()
            if value:
                return value
            time.sleep(0.05)
        raise AssertionError("the server did not get there in time; log: "
                             + " | ".join(self.log))

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.service.stop()


@pytest.fixture
def running(project):
    servers: list[Running] = []

    def start(**options) -> Running:
        options.setdefault("poll_seconds", 0.05)
        servers.append(Running(project, **options))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def cli_json(root: Path, *args: str) -> dict:
    done = run_process(*args, "--format", "json", cwd=root)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_answers_are_the_commands_answers(project, running):
    server = running()
    status, health = server.call("GET", "/health")
    assert status == 200 and health["status"] == "ok" and health["build"]["chunks"] > 0
    for body, args in (({"text": "Hono on Cloudflare Workers"}, ["Hono on Cloudflare Workers"]),
                       ({"text": "滾動更新", "mode": "hybrid", "top_k": 3},
                        ["滾動更新", "--mode", "hybrid", "--top-k", "3"])):
        status, answer = server.call("POST", "/query", body)
        assert status == 200
        assert answer == cli_json(project, "query", *args)
    ask = {"tenant": "default", "op": "exists", "key": "topic", "value": "python"}
    status, answer = server.call("POST", "/facts/ask", ask)
    assert status == 200 and answer == cli_json(
        project, "facts", "ask", "--tenant", "default", "--op", "exists", "--key", "topic",
        "--value", "python")
    goal = "goal:edge-api-learning-plan"
    assert run_process("state", "init", "--goal", goal, "--seed", "state:has-resume",
                       cwd=project).returncode == 0
    status, state = server.call("GET", "/state")
    assert status == 200 and state == cli_json(project, "state", "show")
    status, plan = server.call("POST", "/plan", {"explain": True})
    assert status == 200 and plan == cli_json(project, "plan", "--explain")
    assert plan["solved"] and plan["steps"]


@pytest.mark.parametrize("method, path, body, status, code", [
    ("POST", "/query", {"text": 5}, 400, "bad_request"),
    ("POST", "/query", {"text": "  "}, 400, "bad_request"),
    ("POST", "/query", {"text": "x" * 5000}, 400, "bad_request"),
    ("POST", "/query", {"text": "Hono", "top_k": 0}, 400, "bad_request"),
    ("POST", "/query", {"text": "Hono", "top_k": True}, 400, "bad_request"),
    ("POST", "/query", {"text": "Hono", "mode": "psychic"}, 400, "bad_request"),
    ("POST", "/query", {"text": "Hono", "hops": 99}, 400, "bad_request"),
    ("POST", "/query", {"text": "Hono", "colour": "red"}, 400, "bad_request"),
    ("POST", "/query", {"text": "滾動更新", "bridge_model": "hash-3000000"}, 400,
     "bad_request"),
    ("POST", "/query", {"text": "滾動更新", "bridge_model": "someone/model"}, 400,
     "bad_request"),
    ("POST", "/query", {"text": "!!!"}, 400, "retrieval_error"),
    ("POST", "/query", [1, 2], 400, "bad_request"),
    # lone surrogates and non-finite numbers: JSON that cannot be answered back
    ("POST", "/query", {"text": "\ud800 hono"}, 400, "bad_request"),
    ("POST", "/query", {"text": "Hono", "top_k": float("nan")}, 400, "bad_request"),
    ("POST", "/facts/ask", {"tenant": "default", "op": "exists", "value": "\udfff"}, 400,
     "bad_request"),
    ("POST", "/plan", {"goal": "\ud83d"}, 400, "bad_request"),
    ("POST", "/facts/ask", {"op": "exists"}, 400, "bad_request"),
    ("POST", "/facts/ask", {"tenant": "default", "op": "maybe"}, 400, "bad_request"),
    ("POST", "/facts/ask", {"tenant": "../x", "op": "exists"}, 400, "bad_request"),
    ("POST", "/facts/ask", {"tenant": "default", "op": "list", "min_confidence": 2},
     400, "bad_request"),
    ("POST", "/plan", {"seed": ["state:x"]}, 400, "bad_request"),
    ("POST", "/plan", {"goal": "goal:nowhere"}, 400, "plan_error"),
    ("GET", "/state", None, 404, "no_state"),
    ("GET", "/query", None, 405, "method_not_allowed"),
    ("GET", "/admin", None, 404, "not_found"),
])
def test_bad_requests_get_a_located_error_and_the_server_goes_on(running, method, path, body,
                                                                   status, code):
    server = running()
    got, answer = server.call(method, path, body)
    assert (got, answer["error"]["code"]) == (status, code), answer
    assert answer["error"]["message"] and "Traceback" not in answer["error"]["message"]
    assert server.call("POST", "/query", {"text": "Hono"})[0] == 200


def test_requests_are_bounded(running):
    server = running()
    got, answer = server.call("POST", "/query", raw=b"{not json")
    assert (got, answer["error"]["code"]) == (400, "bad_request")
    # Refused from its Content-Length, before a byte of the body is read.
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    connection.putrequest("POST", "/query")
    connection.putheader("Content-Type", "application/json")
    connection.putheader("Content-Length", str(MAX_BODY_BYTES + 1))
    connection.endheaders()
    response = connection.getresponse()
    assert response.status == 413 and json.loads(response.read())["error"]["code"] == "too_large"
    connection.close()
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    connection.putrequest("POST", "/query")
    connection.putheader("Content-Type", "application/json")
    connection.endheaders()
    assert connection.getresponse().status == 411
    connection.close()


def test_a_new_build_is_served_once_published_and_a_damaged_one_never(project, running):
    server = running(stale_check_seconds=0)
    first = server.call("GET", "/health")[1]["build"]["manifest_sha256"]
    source = project / "content" / "backend-frameworks.ctxfst.md"
    text = source.read_text(encoding="utf-8")
    source.write_text(text.replace("</Chunk>", "Zanzibar quokka marmalade.\n</Chunk>", 1),
                      encoding="utf-8")
    assert run_build(project, [], quiet=True) == 0
    second = server.wait_for(lambda: (lambda h: h != first and h)(
        server.call("GET", "/health")[1]["build"]["manifest_sha256"]))
    status, answer = server.call("POST", "/query", {"text": "Zanzibar quokka marmalade",
                                                    "mode": "lexical"})
    assert status == 200 and "Zanzibar" in answer["results"][0]["content"]
    # A published build whose files no longer match its manifest (an edit by hand) is
    # not loaded: the build loaded last goes on answering.
    published = published_folder(project / "build")
    chunks = published / "chunks.parquet"
    chunks.write_bytes(chunks.read_bytes()[:-100] + bytes(100))
    manifest = published / "manifest.json"
    copy = manifest.with_name("manifest.json.new")
    copy.write_bytes(manifest.read_bytes())
    os.replace(copy, manifest)  # a new identity: the watcher looks again
    error = server.wait_for(lambda: (lambda e: e if e and "chunks.parquet" in e else None)(
        server.call("GET", "/health")[1]["load_error"]))
    assert "manifest" in error
    loads = len(server.log)
    time.sleep(0.5)  # ten polls: the build that failed is not loaded again until it changes
    assert len(server.log) == loads, server.log[loads:]
    health = server.call("GET", "/health")[1]
    assert health["build"]["manifest_sha256"] == second and health["status"] == "ok"
    status, again = server.call("POST", "/query", {"text": "Zanzibar quokka marmalade",
                                                   "mode": "lexical"})
    assert status == 200 and again == answer


def test_a_stale_build_is_refused_unless_allowed(project, running):
    server = running(stale_check_seconds=0.05)
    assert server.call("POST", "/query", {"text": "Hono"})[0] == 200
    source = project / "content" / "backend-frameworks.ctxfst.md"
    source.write_text(source.read_text(encoding="utf-8") + "\n", encoding="utf-8")
    server.wait_for(lambda: server.call("GET", "/health")[1]["stale"])
    status, answer = server.call("POST", "/query", {"text": "Hono"})
    assert status == 409 and answer["error"]["code"] == "stale_build"
    assert "content/backend-frameworks.ctxfst.md" in answer["error"]["message"]
    assert server.call("POST", "/query", {"text": "Hono", "allow_stale": True})[0] == 200


def test_no_build_yet_is_unavailable_until_one_is_published(tmp_path, capsys):
    copy_example(tmp_path)
    server = Running(tmp_path, poll_seconds=0.05, stale_check_seconds=0)
    try:
        status, answer = server.call("POST", "/query", {"text": "Hono"})
        assert status == 503 and answer["error"]["code"] == "no_build"
        assert server.call("GET", "/health")[1]["status"] == "no_build"
        assert run_build(tmp_path, [], quiet=True) == 0
        server.wait_for(lambda: server.call("GET", "/health")[1]["status"] == "ok")
        assert server.call("POST", "/query", {"text": "Hono"})[0] == 200
    finally:
        server.close()


def serve_process(project, *options: str) -> tuple[subprocess.Popen, int, list[str]]:
    """`ctxfst serve --port 0 OPTIONS` started; its port, and the lines it said before
    it said it listens."""
    process = subprocess.Popen([sys.executable, "-m", "ctxfst", "serve", "--port", "0",
                                *options], cwd=project, stderr=subprocess.PIPE, text=True)
    before = []
    for _ in range(50):
        line = process.stderr.readline()
        found = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if found:
            return process, int(found.group(1)), before
        before.append(line)
    process.kill()
    process.wait()
    raise AssertionError(f"no listening line: {before}")


def test_the_command_serves_until_sigterm(project):
    process, port, _ = serve_process(project)
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        connection.request("POST", "/query", json.dumps({"text": "Hono", "top_k": 1}),
                           {"Content-Type": "application/json"})
        response = connection.getresponse()
        assert response.status == 200
        assert json.loads(response.read())["results"][0]["chunk_id"]
        connection.close()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
        assert "stopping (SIGTERM)" in process.stderr.read()
    finally:
        process.kill()
        process.wait()


def test_the_command_refuses_a_taken_port_and_no_project(project, tmp_path_factory):
    server = Running(project, poll_seconds=0.05, stale_check_seconds=0)
    try:
        done = run_process("serve", "--port", str(server.port), cwd=project)
        assert done.returncode == 2 and f"--port {server.port}" in done.stderr
        assert "Traceback" not in done.stderr
    finally:
        server.close()
    empty = tmp_path_factory.mktemp("empty")
    done = run_process("serve", "--port", "0", cwd=empty)
    assert done.returncode == 2 and "no ctxfst project" in done.stderr
    done = run_process("serve", "--port", "70000", cwd=project)
    assert done.returncode == 2 and "not a port number" in done.stderr


def test_workers_share_the_port_balance_connections_and_stop_together(project):
    process, port, before = serve_process(project, "--workers", "2")
    try:
        # It says it listens once both workers serve, so none is left idle by clients
        # that connect at once.
        assert {re.search(r"worker (\d):", line).group(1) for line in before
                if "serving the build" in line} == {"1", "2"}
        answers, pids, connections = set(), [], []
        for _ in range(4):  # kept open, as an agent's client keeps its connection
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            connections.append(connection)
            connection.request("POST", "/query", json.dumps({"text": "Hono", "top_k": 2}),
                               {"Content-Type": "application/json"})
            response = connection.getresponse()
            assert response.status == 200
            answers.add(response.read())
            connection.request("GET", "/health")
            pids.append(json.loads(connection.getresponse().read())["pid"])
        assert len(answers) == 1  # whichever worker took it, the same answer
        # Each keep-alive connection stays with the worker that accepted it: the least
        # loaded accepts, two connections each.
        assert sorted(pids.count(pid) for pid in set(pids)) == [2, 2]
        for connection in connections:
            connection.close()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
        log = process.stderr.read()
        assert "worker 1: stopping (SIGTERM)" in log and "worker 2: stopping (SIGTERM)" in log
    finally:
        process.kill()
        process.wait()


def test_the_commands_defaults_are_the_servers():
    from ctxfst.cli import build_parser
    from ctxfst.serve import DEFAULT_PORT, POLL_SECONDS, STALE_CHECK_SECONDS

    for command in ("serve", "mcp"):
        args = build_parser().parse_args([command])
        assert (args.poll, args.stale_check) == (POLL_SECONDS, STALE_CHECK_SECONDS)
    assert build_parser().parse_args(["serve"]).port == DEFAULT_PORT


def test_only_this_machines_clients_are_answered(running):
    server = running()
    for headers, status in (({"Host": "evil.example"}, 403),
                            ({"Origin": "http://evil.example"}, 403),
                            ({"Origin": "null"}, 403),
                            ({"Content-Type": "text/plain"}, 415),
                            ({"Content-Type": "application/x-www-form-urlencoded"}, 415)):
        got, answer = server.call("POST", "/query", {"text": "Hono"}, headers=headers)
        assert got == status, (headers, answer)
        assert answer["error"]["code"] in ("forbidden", "unsupported_media_type")
    assert server.call("GET", "/health", headers={"Host": "evil.example"})[0] == 403
    local = {"Host": f"localhost:{server.port}", "Origin": f"http://localhost:{server.port}"}
    assert server.call("POST", "/query", {"text": "Hono"}, headers=local)[0] == 200


def test_broken_requests_close_their_connection(running):
    import socket

    server = running()

    def exchange(request: bytes) -> bytes:
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
            sock.sendall(request)
            sock.shutdown(socket.SHUT_WR)
            return b"".join(iter(lambda: sock.recv(65536), b""))

    host = f"Host: 127.0.0.1:{server.port}\r\nContent-Type: application/json\r\n"
    body = b'{"text": "Hono"}'
    # A 404 with a body: the connection closes, the body is never read as a request.
    reply = exchange(f"POST /nope HTTP/1.1\r\n{host}Content-Length: {len(body)}\r\n\r\n"
                     .encode() + body + b"GET /health HTTP/1.1\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 404") and reply.count(b"HTTP/1.1") == 1
    # A Content-Length that is not a plain number, and a body shorter than it says.
    reply = exchange(f"POST /query HTTP/1.1\r\n{host}Content-Length: ²\r\n\r\n".encode())
    assert reply.startswith(b"HTTP/1.1 411")
    reply = exchange(f"POST /query HTTP/1.1\r\n{host}Content-Length: 500\r\n\r\n".encode()
                     + body)
    assert reply.startswith(b"HTTP/1.1 408") and b"request_timeout" in reply
    assert not [line for line in server.log if "internal" in line], server.log
    assert server.call("POST", "/query", {"text": "Hono"})[0] == 200


def test_staleness_is_judged_against_the_build_served(project, running):
    """Sources edited, then a build published that cannot be loaded: the build still
    served is older than the sources, and says so."""
    server = running(stale_check_seconds=0.05)
    source = project / "content" / "backend-frameworks.ctxfst.md"
    source.write_text(source.read_text(encoding="utf-8").replace(
        "</Chunk>", "Quokka.\n</Chunk>", 1), encoding="utf-8")
    server.wait_for(lambda: server.call("GET", "/health")[1]["stale"])
    assert run_build(project, [], quiet=True) == 0
    chunks = project / "build" / "chunks.parquet"  # the new build, damaged after publishing
    chunks.write_bytes(chunks.read_bytes()[:-100] + bytes(100))
    server.wait_for(lambda: server.call("GET", "/health")[1]["load_error"])
    time.sleep(0.3)  # several stale checks
    health = server.call("GET", "/health")[1]
    assert health["stale"] and "content/backend-frameworks.ctxfst.md" in health["stale"]
    assert server.call("POST", "/query", {"text": "Hono"})[0] == 409


def test_facts_and_plans_come_from_the_build_served(project, running):
    """Everything a request reads was loaded with the build: a newer build in the folder
    does not leak into answers before it is switched to."""
    server = running(stale_check_seconds=0)
    ask = {"tenant": "default", "op": "list", "key": "topic"}
    before = server.call("POST", "/facts/ask", ask)
    assert before[0] == 200
    facts = project / "build" / "semantic_facts.parquet"
    facts.write_bytes(b"not parquet")  # unpublished damage: the served build has its copy
    assert server.call("POST", "/facts/ask", ask) == before


# ---- the server's edges: every answer JSON, whole-request deadline, bounded connections

def _raw(port: int, data: bytes, timeout: float = 10.0) -> bytes:
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        chunks = []
        while True:
            try:
                chunk = sock.recv(65536)
            except (TimeoutError, ConnectionResetError):
                break
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks)


def _json_answer(reply: bytes) -> tuple[int, dict | None]:
    head, _, body = reply.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    assert b"content-type: application/json" in head.lower(), head
    return status, (json.loads(body) if body else None)


@pytest.mark.parametrize("request_bytes, status, code", [
    (b"OPTIONS /query HTTP/1.1\r\nHost: {host}\r\n\r\n", 405, "method_not_allowed"),
    (b"PUT /query HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\n\r\n", 405,
     "method_not_allowed"),
    (b"BREW /pot HTTP/1.1\r\nHost: {host}\r\n\r\n", 501, "bad_request"),
    (b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\nHost: {host}\r\n\r\n", 414, "uri_too_long"),
    (b"GET /health HTTP/1.1\r\nHost: {host}\r\n" + b"X-A: b\r\n" * 120 + b"\r\n", 431,
     "headers_too_large"),
    (b"GARBAGE\r\n\r\n", 400, "bad_request"),
    (b"GET /health HTTP/1.1\r\nHost: {host}\r\nHost: evil.example\r\n\r\n", 400,
     "bad_request"),
    (b'POST /query HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n'
     b'Content-Length: 15\r\nTransfer-Encoding: chunked\r\n\r\n{"text": "Hono"}', 501,
     "not_implemented"),
])
def test_every_answer_is_json_even_to_malformed_requests(running, request_bytes, status, code):
    server = running()
    host = f"127.0.0.1:{server.port}".encode()
    request_bytes = request_bytes.replace(b"{host}", host + b"\r\nConnection: close", 1)
    got, answer = _json_answer(_raw(server.port, request_bytes))
    assert got == status and answer["error"]["code"] == code, answer
    assert server.call("POST", "/query", {"text": "Hono"})[0] == 200


def test_head_gets_headers_only(running):
    server = running()
    reply = _raw(server.port, f"HEAD /health HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
                 "Connection: close\r\n\r\n".encode())
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 405") and body == b""


def test_a_trickling_client_is_cut_off_and_connections_are_bounded(running, monkeypatch):
    import socket

    import ctxfst.serve as serve_module

    monkeypatch.setattr(serve_module, "REQUEST_DEADLINE_SECONDS", 1.0)
    monkeypatch.setattr(serve_module, "MAX_CONNECTIONS", 3)
    server = running()
    slow = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    started = time.monotonic()
    closed = False
    for byte in b"POST /query HTTP/1.1\r\nHost: x\r\n":  # a byte every 0.2 s
        try:
            slow.sendall(bytes([byte]))
        except OSError:
            closed = True
            break
        time.sleep(0.2)
        if time.monotonic() - started > 6:
            break
    if not closed:
        slow.settimeout(5)
        try:
            closed = slow.recv(1) == b""
        except OSError:
            closed = True
    slow.close()
    assert closed and time.monotonic() - started < 6  # cut at the 1 s deadline
    idle = [socket.create_connection(("127.0.0.1", server.port), timeout=10) for _ in range(3)]
    time.sleep(0.2)
    got, answer = _json_answer(_raw(server.port, b"GET /health HTTP/1.1\r\n\r\n"))
    assert got == 503 and answer["error"]["code"] == "busy"
    for sock in idle:
        sock.close()
    assert server.wait_for(lambda: server.call("GET", "/health")[0] == 200)


# ---- fuzzing the HTTP API: any JSON body gets an answer of its schema, never a 500

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                     st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=40),
                     st.sampled_from(["Hono", "graph", "vector", "default", "exists",
                                      "goal:edge-api-learning-plan", "state:has-resume"]))
_VALUES = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=3)
                       | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=6)
_KEYS = st.sampled_from(["text", "mode", "top_k", "hops", "bridge_model", "allow_stale",
                         "tenant", "op", "entity_type", "namespace", "key", "value",
                         "min_confidence", "limit", "goal", "seed", "algorithm", "explain",
                         "topk", "x"])


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory):
    root = copy_example(tmp_path_factory.mktemp("fuzz"))
    assert run_build(root, [], quiet=True) == 0
    server = Running(root, poll_seconds=0.05)
    yield server
    server.close()


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(path=st.sampled_from(["/query", "/facts/ask", "/plan", "/state"]),
       body=st.dictionaries(_KEYS, _VALUES, max_size=5))
def test_any_json_body_gets_a_schema_answer_never_a_500(fuzz_server, path, body):
    status, answer = fuzz_server.call("POST", path, body)  # (call checks the schema)
    assert status != 500, answer
    assert status in (200, 400, 404, 409, 422, 503), (status, answer)
