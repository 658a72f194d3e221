"""Headless Chromium driven over the DevTools protocol on a pipe (--remote-debugging-pipe:
no port, no websocket library): open a page, evaluate JavaScript, collect console errors,
take a screenshot. For the report's browser tests and benchmarks/report_speed.py."""

from __future__ import annotations

import base64
import fcntl
import json
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-default-apps", "--disable-extensions", "--mute-audio",
         "--disable-dev-shm-usage",  # (a container's small /dev/shm crashes tabs)
         "--allow-file-access-from-files", "--remote-debugging-pipe"]


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


class BrowserError(Exception):
    pass


class Chromium:
    def __init__(self, executable: str, window: tuple[int, int] = (1280, 800)) -> None:
        self.profile = tempfile.mkdtemp(prefix="ctxfst-chromium-")
        to_browser_read, self._to_browser = os.pipe()
        self._from_browser, from_browser_write = os.pipe()

        def pipes_as_3_and_4() -> None:  # (in the child, before exec)
            read_end = fcntl.fcntl(to_browser_read, fcntl.F_DUPFD, 10)
            write_end = fcntl.fcntl(from_browser_write, fcntl.F_DUPFD, 10)
            os.dup2(read_end, 3)
            os.dup2(write_end, 4)

        self.process = subprocess.Popen(
            [executable, *FLAGS, f"--user-data-dir={self.profile}",
             f"--window-size={window[0]},{window[1]}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            close_fds=False, preexec_fn=pipes_as_3_and_4)
        os.close(to_browser_read)
        os.close(from_browser_write)
        self._next_id = 0
        self._replies: dict[int, queue.Queue] = {}
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        buffer = b""
        while True:
            try:
                chunk = os.read(self._from_browser, 1 << 16)
            except OSError:
                break
            if not chunk:
                break
            buffer += chunk
            while b"\0" in buffer:
                message, buffer = buffer.split(b"\0", 1)
                data = json.loads(message)
                if "id" in data:
                    with self._lock:
                        waiting = self._replies.get(data["id"])
                    if waiting is not None:
                        waiting.put(data)
                else:
                    self.events.append(data)

    def send(self, method: str, params: dict | None = None, session: str | None = None,
             timeout: float = 60.0) -> dict[str, Any]:
        with self._lock:
            self._next_id += 1
            number = self._next_id
            reply: queue.Queue = queue.Queue()
            self._replies[number] = reply
        message = {"id": number, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        try:
            data = reply.get(timeout=timeout)
        except queue.Empty:
            raise BrowserError(f"{method}: no reply in {timeout} s") from None
        if "error" in data:
            raise BrowserError(f"{method}: {data['error']}")
        return data.get("result", {})

    def open(self, url: str, timeout: float = 60.0) -> Page:
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget",
                            {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, session)
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable", session=session)
        started = time.perf_counter()
        self.send("Page.navigate", {"url": url}, session=session)
        page.wait_for_event("Page.loadEventFired", timeout)
        page.load_seconds = time.perf_counter() - started
        return page

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=10)
        except (BrowserError, OSError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for fd in (self._to_browser, self._from_browser):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Page:
    def __init__(self, browser: Chromium, session: str) -> None:
        self.browser, self.session = browser, session
        self.load_seconds = 0.0

    def _mine(self):
        return [e for e in self.browser.events if e.get("sessionId") == self.session]

    def wait_for_event(self, method: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for event in self._mine():
                if event["method"] == method:
                    return event
            time.sleep(0.02)
        raise BrowserError(f"no {method} in {timeout} s")

    def evaluate(self, expression: str) -> Any:
        result = self.browser.send("Runtime.evaluate", {
            "expression": expression, "returnByValue": True, "awaitPromise": True},
            session=self.session)
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 60.0) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise BrowserError(f"{expression} still false after {timeout} s")
            time.sleep(0.05)

    def console_errors(self) -> list[str]:
        """Uncaught exceptions, console.error calls and the browser's own error entries
        (a refused script or resource, a CSP violation)."""
        found = []
        for event in self._mine():
            method, params = event["method"], event.get("params", {})
            if method == "Runtime.exceptionThrown":
                details = params["exceptionDetails"]
                found.append(details.get("exception", {}).get("description")
                             or details.get("text", "exception"))
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error",
                                                                                 "assert"):
                found.append(" ".join(str(arg.get("value", arg.get("description", "")))
                                      for arg in params.get("args", [])))
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                found.append(params["entry"].get("text", ""))
        return found

    def screenshot(self) -> bytes:
        data = self.browser.send("Page.captureScreenshot", {"format": "png"},
                                 session=self.session)["data"]
        return base64.b64decode(data)


def file_url(path: Path) -> str:
    return path.resolve().as_uri()
