"""A small typed client for the HiPPO endpoints we use.

- ``GET  /api/EventQueue/PendingEvents`` -> a JSON list of queued events;
- ``POST /api/EventQueue/UpdateStatus`` with ``{"id", "status"}`` (marking an event
  Complete triggers HiPPO's own follow-up processing);
- ``POST /api/Notify/Styled`` with ``{"emails", "ccEmails", "subject", "paragraphs",
  "header"}`` (the HiPPO e-mail transport);
- ``POST /api/Action/SyncPuppetAccounts``.

The API key travels in ``X-API-Key``. A 401/403 raises ``HttpAuthError``: a bad key is
never mistaken for an empty queue. Events come back as ``QueuedEvent`` envelopes whose
``data`` stays a raw mapping: each event's payload is validated when it is handled, so
one malformed event cannot break the whole fetch.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from ..config import HippoConfig
from .http import HttpBadBody, JsonHttpClient, RetryPolicy

log = logging.getLogger(__name__)

PENDING_EVENTS = "api/EventQueue/PendingEvents"
UPDATE_STATUS = "api/EventQueue/UpdateStatus"
NOTIFY_STYLED = "api/Notify/Styled"
SYNC_PUPPET = "api/Action/SyncPuppetAccounts"


@dataclass(frozen=True)
class QueuedEvent:
    """One upstream event; ``raw`` is exactly what HiPPO sent."""

    id: int
    action: str
    status: str
    data: Any
    created_at: str | None
    updated_at: str | None
    raw: dict[str, Any] = field(repr=False)


@dataclass(frozen=True)
class UnreadableEvent:
    """A list entry without a usable integer ``id``: it cannot be tracked or answered."""

    position: int
    problem: str
    raw: Any = field(repr=False)


def parse_events(body: Any) -> tuple[list[QueuedEvent], list[UnreadableEvent]]:
    """Split a PendingEvents body into trackable events and unreadable entries."""
    if not isinstance(body, list):
        raise ValueError(f"expected a JSON list of events, got {type(body).__name__}")
    events: list[QueuedEvent] = []
    bad: list[UnreadableEvent] = []
    for position, item in enumerate(body):
        if not isinstance(item, dict):
            bad.append(UnreadableEvent(position, f"entry is a {type(item).__name__}, not an "
                                                 "object", item))
            continue
        event_id = item.get("id")
        if isinstance(event_id, bool) or not isinstance(event_id, int):
            bad.append(UnreadableEvent(position, f"entry has no integer id ({event_id!r})",
                                       item))
            continue
        events.append(QueuedEvent(
            id=event_id, action=str(item.get("action") or ""),
            status=str(item.get("status") or ""), data=item.get("data"),
            created_at=item.get("createdAt"), updated_at=item.get("updatedAt"), raw=item))
    return events, bad


class HippoClient(JsonHttpClient):
    service = "HiPPO"

    def __init__(self, config: HippoConfig, *,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        super().__init__(config.base_url,
                         headers={"X-API-Key": config.api_key.get_secret_value(),
                                  "Accept": "application/json"},
                         timeout=config.request_timeout_seconds,
                         retry=RetryPolicy.from_options(config), transport=transport)

    async def pending_events(self) -> tuple[list[QueuedEvent], list[UnreadableEvent]]:
        response = await self.request("GET", PENDING_EVENTS)
        body = self.json_of(response)
        try:
            return parse_events(body)
        except ValueError as exc:
            raise HttpBadBody(self.service, f"GET {PENDING_EVENTS}: {exc}",
                              status=response.status_code) from None

    async def update_status(self, event_id: int, status: str) -> None:
        """Tell HiPPO the event's outcome; returns only on HTTP 200."""
        await self.request("POST", UPDATE_STATUS, json_body={"id": event_id, "status": status})

    async def notify_styled(self, *, emails: Sequence[str], cc_emails: Sequence[str] = (),
                            subject: str, paragraphs: Sequence[str],
                            header: str | None = None) -> None:
        body: dict[str, Any] = {"emails": list(emails), "ccEmails": list(cc_emails),
                                "subject": subject, "paragraphs": list(paragraphs)}
        if header is not None:
            body["header"] = header
        await self.request("POST", NOTIFY_STYLED, json_body=body)

    async def sync_puppet_accounts(self) -> int:
        response = await self.request("POST", SYNC_PUPPET, ok=(200, 202, 204))
        return response.status_code
