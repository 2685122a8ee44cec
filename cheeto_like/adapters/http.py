"""The HTTP edge shared by the HiPPO and IAM clients: timeouts, bounded retries with
exponential backoff on transient failures, and errors that say what went wrong.

- Transient (retried, then ``HttpTransientError``): a timeout, a connection or protocol
  error, HTTP 5xx and 429.
- ``HttpAuthError``: 401/403. Never retried and never read as "no data": a wrong key must
  fail loudly instead of looking like an empty queue.
- ``HttpStatusError``: any other unexpected status.
- ``HttpBadBody``: a body that is not the JSON the endpoint documents.

Secrets go in headers only; URLs (which end up in logs and error messages) never carry
them. httpx event hooks are deliberately not used (the async client awaits them, so a
sync hook breaks every request).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from ..config import HttpClientOptions
from ..errors import ExternalError

log = logging.getLogger(__name__)

TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})


class HttpError(ExternalError):
    """A request to ``service`` failed; ``status`` is the HTTP status when there was one."""

    def __init__(self, service: str, message: str, *, status: int | None = None,
                 transient: bool = False) -> None:
        super().__init__(f"{service}: {message}", transient=transient)
        self.service = service
        self.status = status


class HttpTransientError(HttpError):
    """Timeouts, connection errors, 5xx/429 after every retry: try again later."""

    def __init__(self, service: str, message: str, *, status: int | None = None) -> None:
        super().__init__(service, message, status=status, transient=True)


class HttpAuthError(HttpError):
    """401/403: the API key is wrong, missing or lacks permission."""


class HttpStatusError(HttpError):
    """An unexpected status that retrying will not fix (400, 405, 409, …)."""


class HttpBadBody(HttpError):
    """The service answered, but not with the JSON its API documents."""


@dataclass(frozen=True)
class RetryPolicy:
    retries: int = 2  # extra attempts after the first
    backoff_seconds: float = 1.0  # before the first retry; doubled each time
    max_backoff_seconds: float = 30.0

    @classmethod
    def from_options(cls, options: HttpClientOptions) -> RetryPolicy:
        return cls(retries=options.retries, backoff_seconds=options.retry_backoff_seconds)

    def delay(self, attempt: int) -> float:
        """Seconds to wait before retry number ``attempt`` (1-based)."""
        return min(self.backoff_seconds * 2 ** (attempt - 1), self.max_backoff_seconds)


def _snippet(text: str, limit: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "…"


class JsonHttpClient:
    """An async httpx client for one service, with the rules above.

    ``transport`` lets tests and tools point it at an in-process app; by default it talks
    to ``base_url`` over the network. Use as an async context manager (or ``aclose()``).
    """

    service = "HTTP"

    def __init__(self, base_url: str, *, headers: Mapping[str, str], timeout: float,
                 retry: RetryPolicy, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.retry = retry
        self._client = httpx.AsyncClient(
            base_url=self.base_url + "/", headers=dict(headers), timeout=timeout,
            follow_redirects=True, transport=transport)

    async def __aenter__(self) -> JsonHttpClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._client.aclose()

    async def request(self, method: str, path: str, *, params: Mapping[str, Any] | None = None,
                      json_body: Any = None, ok: tuple[int, ...] = (200,),
                      passthrough: tuple[int, ...] = ()) -> httpx.Response:
        """Send with retries; returns a response whose status is in ``ok`` or
        ``passthrough`` (e.g. 404 where it means "no such record"), else raises."""
        url = path.lstrip("/")
        what = f"{method} {self.base_url}/{url}"
        attempt = 0
        while True:
            try:
                response = await self._client.request(method, url, params=params,
                                                      json=json_body)
            except httpx.TimeoutException as exc:
                problem = f"{what} timed out ({type(exc).__name__})"
                status = None
            except httpx.TransportError as exc:  # connection refused/reset, DNS, protocol
                problem = f"{what} failed: {type(exc).__name__}: {exc}"
                status = None
            else:
                status = response.status_code
                if status in ok or status in passthrough:
                    return response
                if status in (401, 403):
                    raise HttpAuthError(self.service, f"{what} was refused with HTTP {status}: "
                                        "check the API key", status=status)
                if status not in TRANSIENT_STATUSES:
                    raise HttpStatusError(self.service, f"{what} answered HTTP {status}: "
                                          f"{_snippet(response.text)}", status=status)
                problem = f"{what} answered HTTP {status}"
            attempt += 1
            if attempt > self.retry.retries:
                tries = f" (after {attempt} attempts)" if attempt > 1 else ""
                raise HttpTransientError(self.service, problem + tries, status=status)
            delay = self.retry.delay(attempt)
            log.info("%s: %s; retrying in %.2fs", self.service, problem, delay)
            await asyncio.sleep(delay)

    def json_of(self, response: httpx.Response) -> Any:
        """The JSON body, or ``HttpBadBody`` naming what came instead."""
        try:
            return response.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            kind = response.headers.get("content-type", "no content type")
            url = response.request.url.copy_with(query=None)
            raise HttpBadBody(
                self.service, f"{response.request.method} {url}"
                f" answered HTTP {response.status_code} with a body that is not JSON "
                f"({kind}): {_snippet(response.text) or '(empty)'}",
                status=response.status_code) from None
