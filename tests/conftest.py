"""Shared helpers: write knowledge bases into tmp folders and run the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from ctxfst.cli import main

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"  # vendored public data: a clone alone passes
UPSTREAM = FIXTURES / "upstream"
CH22 = FIXTURES / "ch22" / "benchmark.ctxfst.md"


def write(root: Path, name: str, text: str | bytes) -> Path:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def copy_example(root: Path, model: str = "hash-64", extra: str = "") -> Path:
    """The repository's example knowledge base in root, with a fast embedder."""
    import shutil

    shutil.copytree(REPO / "content", root / "content")
    shutil.copytree(REPO / "skills", root / "skills")
    write(root, "ctxfst.toml", f'content_dir = "content"\nskills_dir = "skills"\n'
          f'embedding_model = "{model}"\n{extra}')
    return root


def make_project(root: Path) -> Path:
    write(root, "ctxfst.toml", 'content_dir = "content"\nskills_dir = "skills"\n')
    (root / "content").mkdir(exist_ok=True)
    (root / "skills").mkdir(exist_ok=True)
    return root


def reseal(build: Path, name: str) -> None:
    """Record an artifact's current bytes in build/manifest.json, as a hostile build
    folder whose manifest agrees with its edited files would (readers check artifacts
    against the manifest, then their shape)."""
    import hashlib

    manifest_path = build / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    path = build / name
    for entry in manifest["artifacts"]:
        if entry["path"] == name:
            entry.update(sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
                         bytes=path.stat().st_size)
    manifest_path.write_text(json.dumps(manifest))


class QuietServer(ThreadingHTTPServer):
    """A test's HTTP server on 127.0.0.1 whose close waits for its request threads (a
    handler still sleeping must not print into a later test) and that logs nothing."""

    daemon_threads = False
    block_on_close = True

    def handle_error(self, request, client_address):
        pass  # a client that gave up (a timeout under test) closed the socket


class JsonService:
    """A fake model service on 127.0.0.1: each POST's JSON body goes to answer(path,
    body, headers), which returns (status, reply bytes). close() waits for it to stop."""

    def __init__(self) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler

        service = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                status, data = service.answer(self.path, body, self.headers)
                self.send_response(status)
                if status != 200:
                    self.send_header("Retry-After", "0")
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = QuietServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def answer(self, path: str, body: dict, headers) -> tuple[int, bytes]:
        raise NotImplementedError

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


class Result:
    def __init__(self, code: int, out: str, err: str) -> None:
        self.code, self.out, self.err = code, out, err

    def json(self) -> dict:
        return json.loads(self.out)

    def codes(self) -> list[str]:
        return [d["code"] for d in self.json()["diagnostics"]]


@pytest.fixture
def cli(capsys, monkeypatch):
    """Run `ctxfst ARGS` in-process from a working directory; returns a Result."""

    def run(*args: str, cwd: Path | None = None) -> Result:
        if cwd is not None:
            monkeypatch.chdir(cwd)
        try:
            code = main([str(a) for a in args])
        except SystemExit as stop:  # argparse usage errors
            code = stop.code
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run


def run_process(*args: str, cwd: Path | None = None, env: dict | None = None
                ) -> subprocess.CompletedProcess:
    """Run ctxfst as a real process (the console-script path users take)."""
    return subprocess.run([sys.executable, "-m", "ctxfst", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, env={**os.environ, **(env or {})},
                          check=False)


def add_skill_script(kb: Path, skill: str, body: str) -> None:
    """Give a skill an executable run.py for the command executor (rebuild to use it)."""
    script = kb / "skills" / skill / "run.py"
    script.write_text(f"#!{sys.executable}\n{body}")
    script.chmod(0o755)
    skill_file = kb / "skills" / skill / "SKILL.md"
    skill_file.write_text(skill_file.read_text().replace("cost:", "script: run.py\ncost:", 1))


def counted_sha256(monkeypatch, module) -> list[int]:
    """The sizes of what `module` hashes with hashlib.sha256 from now on (its hashlib
    replaced by one that counts)."""
    import hashlib

    hashed: list[int] = []

    class Counting:
        def sha256(self, data=b""):
            hashed.append(len(data))
            return hashlib.sha256(data)

    monkeypatch.setattr(module, "hashlib", Counting())
    return hashed


@pytest.fixture
def built_example(tmp_path, capsys):
    """The example knowledge base, built (hash-64), in tmp_path."""
    from ctxfst.pipeline.runner import run_build

    copy_example(tmp_path)
    assert run_build(tmp_path, [], quiet=True) == 0
    capsys.readouterr()
    return tmp_path
