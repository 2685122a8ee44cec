"""The client of our own ``/api/v1`` (``cheeto login``, ``me``, ``usage``, ``quota``).

A 4xx answer becomes ``ApiRefused`` (exit 2) carrying the problem's ``detail``, so the
person sees the server's one line ("alice may not quota:write"); no answer or a 5xx is
an ``ExternalError`` (exit 1). The token travels in the ``Authorization`` header only,
never in a URL, and no error message repeats it.
"""

from __future__ import annotations

from typing import Any

import httpx

from ..errors import CheetoError, ExternalError


class ApiRefused(CheetoError):
    """The API refused the request (a 4xx); exit 2 like any bad input."""

    exit_code = 2
    http_status = 400


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text.strip().splitlines()[0][:200] if response.text.strip() else ""
    if isinstance(body, dict):
        return str(body.get("detail") or body.get("title") or "")
    return ""


class ApiClient:
    def __init__(self, base_url: str, *, token: str | None = None, timeout: float = 30.0,
                 verify: str | bool = True, transport: httpx.AsyncBaseTransport | None = None,
                 ) -> None:
        headers = {"Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.base_url = base_url.rstrip("/")
        self._client = httpx.AsyncClient(base_url=self.base_url, headers=headers,
                                         timeout=timeout, verify=verify, transport=transport)

    async def __aenter__(self) -> ApiClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._client.aclose()

    async def call(self, method: str, path: str, *, params: dict[str, Any] | None = None,
                   json: Any = None) -> Any:
        query = {k: v for k, v in (params or {}).items() if v is not None}
        try:
            response = await self._client.request(method, f"/api/v1{path}", params=query,
                                                  json=json)
        except httpx.HTTPError as exc:
            raise ExternalError(f"cannot reach the API at {self.base_url}: "
                                f"{type(exc).__name__}", transient=True) from None
        if response.status_code >= 500:
            raise ExternalError(f"the API answered {response.status_code}: "
                                f"{_detail(response) or 'server error'}", transient=True)
        if response.status_code >= 400:
            detail = _detail(response) or response.reason_phrase
            hint = " (run: cheeto login)" if response.status_code == 401 else ""
            raise ApiRefused(f"{detail}{hint}")
        if response.status_code == 204 or not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            raise ExternalError(f"the API at {self.base_url} did not answer JSON") from None
