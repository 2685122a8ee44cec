"""Run an ASGI app with uvicorn on a free loopback port, in a background thread.

Used by the fake HiPPO and IAM services: real HTTP over a real socket (so timeouts,
retries and headers are exercised exactly as in production), started once per session.
Faults are injected per route: an HTTP status, a slow answer or a body that is not JSON.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.responses import JSONResponse, PlainTextResponse, Response

from ._proc import ServiceError


def free_loopback_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServerThread:
    """``start()`` returns once the socket accepts connections; ``stop()`` joins."""

    def __init__(self, app: Any, name: str) -> None:
        self.name = name
        self.port = free_loopback_port()
        self.server = uvicorn.Server(uvicorn.Config(
            app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off",
            access_log=False))
        self.thread = threading.Thread(target=self.server.run, name=name, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise ServiceError(f"{self.name} did not start on port {self.port}")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


@dataclass(frozen=True)
class Fault:
    """``status``: answer with it; ``delay``: sleep first (then answer normally or with
    ``status``); ``malformed``: HTTP 200 with an HTML body."""

    status: int | None = None
    delay: float = 0.0
    malformed: bool = False


@dataclass
class FaultPlan:
    """Faults queued per route name, consumed one per request."""

    queued: dict[str, deque[Fault]] = field(default_factory=lambda: defaultdict(deque))

    def add(self, route: str, fault: Fault, times: int = 1) -> None:
        for _ in range(times):
            self.queued[route].append(fault)

    def clear(self) -> None:
        self.queued.clear()

    async def apply(self, route: str) -> Response | None:
        """The faulty response for this request, or None to answer normally."""
        queue = self.queued.get(route)
        if not queue:
            return None
        fault = queue.popleft()
        if fault.delay:
            await asyncio.sleep(fault.delay)
        if fault.malformed:
            return PlainTextResponse("<html><body>Service Unavailable</body></html>",
                                     media_type="text/html")
        if fault.status is not None:
            return JSONResponse({"error": f"injected {fault.status}"}, status_code=fault.status)
        return None
