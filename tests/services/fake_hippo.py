"""A small fake of HiPPO's API, implementing exactly the documented shapes we use.

- ``GET  /api/EventQueue/PendingEvents`` -> a list of QueuedEventModel
  (``{id, action, status, data: {groups: [{name}], accounts: [{kerberos, name, email, iam,
  mothra, key, accessTypes}], cluster, metadata}, createdAt, updatedAt}``), only those
  still ``Pending``;
- ``POST /api/EventQueue/UpdateStatus`` ``{id, status}`` -> 200 (404 for an unknown id);
  the event leaves the pending list unless the new status is Pending;
- ``POST /api/Notify/Styled`` ``{emails, ccEmails, subject, paragraphs, header}`` -> 200;
- ``POST /api/Action/SyncPuppetAccounts`` -> 200.

Every route wants ``X-API-Key`` (else 401). Faults (``state.faults.add(route, Fault(...))``)
give 5xx, 401, slow answers or HTML bodies. Routes: ``pending``, ``update``, ``notify``,
``puppet``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .http_server import FaultPlan, ServerThread

API_KEY = "hippo-test-key"


@dataclass
class FakeHippoState:
    api_key: str = API_KEY
    events: dict[int, dict[str, Any]] = field(default_factory=dict)
    status_updates: list[dict[str, Any]] = field(default_factory=list)
    notifications: list[dict[str, Any]] = field(default_factory=list)
    puppet_syncs: int = 0
    requests: list[tuple[str, str, str]] = field(default_factory=list)  # method, path, query
    faults: FaultPlan = field(default_factory=FaultPlan)
    extra_pending: list[Any] = field(default_factory=list)  # raw junk entries
    _ids: Any = field(default_factory=lambda: itertools.count(1001))

    def reset(self) -> None:
        self.events.clear()
        self.status_updates.clear()
        self.notifications.clear()
        self.requests.clear()
        self.extra_pending.clear()
        self.faults.clear()
        self.puppet_syncs = 0

    def add_event(self, action: str, *, cluster: str = "farm",
                  accounts: list[dict[str, Any]] | None = None,
                  groups: list[str] | None = None, metadata: dict[str, str] | None = None,
                  data: Any = None, status: str = "Pending") -> int:
        event_id = next(self._ids)
        now = datetime.now(UTC).isoformat()
        self.events[event_id] = {
            "id": event_id, "action": action, "status": status,
            "data": data if data is not None else {
                "groups": [{"name": g} for g in groups or []],
                "accounts": accounts or [], "cluster": cluster, "metadata": metadata or {}},
            "createdAt": now, "updatedAt": now}
        return event_id

    def pending(self) -> list[dict[str, Any]]:
        return [e for e in self.events.values() if e["status"] == "Pending"]

    def statuses_posted(self, event_id: int) -> list[str]:
        return [u["status"] for u in self.status_updates if u.get("id") == event_id]


def account(kerberos: str, mothra: Any = 1234567, *, key: str | None = None,
            access_types: list[str] | None = None, email: str | None = None,
            name: str | None = None) -> dict[str, Any]:
    """A QueuedEventAccountModel."""
    return {"kerberos": kerberos, "name": name or f"{kerberos.title()} Person",
            "email": email or f"{kerberos}@ucdavis.edu", "iam": "1000123456",
            "mothra": str(mothra) if mothra is not None else None, "key": key or "",
            "accessTypes": access_types if access_types is not None else ["SshKey"]}


def build_app(state: FakeHippoState) -> Starlette:
    async def guard(request: Request, route: str) -> Response | None:
        state.requests.append((request.method, request.url.path, request.url.query))
        if request.headers.get("x-api-key") != state.api_key:
            return JSONResponse({"error": "unauthorized"}, status_code=401)
        return await state.faults.apply(route)

    async def pending(request: Request) -> Response:
        if (fault := await guard(request, "pending")) is not None:
            return fault
        return JSONResponse([*state.pending(), *state.extra_pending])

    async def update(request: Request) -> Response:
        if (fault := await guard(request, "update")) is not None:
            return fault
        body = await request.json()
        state.status_updates.append(body)
        event = state.events.get(body.get("id"))
        if event is None:
            return JSONResponse({"error": "no such event"}, status_code=404)
        event["status"] = body.get("status")
        return JSONResponse({"ok": True})

    async def notify(request: Request) -> Response:
        if (fault := await guard(request, "notify")) is not None:
            return fault
        state.notifications.append(await request.json())
        return JSONResponse({"ok": True})

    async def puppet(request: Request) -> Response:
        if (fault := await guard(request, "puppet")) is not None:
            return fault
        state.puppet_syncs += 1
        return JSONResponse({"ok": True})

    return Starlette(routes=[
        Route("/api/EventQueue/PendingEvents", pending, methods=["GET"]),
        Route("/api/EventQueue/UpdateStatus", update, methods=["POST"]),
        Route("/api/Notify/Styled", notify, methods=["POST"]),
        Route("/api/Action/SyncPuppetAccounts", puppet, methods=["POST"]),
    ])


class FakeHippo:
    def __init__(self) -> None:
        self.state = FakeHippoState()
        self.server = ServerThread(build_app(self.state), "fake-hippo")

    @property
    def url(self) -> str:
        return self.server.url

    def start(self) -> FakeHippo:
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop()
