"""Language-model providers behind one small interface: an OpenAI-compatible chat
endpoint (hosted, or a local llama.cpp, vLLM or Ollama server), the Anthropic Messages
API, or any command that reads a JSON request on stdin and writes a JSON answer.

API keys come from the environment only. They are sent in a header and never put in a
message, a cache key or an artifact: an error text that might echo one is redacted.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from dataclasses import dataclass

from ..remote import HttpSettings, RemoteError, post_json, redact

MAX_REPLY_BYTES = 1 << 20
ProviderError = RemoteError  # a request that failed for good: the reason, redacted


@dataclass(frozen=True)
class Request:
    system: str
    prompt: str
    max_tokens: int


class Provider:
    kind = ""

    def __init__(self, model: str, http: HttpSettings | None = None) -> None:
        self.model = model
        self.http = http or HttpSettings()
        self._secret: str | None = None

    @property
    def identity(self) -> str:
        """What makes two providers answer alike: part of the cache key (no secret)."""
        return f"{self.kind}:{self.model}"

    def complete(self, request: Request) -> str:
        raise NotImplementedError

    def redact(self, text: str) -> str:
        return redact(text, self._secret)

    def _post(self, url: str, headers: dict[str, str], body: dict) -> dict:
        return post_json(url, headers, body, self.http, self._secret, MAX_REPLY_BYTES)


class OpenAICompatible(Provider):
    """POST {base_url}/chat/completions; the key (if any) from an environment variable."""

    kind = "openai-compatible"

    def __init__(self, model: str, base_url: str, key_env: str = "OPENAI_API_KEY",
                 http: HttpSettings | None = None) -> None:
        super().__init__(model, http)
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"--base-url {base_url!r} is no http(s) URL")
        self.base_url = base_url.rstrip("/")
        self._secret = os.environ.get(key_env) or None

    @property
    def identity(self) -> str:
        return f"{self.kind}:{self.model}@{self.base_url}"

    def complete(self, request: Request) -> str:
        headers = {"Authorization": f"Bearer {self._secret}"} if self._secret else {}
        answer = self._post(f"{self.base_url}/chat/completions", headers, {
            "model": self.model, "temperature": 0, "max_tokens": request.max_tokens,
            "messages": [{"role": "system", "content": request.system},
                         {"role": "user", "content": request.prompt}]})
        try:
            content = answer["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise ProviderError("the reply has no choices[0].message.content") from None
        return _text(content)


class Anthropic(Provider):
    """The Anthropic Messages API; the key from ANTHROPIC_API_KEY."""

    kind = "anthropic"
    URL = "https://api.anthropic.com/v1/messages"

    def __init__(self, model: str, base_url: str | None = None,
                 key_env: str = "ANTHROPIC_API_KEY", http: HttpSettings | None = None) -> None:
        super().__init__(model, http)
        self._secret = os.environ.get(key_env) or None
        if not self._secret:
            raise ValueError(f"the anthropic provider needs an API key in ${key_env}")
        self.url = (base_url.rstrip("/") + "/v1/messages") if base_url else self.URL

    def complete(self, request: Request) -> str:
        answer = self._post(self.url, {"x-api-key": self._secret or "",
                                       "anthropic-version": "2023-06-01"}, {
            "model": self.model, "max_tokens": request.max_tokens, "temperature": 0,
            "system": request.system,
            "messages": [{"role": "user", "content": request.prompt}]})
        try:
            parts = [part["text"] for part in answer["content"] if part.get("type") == "text"]
        except (KeyError, TypeError, AttributeError):
            raise ProviderError("the reply has no content[].text") from None
        return _text("".join(parts))


class Command(Provider):
    """A command the user names: one JSON request on stdin ({"system", "prompt",
    "max_tokens", "model"}), one JSON answer on stdout ({"text": "..."})."""

    kind = "command"

    def __init__(self, command: str, model: str = "", http: HttpSettings | None = None) -> None:
        super().__init__(model, http)
        self.argv = shlex.split(command)
        if not self.argv:
            raise ValueError("--command is empty")

    @property
    def identity(self) -> str:
        return f"{self.kind}:{self.model}:{shlex.join(self.argv)}"

    def complete(self, request: Request) -> str:
        payload = json.dumps({"system": request.system, "prompt": request.prompt,
                              "max_tokens": request.max_tokens, "model": self.model})
        try:
            done = subprocess.run(self.argv, input=payload.encode(), capture_output=True,
                                  timeout=self.http.timeout, check=False)
        except subprocess.TimeoutExpired:
            raise ProviderError(f"the command took over {self.http.timeout:g} s") from None
        except OSError as error:
            raise ProviderError(f"the command cannot run: {error.strerror or error}") from None
        if done.returncode != 0:
            tail = " ".join(done.stderr.decode("utf-8", "replace").split())[-300:]
            raise ProviderError(f"the command exited {done.returncode}" +
                                (f": {tail}" if tail else ""))
        try:
            answer = json.loads(done.stdout[:MAX_REPLY_BYTES])
            return _text(answer["text"])
        except (ValueError, KeyError, TypeError):
            raise ProviderError('the command did not print {"text": "..."}') from None


def _text(value) -> str:
    if not isinstance(value, str):
        raise ProviderError("the reply's text is not a string")
    return value


def make_provider(kind: str, model: str | None, base_url: str | None, command: str | None,
                  key_env: str | None, http: HttpSettings) -> Provider:
    """The provider the options name; ValueError says what is missing."""
    if kind == "command":
        if not command:
            raise ValueError("--provider command needs --command")
        return Command(command, model or "", http)
    if not model:
        raise ValueError(f"--provider {kind} needs --model")
    if kind == "anthropic":
        return Anthropic(model, base_url, key_env or "ANTHROPIC_API_KEY", http)
    if not base_url:
        raise ValueError("--provider openai needs --base-url (https://api.openai.com/v1, or "
                         "a local server's, such as http://127.0.0.1:8080/v1)")
    return OpenAICompatible(model, base_url, key_env or "OPENAI_API_KEY", http)
