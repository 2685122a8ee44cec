"""Reading the audit log."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..models import History
from ..validation import require_limit

# where a History row names what it acted on (an operation's ``describe()``)
SUBJECT_FIELDS = ("user", "group", "account", "name")


def history_match(*, op: str | None = None, author: str | None = None,
                  subject: str | None = None, since: datetime | None = None,
                  until: datetime | None = None) -> dict[str, Any]:
    """The filter of History rows by operation, author, subject (a user, group or account
    the row names, exactly) and time (``since``/``until`` inclusive)."""
    query: dict[str, Any] = {}
    if op:
        query["op"] = op
    if author:
        query["author"] = author
    if subject:
        query["$or"] = [{f"changes.{f}": subject} for f in SUBJECT_FIELDS]
    span: dict[str, datetime] = {}
    if since is not None:
        span["$gte"] = since
    if until is not None:
        span["$lte"] = until
    if span:
        query["timestamp"] = span
    return query


def subject_of(changes: dict[str, Any] | None) -> str:
    """The name a History row's ``changes`` acted on, for a list ("" when none)."""
    for field in SUBJECT_FIELDS:
        value = (changes or {}).get(field)
        if isinstance(value, str) and value:
            return value
    return ""


async def find_history(*, op: str | None = None, author: str | None = None,
                       since: datetime | None = None, until: datetime | None = None,
                       limit: int = 50) -> list[History]:
    """Newest first; ``since``/``until`` are inclusive."""
    require_limit(limit)
    query = history_match(op=op, author=author, since=since, until=until)
    return await History.find(query).sort(-History.timestamp).limit(limit).to_list()
