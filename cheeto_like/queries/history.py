"""Reading the audit log."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..models import History
from ..validation import require_limit


async def find_history(*, op: str | None = None, author: str | None = None,
                       since: datetime | None = None, until: datetime | None = None,
                       limit: int = 50) -> list[History]:
    """Newest first; ``since``/``until`` are inclusive."""
    require_limit(limit)
    query: dict[str, Any] = {}
    if op:
        query["op"] = op
    if author:
        query["author"] = author
    span: dict[str, datetime] = {}
    if since is not None:
        span["$gte"] = since
    if until is not None:
        span["$lte"] = until
    if span:
        query["timestamp"] = span
    return await History.find(query).sort(-History.timestamp).limit(limit).to_list()
