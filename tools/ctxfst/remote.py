"""JSON over HTTP to model services (language and embedding models): timeouts, retries
with back-off and Retry-After, bounded replies, and secrets kept out of every message.

Standard library only. Which hosts settings may name is decided in config.py.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

MAX_REPLY_BYTES = 64 << 20  # an embedding batch of a large model is megabytes
MAX_WAIT_SECONDS = 30.0     # the longest Retry-After honoured
RETRIED_STATUSES = (408, 409, 429, 500, 502, 503, 504)


class RemoteError(OSError):
    """A request that failed for good (after its retries), its reason redacted."""


@dataclass
class HttpSettings:
    timeout: float = 60.0
    retries: int = 3
    backoff: float = 1.0   # seconds before the first retry, doubled after each


def redact(text: str, secret: str | None) -> str:
    return text.replace(secret, "[redacted]") if secret else text


def post_json(url: str, headers: dict[str, str], body: dict, http: HttpSettings,
              secret: str | None = None, limit: int = MAX_REPLY_BYTES) -> dict:
    """POST body as JSON, return the reply's JSON object. Retries network errors and the
    statuses that say "later"; RemoteError for the rest."""
    data = json.dumps(body).encode()
    wait = http.backoff
    for attempt in range(http.retries + 1):
        request = urllib.request.Request(url, data=data, method="POST",
                                         headers={"Content-Type": "application/json",
                                                  **headers})
        try:
            with urllib.request.urlopen(request, timeout=http.timeout) as reply:
                raw = reply.read(limit + 1)
            if len(raw) > limit:
                raise RemoteError(f"the reply is over {limit:,} bytes")
            try:
                answer = json.loads(raw)
            except ValueError:
                raise RemoteError("the reply is not JSON") from None
            if not isinstance(answer, dict):
                raise RemoteError("the reply is not a JSON object")
            return answer
        except urllib.error.HTTPError as error:
            detail = redact(_error_text(error), secret)
            if error.code not in RETRIED_STATUSES or attempt == http.retries:
                raise RemoteError(f"HTTP {error.code}{detail}") from None
            wait = max(wait, _seconds(error.headers.get("Retry-After")) or 0.0)
        except RemoteError:
            raise
        except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as error:
            if attempt == http.retries:
                reason = getattr(error, "reason", error)
                raise RemoteError(redact(f"no answer from {url}: {reason}", secret)) from None
        time.sleep(min(wait, MAX_WAIT_SECONDS))
        wait *= 2
    raise AssertionError("unreachable")


def _seconds(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None


def _error_text(error: urllib.error.HTTPError) -> str:
    try:
        body = error.read(2000).decode("utf-8", "replace")
    except OSError:
        return ""
    try:
        message = json.loads(body).get("error", {})
        message = message.get("message", "") if isinstance(message, dict) else str(message)
    except (ValueError, AttributeError):
        message = body
    message = " ".join(str(message).split())[:300]
    return f": {message}" if message else ""
