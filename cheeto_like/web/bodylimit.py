"""A cap on request bodies under ``/api/v1`` (``api.max_body_bytes``), before they are read.

Why here and not in the routes: a route (or FastAPI parsing its body) reads the whole
body into memory first, and ``/api/v1/login`` takes bodies from anybody. This ASGI
middleware answers 413 (a problem body) at once when ``Content-Length`` is too large,
and for a body without one (chunked) counts the bytes as the app receives them: past
the cap it answers 413 itself and tells the app the client has gone (so a route parsing
the body stops, whatever layers sit between), and drops what the app sends after.
The app never holds more than the cap plus one chunk. Other paths
(the dashboard's forms, with their own 64 KB cap; the puppet routes) pass untouched.
"""

from __future__ import annotations

import json
from typing import Any

from .problems import MEDIA_TYPE, SECURE_HEADERS

Scope = dict[str, Any]


def _detail(max_bytes: int) -> str:
    return f"the request body is larger than {max_bytes} bytes"


class BodyLimit:
    def __init__(self, app: Any, *, prefix: str, max_bytes: int) -> None:
        self.app = app
        self.prefix = prefix
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        path, root = scope.get("path", ""), scope.get("root_path", "")
        if root and path.startswith(root):  # behind a proxy's prefix the path holds it
            path = path[len(root):]
        if scope["type"] != "http" or not path.startswith(self.prefix):
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
                if declared > self.max_bytes:
                    await self._refuse(scope, send)
                    return
        seen = 0
        started = refused = False

        async def counted_receive() -> dict[str, Any]:
            """Past the cap: answer 413 now (unless the app already answered) and tell
            the app the client went away, so it stops reading; whatever it sends after
            that is dropped."""
            nonlocal seen, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    refused = True
                    if not started:
                        await self._refuse(scope, send)
                    return {"type": "http.disconnect"}
            return message

        async def watched_send(message: dict[str, Any]) -> None:
            nonlocal started
            if refused:
                return
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        await self.app(scope, counted_receive, watched_send)

    async def _refuse(self, scope: Scope, send: Any) -> None:
        body = json.dumps({"type": "about:blank", "title": "Content Too Large",
                           "status": 413,
                           "detail": _detail(self.max_bytes),
                           "instance": scope.get("path")}).encode()
        headers = [(b"content-type", MEDIA_TYPE.encode()),
                   (b"content-length", str(len(body)).encode()),
                   (b"connection", b"close")]
        headers += [(k.lower().encode(), v.encode()) for k, v in SECURE_HEADERS.items()]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body})
