"""`ctxfst serve`: a long-running local server that answers query, facts ask, plan and
state show as JSON over HTTP on 127.0.0.1, with the build's index and model loaded once.

A watcher notices a new manifest.json and loads that build beside the one being served;
requests switch to it only once every artifact it needs has been read and checked against
its manifest, so a build half published (or damaged) is never served: the old one stays
until the next change. Requests are bounded (body size, read timeout, argument ranges);
SIGTERM and SIGINT stop the server after the requests in flight. docs/serve.md has the
endpoints and their JSON.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import mmap
import os
import re
import select
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from .diagnostics import OUTPUT_SCHEMA_VERSION
from .files import file_stamp

DEFAULT_PORT = 8765
MAX_BODY_BYTES = 64 * 1024
MAX_TEXT_CHARS = 2000
MAX_TOP_K = 100
MAX_HOPS = 5
READ_TIMEOUT_SECONDS = 10.0  # a client that stops sending mid-request is dropped
REQUEST_DEADLINE_SECONDS = 15.0  # a whole request must arrive in this time (a trickle too)
MAX_CONNECTIONS = 64  # open at once a server (a worker); more are answered 503 and closed
POLL_SECONDS = 0.5           # how often the manifest's identity is looked at
STALE_CHECK_SECONDS = 10.0   # how often the sources are compared with the build


class BadRequest(Exception):
    def __init__(self, message: str, status: HTTPStatus = HTTPStatus.BAD_REQUEST,
                 code: str = "bad_request") -> None:
        super().__init__(message)
        self.status, self.code = status, code


@dataclass
class Generation:
    """One published build, loaded whole before it is served: the index, the facts, the
    world model and the manifest they were checked against. Nothing a request reads is
    read from the build folder after the switch (a newer build may be there by then)."""

    workspace: Any                       # a Workspace with its index loaded
    facts: Any                           # the facts Store, its fallback's chunks read
    world: Any                           # the skill index and entity graph (plan)
    manifest: dict[str, Any]
    manifest_identity: tuple[int, ...]   # (size, mtime, inode, ctime) of its manifest.json
    manifest_sha256: str
    loaded_at: float
    stale: str | None = None             # why the sources differ from this build, if they do


def _manifest_identity(build_dir: Path) -> tuple[int, ...] | None:
    from .artifacts.reader import published_folder

    try:
        return file_stamp(os.stat(published_folder(build_dir) / "manifest.json"))
    except (OSError, ValueError):
        return None


# A request may choose among these multilingual views for queries the build's model
# cannot read; any other name would make the server load (or download) a model for a
# stranger's request.
BRIDGE_MODELS = ("use-multilingual", "none")


class Service:
    """The answers, independent of HTTP (the MCP server calls the same methods)."""

    def __init__(self, cwd: Path, build: Path | None = None, allow_stale: bool = False,
                 poll_seconds: float = POLL_SECONDS,
                 stale_check_seconds: float = STALE_CHECK_SECONDS,
                 log: Callable[[str], None] | None = None) -> None:
        from .workspace import Workspace

        self.cwd, self.build, self.allow_stale = cwd, build, allow_stale
        self.poll_seconds, self.stale_check_seconds = poll_seconds, stale_check_seconds
        self.log = log or (lambda text: None)
        self.current: Generation | None = None
        self.load_error: str | None = None
        self._failed: tuple[int, ...] | None = None  # the manifest whose load failed
        self._stop = threading.Event()
        self._compute = threading.Lock()
        # (no project and no --build: a usage error, now)
        self.build_dir = Workspace.open(cwd, build).build_dir

    @property
    def stale(self) -> str | None:
        generation = self.current
        return generation.stale if generation else None

    # -- loading ---------------------------------------------------------------------

    def load(self) -> bool:
        """Load the build now published, unless it is the one served or the one that
        failed to load last. True when the served build changed."""
        from .artifacts.reader import ArtifactError, parse_json, published_folder, read_plain_file
        from .facts.query import FALLBACK_COLUMNS, FactsError, Store
        from .retrieval.search import RetrievalError
        from .runtime.world import WorldError, load_world
        from .workspace import Workspace

        workspace = Workspace.open(self.cwd, self.build)
        path = workspace.build_dir / "manifest.json"
        try:
            data, info = read_plain_file(published_folder(workspace.build_dir) / path.name)
        except OSError as error:
            self.load_error = f"{path}: {error.strerror or error}: run `doit`"
            return False
        except ValueError as error:
            self.load_error = f"{error}: run `doit clean`, then `doit`"
            return False
        identity = file_stamp(info)
        if not self._is_new(identity):
            return False
        try:
            manifest = parse_json(data)
            index = workspace.index  # every artifact read and checked against the manifest
            workspace.embed(["warm up"])  # the model loads now, not in the first request
            if index.chunk_ids:  # built or read now, not by the first requests
                _ = index.bm25
                index.preload_hits()
            facts = Store.load(workspace.build_dir)  # (freshness: see check_stale)
            facts.chunks(FALLBACK_COLUMNS)
            world = load_world(workspace.build_dir, workspace.cache_dir)
            if _manifest_identity(workspace.build_dir) != identity:
                raise RetrievalError("the build was published again while it was loaded")
        except (RetrievalError, ArtifactError, FactsError, WorldError, OSError,
                ValueError) as error:
            self.load_error = str(error)  # (the build served so far stays)
            self._failed = identity
            self.log(f"not serving the new build: {error}")
            return False
        generation = Generation(workspace, facts, world, manifest, identity,
                                hashlib.sha256(data).hexdigest(), time.time())
        if self.stale_check_seconds:
            self.check_stale(generation)
        self.current, self.load_error, self._failed = generation, None, None
        self.log(f"serving the build of {generation.manifest_sha256[:12]} "
                 f"({len(index.chunk_ids)} chunks)")
        return True

    def check_stale(self, generation: Generation | None = None) -> None:
        """Compare the sources with the manifest of the build served (not with whatever
        the build folder holds now: a newer build may have failed to load)."""
        from .freshness import changed_inputs, stale_message

        generation = generation or self.current
        workspace = generation.workspace if generation else None
        if workspace is None or not workspace.is_project_build:
            return
        try:
            changed = changed_inputs(workspace.config, generation.manifest, workspace.walks)
            generation.stale = stale_message(changed) if changed else None
        except OSError as error:
            generation.stale = f"the sources could not be compared with the build ({error})"

    def start(self) -> None:
        """The first load, then the watcher threads."""
        self.load()
        self._spawn(self.poll_seconds, self._poll)
        if self.stale_check_seconds:
            self._spawn(self.stale_check_seconds, self.check_stale)

    def _spawn(self, every: float, work: Callable[[], Any]) -> None:
        def loop() -> None:
            while not self._stop.wait(every):
                try:
                    work()
                except Exception as error:  # a watcher must outlive one bad moment
                    self.log(f"watcher: {type(error).__name__}: {error}")

        threading.Thread(target=loop, daemon=True, name=f"ctxfst-{work.__name__}").start()

    def _is_new(self, identity: tuple[int, ...] | None) -> bool:
        """A manifest neither served nor failed already."""
        return identity is not None and identity not in (
            self._failed, self.current and self.current.manifest_identity)

    def _poll(self) -> None:
        if self._is_new(_manifest_identity(self.build_dir)):  # (a stat; load reads it)
            self.load()

    def stop(self) -> None:
        self._stop.set()

    # -- answers ---------------------------------------------------------------------

    def generation(self, body: dict[str, Any]) -> Generation:
        generation = self.current
        if generation is None:
            raise BadRequest(f"no build to serve yet ({self.load_error or 'loading'})",
                             HTTPStatus.SERVICE_UNAVAILABLE, "no_build")
        allow = _boolean(body, "allow_stale", False)
        if generation.stale and not (self.allow_stale or allow):
            raise BadRequest(f"{generation.stale} (or send \"allow_stale\": true)",
                             HTTPStatus.CONFLICT, "stale_build")
        return generation

    def health(self) -> dict[str, Any]:
        generation = self.current
        build = None if generation is None else {
            "manifest_sha256": generation.manifest_sha256,
            "chunks": len(generation.workspace.index.chunk_ids),
            "model": generation.workspace.index.model_id,
            "loaded_at": round(generation.loaded_at, 3)}
        return {"status": "ok" if generation else "no_build", "build": build,
                "stale": self.stale, "load_error": self.load_error, "pid": os.getpid()}

    def query(self, body: dict[str, Any]) -> dict[str, Any]:
        from .retrieval import MODES
        from .retrieval.search import RetrievalError
        from .workspace import QueryRequest

        _known(body, {"text", "mode", "top_k", "hops", "bridge_model", "allow_stale"})
        request = QueryRequest(
            _text(body, "text", required=True), _choice(body, "mode", MODES, "graph"),
            _integer(body, "top_k", 5, 1, MAX_TOP_K), _integer(body, "hops", 2, 0, MAX_HOPS),
            _choice(body, "bridge_model", BRIDGE_MODELS, "use-multilingual"))
        generation = self.generation(body)
        try:
            skill_graph = generation.workspace.skill_graph(None) \
                if request.mode == "keyword-graph" else None
            with self._compute:
                result, _ = generation.workspace.query(request, skill_graph)
        except RetrievalError as error:
            raise BadRequest(str(error), code="retrieval_error") from None
        return result.as_json()

    def facts_ask(self, body: dict[str, Any]) -> dict[str, Any]:
        from .config import BuildSettings
        from .facts.extractors import reader_version
        from .facts.query import OPS, FactsBuildError, FactsError, FactsUsage, ask, check_tenant

        _known(body, {"tenant", "op", "entity_type", "namespace", "key", "value",
                      "min_confidence", "limit", "allow_stale"})
        tenant = _text(body, "tenant", required=True)
        op = _choice(body, "op", OPS, None, required=True)
        filters = [_text(body, name, default=None)
                   for name in ("entity_type", "namespace", "key", "value")]
        confidence = _number(body, "min_confidence", 0.0, 0.0, 1.0)
        limit = _integer(body, "limit", 20, 1, 1000)
        generation = self.generation(body)
        config = generation.workspace.config
        try:
            check_tenant(tenant)
            store = generation.facts
            settings = config.build if config else BuildSettings()
            version = reader_version(settings.facts_extractors, store.extract_version)
            return ask(store, settings, tenant, op, *filters, confidence, limit, version)
        except FactsBuildError as error:  # the build's fault, not the request's
            raise BadRequest(str(error), HTTPStatus.SERVICE_UNAVAILABLE,
                             "build_error") from None
        except FactsUsage as error:
            raise BadRequest(str(error)) from None
        except FactsError as error:
            raise BadRequest(str(error), HTTPStatus.UNPROCESSABLE_ENTITY,
                             "no_answer") from None

    def plan(self, body: dict[str, Any]) -> dict[str, Any]:
        from .runtime import commands as rt
        from .runtime.state import StateError
        from .runtime.world import WorldError

        _known(body, {"goal", "seed", "algorithm", "explain", "allow_stale"})
        goal = _text(body, "goal", default=None)
        seeds = _texts(body, "seed")
        if seeds and goal is None:
            raise BadRequest("`seed` needs `goal`")
        algorithm = _choice(body, "algorithm", ("astar", "ucs", "greedy"), "astar")
        explain = _boolean(body, "explain", False)
        generation = self.generation(body)
        config = self._project(generation)
        try:
            return rt.make_plan(config, rt.store_for(config, None), goal, seeds, algorithm,
                                explain, generation.world)
        except (rt.RuntimeUsage, WorldError, StateError) as error:
            raise BadRequest(str(error), code="plan_error") from None

    def state(self, body: dict[str, Any]) -> dict[str, Any]:
        from .runtime import commands as rt
        from .runtime.state import StateError

        _known(body, {"allow_stale"})
        config = self._project(self.generation(body))
        try:
            return rt.store_for(config, None).load().to_json()
        except StateError as error:
            raise BadRequest(str(error), HTTPStatus.NOT_FOUND, "no_state") from None

    @staticmethod
    def _project(generation: Generation):
        if generation.workspace.config is None:
            raise BadRequest("planning and the world state need a ctxfst project, not a "
                             "bare build folder", code="no_project")
        return generation.workspace.config


# -- argument checks (a request's JSON is untrusted input) ------------------------------

def _known(body: dict[str, Any], names: set[str]) -> None:
    unknown = sorted(set(body) - names)
    if unknown:
        raise BadRequest(f"unknown argument `{unknown[0]}`; this endpoint takes "
                         f"{', '.join(sorted(names))}")


def _text(body: dict[str, Any], name: str, default: str | None = "",
          required: bool = False) -> Any:
    if name not in body or body[name] is None:
        if required:
            raise BadRequest(f"`{name}` is required")
        return default
    value = body[name]
    if not isinstance(value, str):
        raise BadRequest(f"`{name}` must be text")
    if len(value) > MAX_TEXT_CHARS:
        raise BadRequest(f"`{name}` is over {MAX_TEXT_CHARS} characters")
    if required and not value.strip():
        raise BadRequest(f"`{name}` is empty")
    return value


def _texts(body: dict[str, Any], name: str) -> list[str]:
    value = body.get(name) or []
    if isinstance(value, str):
        value = [value]
    if not (isinstance(value, list) and all(isinstance(item, str) for item in value)) \
            or len(value) > MAX_TOP_K:
        raise BadRequest(f"`{name}` must be a list of at most {MAX_TOP_K} texts")
    return value


def _choice(body: dict[str, Any], name: str, choices, default: str | None,
            required: bool = False) -> Any:
    value = _text(body, name, default=default, required=required)
    if value not in choices:
        raise BadRequest(f"`{name}` must be one of {', '.join(choices)}")
    return value


def _integer(body: dict[str, Any], name: str, default: int, low: int, high: int) -> int:
    value = body.get(name, default)
    if type(value) is not int or not low <= value <= high:
        raise BadRequest(f"`{name}` must be a whole number from {low} to {high}")
    return value


def _number(body: dict[str, Any], name: str, default: float, low: float, high: float) -> float:
    value = body.get(name, default)
    if type(value) not in (int, float) or not math.isfinite(value) or not low <= value <= high:
        raise BadRequest(f"`{name}` must be a number from {low:g} to {high:g}")
    return float(value)


def _boolean(body: dict[str, Any], name: str, default: bool) -> bool:
    value = body.get(name, default)
    if type(value) is not bool:
        raise BadRequest(f"`{name}` must be true or false")
    return value


# -- HTTP --------------------------------------------------------------------------------

ROUTES = {("GET", "/health"): "health", ("GET", "/state"): "state",
          ("POST", "/query"): "query", ("POST", "/facts/ask"): "facts_ask",
          ("POST", "/plan"): "plan", ("POST", "/state"): "state"}


class Handler(BaseHTTPRequestHandler):
    server_version = "ctxfst"
    protocol_version = "HTTP/1.1"  # keep-alive: an agent's client reuses its connection
    timeout = READ_TIMEOUT_SECONDS
    # Headers and body go out in two writes: with Nagle's algorithm the second waits for
    # the client's delayed ACK, 40 ms a request on Linux.
    disable_nagle_algorithm = True
    service: Service  # set on the class made for each server

    def do_GET(self) -> None:
        self._answer("GET")

    def do_POST(self) -> None:
        self._answer("POST")

    # Every other method gets the same JSON answer (405 where the path exists, else 404),
    # never the standard library's HTML page.
    def do_HEAD(self) -> None:
        self._answer("HEAD")

    do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_TRACE = do_CONNECT = \
        lambda self: self._answer(self.command)

    def handle_one_request(self) -> None:
        """One request, read whole within REQUEST_DEADLINE_SECONDS: the socket's timeout
        bounds each read, so a client sending a byte at a time would hold its thread for
        ever; at the deadline the connection is shut."""
        self.server.watch(self)
        try:
            super().handle_one_request()
        finally:
            self.server.unwatch(self)

    def done_reading(self) -> None:
        self.server.unwatch(self)

    def expire(self) -> None:
        """The request deadline passed while it was still being read: shut it."""
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def send_error(self, code: int, message: str | None = None,
                   explain: str | None = None) -> None:
        """The standard library's refusals (a malformed or over-long request line, too
        many or too long headers, an unknown HTTP version) as JSON, like every answer."""
        self.close_connection = True
        try:
            status = HTTPStatus(code)
        except ValueError:
            status = HTTPStatus.BAD_REQUEST
        codes = {414: "uri_too_long", 431: "headers_too_large", 505: "version_not_supported",
                 408: "request_timeout"}
        if not getattr(self, "request_version", None) or self.request_version == "HTTP/0.9":
            self.request_version = "HTTP/1.1"  # (the answer goes out as HTTP/1.1 JSON)
        self._send(status, {"error": {"code": codes.get(status.value, "bad_request"),
                                      "message": message or status.phrase}})

    def _answer(self, method: str) -> None:
        path = self.path.split("?", 1)[0]
        name = ROUTES.get((method, path))
        body_read = method != "POST"
        try:
            self._check_framing()
            self._check_origin()
            if name is None:
                known = sorted({p for (_, p) in ROUTES})
                if any(p == path for (_, p) in ROUTES):
                    raise BadRequest(f"{method} is not answered at {path}",
                                     HTTPStatus.METHOD_NOT_ALLOWED, "method_not_allowed")
                raise BadRequest(f"no endpoint {path}; there are {', '.join(known)}",
                                 HTTPStatus.NOT_FOUND, "not_found")
            body = self._body() if method == "POST" else {}
            body_read = True
            self.done_reading()  # read whole: the request deadline no longer applies
            answer = self.service.health() if name == "health" else \
                getattr(self.service, name)(body)
            self._send(HTTPStatus.OK, answer)
        except BadRequest as error:
            if not body_read:  # what is left of it would be read as the next request
                self.close_connection = True
            self._send(error.status, {"error": {"code": error.code, "message": str(error)}})
        except (ConnectionError, TimeoutError):  # the client went away: nothing to answer
            self.close_connection = True
        except Exception as error:  # a bug: say so, keep serving, show no traceback
            self.service.log(f"internal error: {type(error).__name__}: {error}")
            self.close_connection = True
            self._send(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": {
                "code": "internal", "message": f"{type(error).__name__}: {error}"}})

    def _check_framing(self) -> None:
        """One Host, and a body framed by Content-Length alone: a second Host, or a
        Transfer-Encoding beside the length, is how a request is smuggled past a proxy."""
        if len(self.headers.get_all("Host") or []) > 1:
            raise BadRequest("a request has one Host header")
        if self.headers.get("Transfer-Encoding") is not None:
            raise BadRequest("Transfer-Encoding is not accepted; send the body with a "
                             "Content-Length", HTTPStatus.NOT_IMPLEMENTED, "not_implemented")
        if len(self.headers.get_all("Content-Length") or []) > 1:
            raise BadRequest("a request has one Content-Length header")

    def _check_origin(self) -> None:
        """Only this machine's clients: a web page the user has open can send requests to
        127.0.0.1 too (a form post, or a name it rebinds to 127.0.0.1), with its own Host
        or Origin. Such requests are refused; so is a POST that is not JSON (what a page
        can send without asking the browser first)."""
        port = self.server.server_address[1]
        local = {f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"}
        if self.headers.get("Host") not in local:
            raise BadRequest("the Host header must name this server (127.0.0.1 or localhost "
                             f"and port {port})", HTTPStatus.FORBIDDEN, "forbidden")
        origin = self.headers.get("Origin")
        if origin is not None and origin.removeprefix("http://") not in local:
            raise BadRequest(f"requests from {origin} are not answered",
                             HTTPStatus.FORBIDDEN, "forbidden")
        kind = (self.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
        if self.command == "POST" and kind != "application/json":
            raise BadRequest("a POST's Content-Type must be application/json",
                             HTTPStatus.UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type")

    def _body(self) -> dict[str, Any]:
        length = self.headers.get("Content-Length") or ""
        if not re.fullmatch(r"[0-9]{1,9}", length):
            raise BadRequest("a POST needs a Content-Length", HTTPStatus.LENGTH_REQUIRED,
                             "length_required")
        if int(length) > MAX_BODY_BYTES:
            raise BadRequest(f"the body is over {MAX_BODY_BYTES} bytes",
                             HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "too_large")
        try:
            data = self.rfile.read(int(length))
        except TimeoutError:
            data = b""
        if len(data) < int(length):  # the client stopped sending before the end
            self.close_connection = True
            raise BadRequest(f"the body ended after {len(data)} of {length} bytes, or the "
                             f"client stopped sending for {READ_TIMEOUT_SECONDS:g} s",
                             HTTPStatus.REQUEST_TIMEOUT, "request_timeout")
        from .artifacts.io import JsonRefused, strict_json

        try:
            body = strict_json(data) if data.strip() else {}
        except JsonRefused as error:
            raise BadRequest(f"the body is not JSON ctxfst reads, at {error}") from None
        if not isinstance(body, dict):
            raise BadRequest("the body must be a JSON object")
        return body

    def _send(self, status: HTTPStatus, payload: dict[str, Any]) -> None:
        # The commands' JSON, compact: indenting is for people, and costs a request time.
        data = json.dumps({"schema_version": OUTPUT_SCHEMA_VERSION, **payload},
                          ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":  # (a HEAD answer has the headers alone)
            self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base's name)
        pass  # one line a request would drown the server's own lines


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._deadlines: dict[Any, float] = {}  # handler -> when its request must be read
        self._deadlines_lock = threading.Lock()
        self._watchdog: threading.Thread | None = None

    def watch(self, handler: Any) -> None:
        """handler starts reading a request: one watchdog thread a server shuts it at
        its deadline (a timer a request cost more than the request)."""
        with self._deadlines_lock:
            self._deadlines[handler] = time.monotonic() + REQUEST_DEADLINE_SECONDS
            if self._watchdog is None:
                self._watchdog = threading.Thread(target=self._watch, daemon=True,
                                                  name="ctxfst-request-deadlines")
                self._watchdog.start()

    def unwatch(self, handler: Any) -> None:
        with self._deadlines_lock:
            self._deadlines.pop(handler, None)

    def _watch(self) -> None:
        while True:
            time.sleep(min(0.25, REQUEST_DEADLINE_SECONDS / 4))
            now = time.monotonic()
            with self._deadlines_lock:
                late = [h for h, deadline in self._deadlines.items() if deadline < now]
                for handler in late:
                    del self._deadlines[handler]
            for handler in late:
                handler.expire()

    def process_request(self, request: Any, client_address: Any) -> None:
        """At most MAX_CONNECTIONS connections at once: one more is told so and closed,
        so idle or slow clients cannot take every thread."""
        if not self.slots.acquire(blocking=False):
            try:
                request.sendall(BUSY_ANSWER)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection that failed outside a request (reset, timed out): one line, not
        socketserver's traceback."""
        error = sys.exc_info()[1]
        if not isinstance(error, (ConnectionError, TimeoutError)):
            print(f"ctxfst serve: connection from {client_address[0]}: "
                  f"{type(error).__name__}: {error}", file=sys.stderr, flush=True)


