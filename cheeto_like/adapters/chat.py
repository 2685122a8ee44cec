"""Post a message to a chat incoming webhook (Slack's shape, which Mattermost, Rocket.Chat
and Teams' Slack-compatible endpoints accept): ``POST <url>`` with ``{"text": ...}``.

An incoming webhook's URL *is* its credential, so it never appears in an error, a log
line or a record: errors name only the scheme and host, httpx's own request log line is
filtered while the post runs, and the shared client's retry log is avoided by posting
once (a weekly digest that failed is reported by its caller, not retried blindly).
"""

from __future__ import annotations

import logging
from urllib.parse import urlsplit

from ..errors import ExternalError
from .http import HttpError, JsonHttpClient, RetryPolicy

MAX_TEXT = 35_000  # Slack truncates a message's text past 40,000 characters


class _Redact(logging.Filter):
    def __init__(self, secret: str) -> None:
        super().__init__()
        self.secret = secret

    def filter(self, record: logging.LogRecord) -> bool:
        return self.secret not in record.getMessage()


def origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname or '?'}"


async def post_message(url: str, text: str, *, request_timeout: float = 10.0) -> None:
    """Post ``text``; ``ExternalError`` (naming only the host) when it is not taken."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ExternalError("chat webhook: the URL is not an http(s) URL")
    base = f"{parts.scheme}://{parts.netloc}"
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    if len(text) > MAX_TEXT:
        text = text[:MAX_TEXT] + "\n… (cut; see the audit's JSON lines)"
    guard = _Redact(parts.path or url)
    httpx_log = logging.getLogger("httpx")
    httpx_log.addFilter(guard)
    try:
        async with JsonHttpClient(base, headers={}, timeout=request_timeout,
                                  retry=RetryPolicy(retries=0)) as client:
            await client.request("POST", path, json_body={"text": text}, ok=(200, 201, 204))
    except HttpError as exc:
        status = f"HTTP {exc.status}" if exc.status else ("timed out or unreachable"
                                                          if exc.transient else "failed")
        raise ExternalError(f"chat webhook at {origin(url)}: {status}") from None
    finally:
        httpx_log.removeFilter(guard)
