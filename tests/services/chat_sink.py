"""A chat incoming-webhook sink: accepts ``POST /hooks/<token>`` with a JSON body, keeps
each message, and answers ``ok`` as Slack does (real HTTP on loopback, through
``http_server.ServerThread``). ``faults`` injects an HTTP status for the next posts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from .http_server import Fault, FaultPlan, ServerThread


@dataclass
class ChatSink:
    messages: list[tuple[str, Any]] = field(default_factory=list)  # (token, body)
    faults: FaultPlan = field(default_factory=FaultPlan)
    server: ServerThread | None = None

    def app(self) -> Starlette:
        async def hook(request: Request) -> Response:
            if (faulty := await self.faults.apply("hook")) is not None:
                return faulty
            try:
                body = await request.json()
            except ValueError:
                return PlainTextResponse("invalid_payload", status_code=400)
            if not isinstance(body, dict) or not isinstance(body.get("text"), str):
                return PlainTextResponse("no_text", status_code=400)
            self.messages.append((request.path_params["token"], body))
            return PlainTextResponse("ok")

        return Starlette(routes=[Route("/hooks/{token}", hook, methods=["POST"])])

    def start(self) -> ChatSink:
        self.server = ServerThread(self.app(), "chat-sink").start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()

    def url(self, token: str) -> str:
        assert self.server is not None
        return f"{self.server.url}/hooks/{token}"

    def fail_next(self, status: int) -> None:
        self.faults.add("hook", Fault(status=status))