_BUSY_BODY = json.dumps({"schema_version": OUTPUT_SCHEMA_VERSION, "error": {
    "code": "busy", "message": f"{MAX_CONNECTIONS} connections are open; try again"}}
    ).encode() + b"\n"
BUSY_ANSWER = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json; "
               b"charset=utf-8\r\nConnection: close\r\nContent-Length: "
               + str(len(_BUSY_BODY)).encode() + b"\r\n\r\n" + _BUSY_BODY)


class Loads:
    """Each worker's count of open connections, in memory the forked workers share.

    Keep-alive connections stay with the worker that accepted them, so a worker accepts
    only while no other holds fewer: four clients on two workers are two and two, not
    three and one as a race for each connection can end."""

    NOT_SERVING = 1 << 62  # (a worker still loading must not look the least loaded)

    def __init__(self, workers: int) -> None:
        self._memory = mmap.mmap(-1, 8 * workers)  # anonymous and shared: made before fork
        self._counts = memoryview(self._memory).cast("q")
        for slot in range(workers):
            self._counts[slot] = self.NOT_SERVING
        self._lock = threading.Lock()  # (a worker's own threads; only it writes its slot)

    def serving(self, slot: int, serving: bool) -> None:
        with self._lock:
            self._counts[slot] = 0 if serving else self.NOT_SERVING

    def least(self, slot: int) -> bool:
        return self._counts[slot] <= min(self._counts)

    def add(self, slot: int, change: int) -> None:
        with self._lock:
            self._counts[slot] += change


class WorkerServer(Server):
    """A worker's server on the shared listening socket."""

    loads: Loads
    slot: int

    def get_request(self) -> tuple[socket.socket, Any]:
        if not self.loads.least(self.slot):
            time.sleep(0.0005)  # a less loaded worker takes it (the socket stays readable)
            raise BlockingIOError("left to a less loaded worker")  # (skipped by the caller)
        return super().get_request()

    def process_request(self, request: Any, client_address: Any) -> None:
        self.loads.add(self.slot, 1)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        try:
            super().shutdown_request(request)
        finally:
            self.loads.add(self.slot, -1)


def make_server(service: Service, port: int, host: str = "127.0.0.1",
                listener: socket.socket | None = None,
                balance: tuple[Loads, int] | None = None) -> Server:
    """An HTTP server for `service` on a new socket, or on `listener` (a worker's share of
    one listening socket, balanced by `balance`: the workers' loads and its slot)."""
    handler = type("BoundHandler", (Handler,), {"service": service})
    if listener is None:
        return Server((host, port), handler)
    server = Server(listener.getsockname(), handler, bind_and_activate=False) \
        if balance is None else WorkerServer(listener.getsockname(), handler,
                                             bind_and_activate=False)
    if balance is not None:
        server.loads, server.slot = balance
    server.socket.close()
    server.socket = listener
    server.server_name, server.server_port = listener.getsockname()[:2]
    return server


def share_cpus(workers: int) -> None:
    """Size the numerical libraries' thread pools to one worker's share of the CPUs.
    OpenBLAS's threads in every worker, each pool as large as the machine, doubled a
    query's CPU time. Effective only before numpy and torch load (they read it then)."""
    share = str(max(1, (os.cpu_count() or 1) // workers))
    for variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(variable, share)  # (a user's own setting wins)


def serve(make_service: Callable[[str], Service], port: int, workers: int = 1,
          ready: Callable[[tuple[str, int]], None] | None = None) -> int:
    """Serve until SIGTERM or SIGINT; 0 after a clean stop. With several workers, each is
    a process with its own loaded build, all accepting on one listening socket: queries
    are mostly Python, and one process runs one of them at a time."""
    listener = socket.create_server(("127.0.0.1", port), backlog=128)
    address = listener.getsockname()[:2]
    if workers == 1:
        return _serve_on(make_service(""), listener, lambda: ready and ready(address))
    listener.setblocking(False)  # the workers race for each connection; losers must not block
    loads = Loads(workers)
    started_read, started_write = os.pipe()
    children = []
    for number in range(workers):
        pid = os.fork()
        if pid == 0:  # a worker: load, say so on the pipe, serve
            code = 70
            try:
                os.close(started_read)
                code = _serve_on(make_service(f"worker {number + 1}: "), listener,
                                 lambda: os.write(started_write, b"."), (loads, number))
            except BaseException as error:  # (os._exit would swallow it unsaid)
                print(f"ctxfst serve: worker {number + 1}: {type(error).__name__}: {error}",
                      file=sys.stderr, flush=True)
            finally:
                os._exit(code)
        children.append(pid)
    os.close(started_write)
    listener.close()

    def forward(signum: int, frame: Any) -> None:
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        failed, announced = 0, 0
        while children:
            if announced < workers:  # ready once every worker serves: all take connections
                if select.select([started_read], [], [], 0.2)[0]:
                    said = len(os.read(started_read, workers))
                    announced = announced + said if said else workers  # (none left to say)
                    if said and announced >= workers and ready:
                        ready(address)
                pid, status = os.waitpid(-1, os.WNOHANG)
                if pid == 0:
                    continue
            else:
                pid, status = os.wait()
            children.remove(pid)
            code = os.waitstatus_to_exitcode(status)
            if code != 0:  # a worker died: the others go too (a supervisor restarts)
                failed = failed or (128 - code if code < 0 else code)  # (killed: 128 + N)
                forward(signal.SIGTERM, None)
        return failed
    finally:
        os.close(started_read)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _serve_on(service: Service, listener: socket.socket, started: Callable[[], Any],
              balance: tuple[Loads, int] | None = None) -> int:
    server = make_server(service, 0, listener=listener, balance=balance)
    stopping = threading.Event()

    def stop(signum: int, frame: Any) -> None:
        service.log(f"stopping ({signal.Signals(signum).name})")
        stopping.set()
        threading.Thread(target=server.shutdown, daemon=True).start()

    # (installed before the first load, which may take a while: a stop then is a stop)
    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        service.start()
        started()
        if balance is not None:
            balance[0].serving(balance[1], True)
        if not stopping.is_set():
            server.serve_forever(poll_interval=0.2)
    finally:
        if balance is not None:
            balance[0].serving(balance[1], False)
        service.stop()
        server.server_close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


def log_to_stderr(text: str) -> None:
    from .diagnostics import escape

    print(f"ctxfst serve: {escape(text)}", file=sys.stderr, flush=True)
